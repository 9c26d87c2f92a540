"""A write-through host tier never evicts the blocks a load is reading (``pinned``, ``--offload-loads async``)
until the load lands, whatever makes the room: a store (vLLM's offloading connector holds them) or a swap-out
parking a preempted request's KV (kvsim's rule for swap beside the tier, held to the same protection)."""

import pytest

from allocators.arc_tier import ArcTier
from allocators.lru_tier import LruTier

A, B, C, D, E = 101, 102, 103, 104, 105


def loading(cls: type) -> LruTier | ArcTier:
    """A full host of 4 blocks (A..D, stored by a finished request) whose C and D request 2 is loading (A and B
    are its GPU hits). Unprotected, ARC's next victims are C and D; LRU's three next are A, B and one of them."""
    t = cls(4, block_bytes=10)
    t.computed(1, [A, B, C, D], 4)
    t.release(1, True)
    assert t.lookup([A, B, C, D], 2, 4) == 2
    t.load(2, [A, B, C, D], 2, 2)
    t.pinned = {C, D}
    return t


@pytest.mark.parametrize("cls", [LruTier, ArcTier])
def test_a_swap_out_makes_room_around_the_blocks_being_loaded(cls):
    """Two blocks of swap evict A and B, not the loading C and D (before: ARC evicted C and D)."""
    t = loading(cls)
    assert t.swap_out(7, 2)
    assert C in t and D in t and A not in t and B not in t
    t.check_invariants()


@pytest.mark.parametrize("cls", [LruTier, ArcTier])
def test_a_swap_out_that_needs_a_block_being_loaded_fails_until_the_load_lands(cls):
    """Three blocks of swap would need C or D: refused, nothing changed; once the load lands (unpinned) the
    same swap-out evicts as the policy says."""
    t = loading(cls)
    assert not t.swap_out(7, 3)
    assert all(h in t for h in (A, B, C, D)) and t.num_free == 0 and t.swapped_blocks == 0
    t.pinned = set()
    assert t.swap_out(7, 3) and t.swapped_blocks == 3 and t.cached_blocks == 1
    t.check_invariants()


@pytest.mark.parametrize("cls", [LruTier, ArcTier])
def test_a_store_makes_room_around_the_blocks_being_loaded(cls):
    """The same protection for a store: E evicts A or B, never C or D."""
    t = loading(cls)
    assert t.computed(3, [E], 1) == 1
    assert C in t and D in t and E in t and (A in t) != (B in t)
    t.check_invariants()
