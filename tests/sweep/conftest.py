"""The sweep tests' fake simulators (`test_sweep_fakes.py`) fail on purpose at ``allocator="broken"``; a
`SimConfig` names only registered allocators, so the name is registered here (as a paged pool, never run)."""

import pytest

from allocators import ALLOCATORS
from allocators.paged import PagedAllocator


@pytest.fixture(autouse=True)
def broken_allocator_name(monkeypatch):
    monkeypatch.setitem(ALLOCATORS, "broken", PagedAllocator)
