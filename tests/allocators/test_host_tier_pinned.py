"""A write-back host tier never evicts the blocks a load is reading (``pinned``, ``--offload-loads async``) until
the load lands, whatever makes the room: a GPU eviction's spill (one at a time or in bulk), a swap-out parking a
preempted request's KV, or the forecast of either. A pinned block keeps its place in the LRU order, so it is the
first to go once unpinned; a store or swap-out that finds no room outside the pinned blocks is refused, as the
write-through tier's are (`test_request_tier_pinned`)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocators.host_tier import HostTier
from tests.allocators.test_host_tier import ReferenceTier, lru_order, operation, run_operations
from tests.soak import examples


class PinningReference(ReferenceTier):
    """`ReferenceTier` whose evictions pass over the ``pinned`` hashes, leaving them where they are in the order,
    and whose swap-outs neither count them as room nor take one as a parked copy (it is copied instead)."""

    def __init__(self, num_blocks: int) -> None:
        super().__init__(num_blocks)
        self.pinned: set[int] = set()

    def evictable(self) -> list[int]:
        return [h for h in self.lru if h not in self.pinned]


pinning = st.one_of(operation,
                    st.tuples(st.just("pin"), st.lists(st.integers(0, 40), max_size=6)),
                    st.tuples(st.just("unpin"), st.lists(st.integers(0, 40), max_size=6)))


@settings(max_examples=examples(300), deadline=None)
@given(num_blocks=st.integers(0, 12), ops=st.lists(pinning, max_size=40))
def test_the_host_tier_is_an_lru_that_passes_over_pinned_blocks(num_blocks, ops):
    """Random offloads, loads, swaps, pins (of cached hashes, as a load pins its hits) and unpins: the same
    hashes in the same order on the same blocks as the reference, with the same counters and forecasts."""
    tier, ref = HostTier(num_blocks, 10), PinningReference(num_blocks)

    def pin(name: str, arg: list[int]) -> None:
        if name == "pin":  # cached hashes only, as a load pins its hits
            cached = {h for h in arg if h in ref.lru}
            tier.pinned |= cached
            ref.pinned |= cached
        else:
            tier.pinned -= set(arg)
            ref.pinned -= set(arg)

    run_operations(tier, ref, ops, pin)


def full_host_loading_1() -> HostTier:
    """A full host of 4 blocks, 1 the oldest, whose load is in flight (pinned)."""
    tier = HostTier(4, 10)
    assert tier.offload_many([1, 2, 3, 4]) == 4
    tier.pinned = {1}
    return tier


def test_a_pinned_block_survives_the_spills_that_evict_around_it_and_keeps_its_place():
    """A batch of two (the bulk path) and one more (one at a time) evict 2, 3 and 4, not the pinned 1, and the
    forecast says so; once the load lands, 1 is still the oldest and the next to go."""
    tier = full_host_loading_1()
    assert tier.evicted_by([5, 6]) == [2, 3]
    assert tier.offload_many([5, 6]) == 2 and 1 in tier and 2 not in tier and 3 not in tier
    assert tier.offload_many([7]) == 1 and 4 not in tier
    assert [h for h, _ in lru_order(tier)] == [1, 5, 6, 7] and tier.evicted_blocks == 3
    tier.check_invariants()
    tier.pinned.clear()
    assert tier.evicted_by([8]) == [1]
    assert tier.offload_many([8]) == 1 and 1 not in tier
    tier.check_invariants()


def test_a_spill_that_finds_only_pinned_blocks_is_not_stored():
    """Every cached block is being loaded and none is free: the evicted GPU block is not stored (its KV is
    dropped), and nothing is forecast to leave; the loads keep their blocks."""
    tier = HostTier(2, 10)
    assert tier.offload_many([1, 2]) == 2
    tier.pinned = {1, 2}
    assert tier.evicted_by([3, 4]) == []
    assert tier.offload_many([3, 4]) == 0 and tier.offload_many([5]) == 0
    assert 1 in tier and 2 in tier and 3 not in tier and (tier.offloaded_blocks, tier.evicted_blocks) == (2, 0)
    tier.check_invariants()


def test_a_swap_out_makes_room_around_the_blocks_being_loaded_or_is_refused():
    """Three blocks of swap evict 2, 3 and 4 around the pinned 1; four would need 1: refused, nothing changed."""
    tier = full_host_loading_1()
    assert not tier.swap_out(7, 4)
    assert tier.cached_blocks == 4 and tier.swapped_blocks == 0 and tier.evicted_blocks == 0
    assert tier.swap_out(7, 3)
    assert [h for h, _ in lru_order(tier)] == [1] and tier.swapped_blocks == 3
    tier.check_invariants()


def test_a_swap_out_copies_a_block_being_loaded_rather_than_take_it_out_of_the_cache():
    """A swapped request's hashed block the host caches is taken as its parked copy (`shared_blocks`), but not
    one a load is reading: that one must stay cached until the load lands, so the swap copies it into a block of
    its own (evicting the oldest unpinned hash, 2), and the GPU's later evictions of it only touch it."""
    tier = full_host_loading_1()
    assert tier.swap_out(7, 2, frozenset({1, 3}))  # 3 taken; 1 copied into 2's block
    assert tier.shared_blocks == 1 and 1 in tier and 3 not in tier and 2 not in tier
    assert [h for h, _ in lru_order(tier)] == [1, 4]
    assert tier.offload_many([1]) == 0
    tier.check_invariants()
    tier.pinned.clear()
    assert tier.swap_in(7) == 2
    assert [h for h, _ in lru_order(tier)] == [4, 1, 3]
    tier.check_invariants()


def test_the_invariant_check_catches_a_pinned_hash_that_is_not_cached():
    tier = full_host_loading_1()
    tier.pinned.add(9)
    with pytest.raises(AssertionError, match="being loaded"):
        tier.check_invariants()
