"""A swap-out into a write-through host tier (``--preemption swap`` beside ``--offload-write-policy
write_through``): a hashed block the tier stores already is not copied again but kept cached as the parked copy,
out of reach of evictions until the request is swapped back in; a block another swapped request parks is
shared with it; and a swap-out refused for want of room changes nothing."""

import pytest

from allocators.arc_tier import ArcTier
from allocators.lru_tier import LruTier

A, B, C, D, E, F = 101, 102, 103, 104, 105, 106


@pytest.mark.parametrize("cls", [LruTier, ArcTier])
def test_a_swap_out_keeps_the_blocks_the_host_stores_as_its_parked_copies(cls):
    """A and B are stored (their KV on the host): a swap-out of 3 blocks with hashes A, B, E copies only E's
    block (one free block taken), and A and B stay cached, where lookups find them, but no store evicts them
    while parked: a store that needs them fails whole. Swapped back in, they may be evicted again."""
    t = cls(4, block_bytes=10)
    assert t.computed(1, [A, B], 2) == 2
    assert t.swap_out(7, 3, frozenset({A, B, E}))
    assert (t.shared_blocks, t.swapped_blocks, t.num_free, t.cached_blocks) == (2, 1, 1, 2)
    assert A in t and B in t and t.lookup([A, B], 0, 2) == 2
    t.check_invariants()
    assert t.computed(3, [C, D, F], 3) == 0  # needs 2 evictions: only A and B are cached, both parked copies
    assert A in t and B in t and t.evicted_blocks == 0
    t.check_invariants()
    assert t.swap_in(7) == 3 and t.num_free == 2
    assert t.computed(3, [C, D, F], 3) == 3 and t.evicted_blocks == 1  # retried: one of A, B evicted now
    t.check_invariants()


@pytest.mark.parametrize("cls", [LruTier, ArcTier])
def test_two_requests_parking_one_hash_share_its_host_block(cls):
    """E parked by 7 and then by 8: one host block, handed on to 8 when 7 is swapped back in (vLLM v0's
    prefix-caching CPU allocator keeps one block a hash, `HostTier.swap_out`)."""
    t = cls(4, block_bytes=10)
    assert t.swap_out(7, 1, frozenset({E}))
    assert t.swap_out(8, 2, frozenset({E, F}))
    assert (t.joined_blocks, t.swapped_blocks, t.num_free) == (1, 2, 2)
    t.check_invariants()
    assert t.swap_in(7) == 1 and (t.swapped_blocks, t.num_free) == (2, 2)
    t.check_invariants()
    assert t.swap_in(8) == 2 and t.num_free == 4 and E not in t  # a write-through tier caches what is computed
    t.check_invariants()


@pytest.mark.parametrize("cls", [LruTier, ArcTier])
def test_a_refused_swap_out_changes_nothing(cls):
    """No room (A and B are parked copies, nothing is free): refused, and the tier is as it was, its count of
    changes included (before: counted, so offers that failed for want of room were made again for nothing)."""
    t = cls(2, block_bytes=10)
    assert t.computed(1, [A, B], 2) == 2
    assert t.swap_out(7, 2, frozenset({A, B}))
    before = (t._changes, dict(t._lru), list(t._free), dict(t._swapped), dict(t._parked_copies), t.shared_blocks)
    assert not t.swap_out(8, 1, frozenset())
    assert not t.swap_out(9, 2, frozenset({A, C}))
    assert (t._changes, dict(t._lru), list(t._free), dict(t._swapped), dict(t._parked_copies),
            t.shared_blocks) == before
    t.check_invariants()


@pytest.mark.parametrize("cls", [LruTier, ArcTier])
def test_a_swap_out_evicts_no_block_a_store_of_the_same_step_is_writing(cls):
    """A and B stored in step 1, C and D in step 2 (still being written: not ready, which vLLM's offloading
    policies never evict): a swap-out of 2 blocks in step 2 finds only A and B to evict, and one of 3 blocks
    is refused, changing nothing. In step 3 the writes have landed and C and D may go."""
    t = cls(4, block_bytes=10)
    t.begin_step(1)
    assert t.computed(1, [A, B], 2) == 2
    t.begin_step(2)
    assert t.computed(2, [C, D], 2) == 2
    assert not t.swap_out(7, 3, frozenset())
    assert all(h in t for h in (A, B, C, D))
    assert t.swap_out(7, 2, frozenset())
    assert C in t and D in t and A not in t and B not in t
    t.check_invariants()
    t.begin_step(3)
    assert t.swap_out(8, 2, frozenset()) and C not in t and D not in t
    t.check_invariants()
