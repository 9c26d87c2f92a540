"""Fixtures shared by the simulation tests."""

from dataclasses import replace

import pytest

from allocators import catalog


@pytest.fixture
def hybrid_model(monkeypatch):
    """``test-hybrid``: Llama-3-8B's shape with 24 layers of window 256 and 8 full ones (a 3 : 1 pattern)."""
    model = replace(catalog.MODELS["llama-3-8b"], name="test-hybrid", sliding_window=256, sliding_window_layers=24)
    monkeypatch.setitem(catalog.MODELS, "test-hybrid", model)
    return "test-hybrid"
