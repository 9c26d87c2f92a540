"""Proof of the allocator seam: a new allocator is one class plus one `ALLOCATORS` entry, touching nothing in
`sim/`. The class below is written against the contract alone (`allocators.base.Allocator`) and runs full
simulations through `run_simulation`, fast-forwarded and step by step, with the invariants checked."""

from collections.abc import Mapping

import numpy as np
import pytest

import allocators
from allocators.base import (
    FREE_OWNER,
    NO_COPIES,
    SLOT_FREE,
    SLOT_TOKEN,
    Admission,
    Allocator,
    Copy,
    MemoryBreakdown,
)
from sim import SimConfig, run_simulation
from workloads import Workload


class SlotListAllocator(Allocator):
    """Token-exact allocation: every token gets one slot popped from a free list (no reservation, no
    fragmentation); a fork copies the parent's tokens into fresh slots."""

    name = "slot-list"
    kind = "paged"  # blocks of one slot

    def __init__(self, capacity_slots: int, *, block_size: int = 16, max_model_len: int = 2048,
                 placement: str = "buddy", prefix_caching: bool = False, watermark: float = 0.0) -> None:
        super().__init__(capacity_slots, block_size=block_size, max_model_len=max_model_len, placement=placement,
                         prefix_caching=prefix_caching, watermark=watermark)
        self._free = list(range(self.capacity - 1, -1, -1))
        self._slots: dict[int, list[int]] = {}

    def never_fits(self, num_tokens, *, final_tokens, max_total_tokens=None):
        need = max(num_tokens, final_tokens)
        return None if need <= self.capacity else f"{self.name}: needs {need} slots, the pool has {self.capacity}"

    def _take(self, seq_id: int, count: int) -> list[int] | None:
        if count > len(self._free):
            return None
        taken = [self._free.pop() for _ in range(count)]
        self._slots.setdefault(seq_id, []).extend(taken)
        return taken

    def admit(self, seq_id, num_tokens, *, final_tokens, max_total_tokens=None, block_hashes=(), **_):
        if num_tokens > len(self._free):
            return None
        self._take(seq_id, num_tokens)
        return Admission()

    def grow(self, seq_id, num_tokens=1):
        if num_tokens > len(self._free):
            return None
        self._take(seq_id, num_tokens)
        return NO_COPIES

    def fork(self, parent_id, child_id, *, final_tokens):
        parent = self._slots[parent_id]
        if len(parent) > len(self._free):
            return None
        child = self._take(child_id, len(parent))
        return (Copy(parent[0], child[0], len(parent)),)

    def free(self, seq_id):
        slots = self._slots.pop(seq_id)
        self._free.extend(reversed(slots))
        return len(slots)

    def num_tokens(self, seq_id):
        return len(self._slots[seq_id])

    def headroom(self, seq_id):
        return 0

    def breakdown(self, waiting=False):
        used = self.capacity - len(self._free)
        free = len(self._free)
        return MemoryBreakdown(self.capacity, used, 0, 0, free if waiting else 0, 0 if waiting else free,
                               used, self.capacity)

    def memory_map(self):
        owners = np.full(self.capacity, FREE_OWNER, dtype=np.int64)
        for seq_id, slots in self._slots.items():
            owners[slots] = seq_id
        return owners

    def slot_states(self, pending: Mapping[int, int] | None = None):
        states = np.full(self.capacity, SLOT_FREE, dtype=np.int8)
        for slots in self._slots.values():
            states[slots] = SLOT_TOKEN
        return states

    def check_invariants(self):
        held = [s for slots in self._slots.values() for s in slots]
        assert len(held) == len(set(held)) and not set(held) & set(self._free), "a slot has two owners"
        assert len(held) + len(self._free) == self.capacity, "slots not conserved"


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(allocators.ALLOCATORS, "slot-list", SlotListAllocator)  # the one dict line


@pytest.mark.parametrize("step_by_step", [False, True])
def test_a_new_allocator_runs_a_full_simulation(registered, step_by_step):
    rng = np.random.default_rng(3)
    count = 60
    w = Workload(arrival_time_s=np.sort(rng.uniform(0, 20, count)), prompt_tokens=rng.integers(20, 300, count),
                 output_tokens=rng.integers(5, 200, count), name="seam", n=np.where(np.arange(count) % 7, 1, 2))
    config = SimConfig(allocator="slot-list", kv_tokens=3000, step_by_step=step_by_step, debug_invariants=5,
                       memory_snapshots=2)
    result = run_simulation(config, w)
    assert result.summary["allocator"] == "slot-list"
    assert result.summary["completed"] + result.summary["rejected"] == count
    assert result.summary["completed"] > 0 and (result.requests["rejected"] == 0).any()
    assert len(result.memory) > 0  # the memory map read the allocator's owners and states


def test_fast_and_step_by_step_agree_for_the_new_allocator(registered):
    rng = np.random.default_rng(5)
    count = 40
    w = Workload(arrival_time_s=np.sort(rng.uniform(0, 10, count)), prompt_tokens=rng.integers(20, 200, count),
                 output_tokens=rng.integers(5, 100, count), name="seam")
    fast, slow = (run_simulation(SimConfig(allocator="slot-list", kv_tokens=2000, step_by_step=s), w)
                  for s in (False, True))
    cols = ["admitted_s", "first_token_s", "finished_s", "preemptions"]
    assert np.allclose(fast.requests[cols].to_numpy(), slow.requests[cols].to_numpy(), rtol=1e-9, equal_nan=True)
