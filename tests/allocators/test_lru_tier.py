"""The write-through host tier by hand, as vLLM 0.33's CPU offloading with its LRU policy decides: a request's
tail leaves before its head, a finished request's blocks outrank a running one's, a store that cannot evict
enough outside its offer stores nothing and is offered again with the next blocks, a request that loads host
hits offers only the blocks after them, a preempted request's blocks are not ranked anew, and swapped KV
evicts the lowest rank."""

import pytest

from allocators.lru_tier import LruTier

A, B, C, D, E, F, X = 101, 102, 103, 104, 105, 106, 199


def tier(blocks: int) -> LruTier:
    return LruTier(blocks, block_bytes=10)


@pytest.mark.parametrize("finished", [False, True])
def test_a_requests_tail_leaves_before_its_head(finished):
    """Four blocks stored by one request, then one more block: the fourth (the tail) makes room, whether the
    first request still runs (ranks ``(request, -position)``) or has finished (ranked anew, tail first)."""
    t = tier(4)
    assert t.computed(0, [A, B, C, D], 4) == 4
    t.release(0, finished=finished)
    assert t.computed(1, [E], 1) == 1
    assert (A in t, B in t, C in t, D in t, E in t) == (True, True, True, False, True)
    assert t.evicted_blocks == 1
    t.check_invariants()


@pytest.mark.parametrize("finished, first_out", [(True, D), (False, B)])
def test_a_finished_request_outranks_one_still_running(finished, first_out):
    """Request 0 stores A, B; request 1 (ranked after it) stores C, D; then request 0 is freed. Finished, A and
    B are ranked anew, so the running request's blocks go first, its tail D before C; preempted, request 0's
    blocks keep their earlier rank and go first, B before A."""
    t = tier(4)
    t.computed(0, [A, B], 2)
    t.computed(1, [C, D], 2)
    t.release(0, finished=finished)
    t.computed(2, [E], 1)
    assert first_out not in t and t.cached_blocks == 4
    t.computed(3, [F], 1)
    assert {A, B, C, D} - {x for x in (A, B, C, D) if x in t} == ({C, D} if finished else {A, B})
    t.check_invariants()


def test_a_store_that_cannot_make_room_stores_nothing_and_is_offered_again():
    """Two host blocks: three blocks at once need an eviction and nothing outside the offer can go, so none is
    stored; the next offer carries them again (four blocks: still none); a lone block later fits."""
    t = tier(2)
    assert t.store_evicts(0, [A, B, C], 3) and not t.store_evicts(0, [A, B, C], 2)  # 3 new blocks, 2 free
    assert t.computed(0, [A, B, C], 3) == 0 and t.cached_blocks == 0
    assert t.offers(0, [A, B, C], 3)  # still due: offered again with the next fill, even past the hashes
    assert t.computed(0, [A, B, C, D], 4) == 0 and t.cached_blocks == 0 and t.offloaded_blocks == 0
    assert t.computed(1, [X], 1) == 1 and X in t
    t.check_invariants()


def test_a_store_offers_only_the_blocks_since_the_last_one():
    t = tier(8)
    assert t.computed(0, [A, B, C, D], 2) == 2  # A, B computed
    assert t.computed(0, [A, B, C, D], 4) == 2  # then C, D: A and B are not offered again
    assert t.computed(0, [A, B, C, D], 4) == 0
    assert t.offloaded_blocks == 4
    assert not t.offers(0, [A, B, C, D], 5) and t.offers(1, [A], 1)  # all offered; a new request has offered none


def test_blocks_past_the_tokens_hashed_are_stored_once_they_are_hashed():
    """vLLM's async scheduling keys a request's stores by its block hashes, which grow only as its outputs are
    processed (`RequestTier.hashed_blocks`): an offer stops at the blocks hashed, and the next step that schedules
    the request offers the rest as far as they are hashed then (in its scheduled order), as does its finish,
    whole; a preemption drops them, as vLLM schedules the victim no more."""
    t = tier(8)
    t.hold_stores(0)
    t.flush_stores()
    t.bind(0, "r", prompt_blocks=1)
    t.hashed_blocks = {0: 1}
    t.hold_stores(1)
    assert t.computed(0, [A, B, C], 3) == 0  # held until the step is planned
    t.flush_stores([0])
    assert A in t and B not in t and 0 in t.behind and t.retries_due
    t.hashed_blocks = {0: 2}
    t.hold_stores(2)
    t.flush_stores([0])  # the next step schedules it: B is hashed now, C is not
    assert B in t and C not in t and 0 in t.behind
    t.release(0, finished=True)  # its finish offers C, after the next step's stores
    t.hold_stores(3)
    t.flush_stores()
    assert C in t and t.offloaded_blocks == 3 and not t.behind
    t.bind(1, "s", prompt_blocks=0)
    t.hashed_blocks = {1: 0}
    t.hold_stores(4)
    t.computed(1, [D, E], 1)
    t.flush_stores([1])
    t.release(1, finished=False)  # preempted: D is not offered
    t.hold_stores(5)
    t.flush_stores()
    assert D not in t and not t.behind
    t.check_invariants()


def test_a_request_that_loads_host_hits_offers_only_the_blocks_after_them():
    """vLLM's default (chunk-level) policy skips a loading request's hit blocks when it stores; a request
    without host hits offers its GPU hits too, reusing the held ones."""
    t = tier(8)
    t.computed(0, [A, B], 2)
    t.release(0, finished=True)
    assert t.lookup([A, B, C], 0, 3) == 2
    assert t.load(1, [A, B, C], 0, 2) == 2 and t.reloaded_blocks == 2
    assert t.computed(1, [A, B, C], 3) == 1 and C in t
    assert t.computed(2, [A, B, X], 3) == 1 and X in t  # no load: A and B offered, held, reused
    with pytest.raises(KeyError):
        t.load(3, [D], 0, 1)
    t.check_invariants()


def test_swapped_kv_evicts_the_lowest_rank():
    t = tier(3)
    t.computed(0, [A, B, C], 3)
    assert t.swap_out(7, 1) and C not in t and A in t
    assert not t.swap_out(8, 3)  # 2 cached + 0 free < 3
    t.swap_in(7)
    t.check_invariants()


def test_the_write_back_calls_are_refused():
    t = tier(2)
    with pytest.raises(TypeError, match="given computed blocks"):
        t.offload_many([A])
    with pytest.raises(TypeError, match="loads a request's hits with `load`"):
        t.take([A])
