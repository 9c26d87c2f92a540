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


def step(tier, *offers) -> None:
    """One step's stores: each ``(seq, blocks)`` offers all its blocks, in this order."""
    tier.hold_stores()
    for seq, blocks in offers:
        tier.computed(seq, blocks, len(blocks))
    tier.flush_stores()


@pytest.mark.parametrize("same_step, reused", [(True, False), (False, True)])
def test_a_block_another_offer_of_the_step_stored_is_not_reused(same_step, reused):
    """Request 0 stores A, request 1 offers A and B. In the same step A is not written yet when request 1's
    offer comes (vLLM: a chunk not ready), so request 1 does not reuse it and A stays in T1 when request 1
    finishes; a step later A is its reuse and moves to T2."""
    t = ArcTier(2, block_bytes=10)
    if same_step:
        step(t, (0, [A]), (1, [A, B]))
    else:
        step(t, (0, [A]))
        step(t, (1, [A, B]))
    t.release(1, finished=True)
    step(t)  # closes request 1's record
    assert (A in t._t2) == reused and (A in t._t1) != reused and B in t._t1
    t.check_invariants()


@pytest.mark.parametrize("policy", [ArcTier, LruTier])
def test_a_block_stored_in_the_same_step_is_not_evicted(policy):
    """A host of one: request 0 stores A, and request 1's B, offered in the same step, cannot evict A (not
    written yet), so B is not stored; offered again with the next step's stores, it evicts A."""
    t = policy(1, block_bytes=10)
    step(t, (0, [A]), (1, [B]))
    assert A in t and B not in t
    step(t, (1, [B]))
    assert B in t and A not in t
    t.check_invariants()


def test_a_failed_store_is_made_again_at_each_step_that_schedules_its_sequence():
    """A host of two: request 0 stores A and B in one step; request 1's C, offered in the same step, cannot
    evict them (not written yet) and fails. The next step that schedules request 1 offers C again, now able
    to evict; a step that does not schedule it (``scheduled`` without it) does not."""
    t = LruTier(2, block_bytes=10)
    t.hold_stores()
    t.computed(0, [A, B], 2)
    t.computed(1, [103], 1)
    t.flush_stores(scheduled=[0, 1])
    assert 103 not in t and 1 in t.behind
    t.hold_stores()
    t.flush_stores(scheduled=[0])  # request 1 not scheduled: no offer
    assert 103 not in t and 1 in t.behind
    t.hold_stores()
    t.flush_stores(scheduled=[0, 1])
    assert 103 in t and not t.behind
    t.check_invariants()


def test_a_failed_store_is_not_made_again_while_nothing_changed():
    """An offer larger than the host fails whenever it is made; it is due again at the next step, once the
    writes of its own step are done (they may have been in the way), and, failing then too with nothing
    changed after, not again (the fast-forward may skip those steps)."""
    t = LruTier(2, block_bytes=10)
    step(t, (0, [A]), (1, [201, 202, 203]))
    assert 1 in t.behind and t.retries_due  # A is being written until the next step
    step(t)  # request 1 not scheduled: no offer, but A is written now
    assert t.retries_due
    t.hold_stores()
    t.flush_stores(scheduled=[1])
    assert 1 in t.behind and not t.retries_due


def test_a_finished_request_makes_its_failed_store_once_more():
    """vLLM offers a finished request's blocks once more, after the next step's stores: under ARC the blocks
    it held, evicted meanwhile into B1, are then store misses that B1 remembers, and grow T1's target. A
    host of two holds A and B; request 1 offers A, B and C (A and B held: reused; C does not fit beside them,
    as the offer protects them) and finishes; request 2 stores D and E, evicting A and B into B1; the next
    step's stores make request 1's offer again: A and B are now misses in B1 (+1 each), and its store fails
    again (D and E are being written)."""
    t = ArcTier(2, block_bytes=10)
    step(t, (0, [A, B]))
    step(t, (1, [A, B, 103]))
    assert 103 not in t and 1 in t.behind
    t.release(1, finished=True)
    t.hold_stores()
    t.computed(2, [104, 105], 2)
    t.flush_stores(scheduled=[2])
    assert A not in t and B not in t and t.target_t1_size == 2
    t.check_invariants()
