"""The ARC write-through host tier by hand, as vLLM 0.33's ARC policy decides: blocks a request reused move to
T2 when it finishes and survive a scan of one-off blocks that LRU flushes them with; a store miss that the
ghost list of T1 remembers grows T1's target, one that T2's remembers shrinks it; eviction takes T1 while it
holds at least its target, never a block of the offer, and a store that cannot make room stores nothing."""

import pytest

from allocators.arc_tier import ArcTier
from allocators.lru_tier import LruTier

A, B = 101, 102


def scan(tier, first_seq: int, blocks: list[int]) -> None:
    """One-off requests of two blocks each, one after another."""
    for k in range(0, len(blocks), 2):
        seq = first_seq + k
        tier.computed(seq, blocks[k:k + 2], 2)
        tier.release(seq, finished=True)


@pytest.mark.parametrize("policy, survive", [(ArcTier, True), (LruTier, False)])
def test_reused_blocks_survive_a_scan_under_arc(policy, survive):
    """A and B are stored by one request and reused by the next (T2 under ARC); then six one-off blocks pass
    through a host of four: ARC keeps A and B (its target for T1 is 0, so T1 gives up its own), LRU drops
    them."""
    t = policy(4, block_bytes=10)
    t.computed(0, [A, B], 2)
    t.release(0, finished=True)
    t.computed(1, [A, B], 2)  # held: reused
    t.release(1, finished=True)
    scan(t, 10, [201, 202, 203, 204, 205, 206])
    assert (A in t and B in t) == survive
    assert t.cached_blocks == 4
    t.check_invariants()


def test_a_store_miss_remembered_by_b1_grows_the_target_and_by_b2_shrinks_it():
    t = ArcTier(2, block_bytes=10)
    scan(t, 0, [1, 2, 3, 4])  # 1 and 2 leave T1 for B1
    assert t.target_t1_size == 0 and 1 not in t
    scan(t, 10, [1, 5])  # 1 missed while B1 remembers it: +max(1, |B2| / |B1|) = +1
    assert t.target_t1_size == 1
    t.computed(20, [1, 5], 2)  # both held: reused, so T2 when the request finishes
    t.release(20, finished=True)
    scan(t, 30, [6, 7])  # T1 is empty: T2's oldest (5, then 1) go to B2
    assert 1 not in t and 5 not in t
    scan(t, 40, [5, 8])  # 5 missed while B2 remembers it: -max(1, |B1| / |B2|)
    assert t.target_t1_size == 0
    t.check_invariants()


def test_eviction_never_takes_a_block_of_the_offer_and_fails_whole():
    """A host of two holding A and B: an offer of A, B and C needs one eviction and everything it could take
    is offered, so nothing is stored; C alone then takes T1's oldest."""
    t = ArcTier(2, block_bytes=10)
    t.computed(0, [A, B], 2)
    assert t.computed(1, [A, B, 103], 3) == 0 and 103 not in t and A in t and B in t
    assert t.computed(2, [103], 1) == 1 and A not in t and B in t
    t.check_invariants()


def test_swapped_kv_and_the_write_back_calls():
    t = ArcTier(2, block_bytes=10)
    t.computed(0, [A, B], 2)
    assert t.swap_out(7, 1) and A not in t and B in t
    with pytest.raises(TypeError):
        t.offload_many([A])
    t.swap_in(7)
    t.check_invariants()
