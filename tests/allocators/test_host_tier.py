"""The host tier against a plain LRU written here with an OrderedDict (the tier's former implementation):
random offloads (in batches, with hashes cached already or repeated), loads and swap parking must leave the
same hashes in the same LRU order on the same host blocks, with the same counters. The tier keeps its order
in a queue with stale entries and offloads a batch with bulk operations; this guards that it is still
exactly an LRU, block ids included."""

import copy
from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from allocators.host_tier import HostTier
from tests.soak import examples


class ReferenceTier:
    """``HostTier``'s behaviour one hash at a time: free blocks popped from the end, then the LRU's oldest."""

    def __init__(self, num_blocks: int) -> None:
        self.lru: OrderedDict[int, int] = OrderedDict()
        self.free = list(range(num_blocks - 1, -1, -1))
        self.swapped: dict[int, list[int]] = {}
        self.offloaded = self.reloaded = self.evicted = 0

    def room(self) -> int | None:
        if self.free:
            return self.free.pop()
        if not self.lru:
            return None
        self.evicted += 1
        return self.lru.popitem(last=False)[1]

    def offload_many(self, hashes: list[int]) -> int:
        moved = 0
        for h in hashes:
            if h in self.lru:
                self.lru.move_to_end(h)
                continue
            block = self.room()
            if block is not None:
                self.lru[h] = block
                moved += 1
        self.offloaded += moved
        return moved

    def take(self, hashes: list[int]) -> None:
        for h in hashes:
            self.lru.move_to_end(h)
        self.reloaded += len(hashes)

    def swap_out(self, key: int, num_blocks: int) -> bool:
        if num_blocks > len(self.free) + len(self.lru):
            return False
        self.swapped[key] = [self.room() for _ in range(num_blocks)]
        return True

    def swap_in(self, key: int) -> None:
        self.free.extend(reversed(self.swapped.pop(key)))


def lru_order(tier: HostTier) -> list[tuple[int, int]]:
    """The tier's cached (hash, host block) pairs, least recently used first, read by evicting them all from a
    copy (the only order the tier promises is the one it evicts in)."""
    probe = copy.deepcopy(tier)
    probe._free.clear()
    order = []
    while probe.cached_blocks:
        before = dict(probe._lru)
        block = probe._room()
        order.append(next((h, b) for h, b in before.items() if b == block))
    return order


operation = st.one_of(
    st.tuples(st.just("offload"), st.lists(st.integers(0, 40), max_size=12)),
    st.tuples(st.just("take"), st.integers(0, 6)),
    st.tuples(st.just("swap_out"), st.integers(1, 4)),
    st.tuples(st.just("swap_in"), st.integers(0, 3)),
)


@settings(max_examples=examples(300), deadline=None)
@given(num_blocks=st.integers(0, 12), ops=st.lists(operation, max_size=40))
def test_the_host_tier_is_exactly_an_lru(num_blocks, ops):
    tier, ref = HostTier(num_blocks, 10), ReferenceTier(num_blocks)
    next_key = 0
    for name, arg in ops:
        if name == "offload":
            need = min(len(arg) - len(ref.free), len(ref.lru))  # what a batch this long would evict, if all new
            assert tier.evicted_by(len(arg)) == list(ref.lru)[:max(need, 0)]
            assert tier.offload_many(arg) == ref.offload_many(arg)
        elif name == "take":  # load the most recently used ``arg`` cached hashes, oldest of them first
            hits = list(ref.lru)[-arg:] if arg else []
            assert tier.take(hits) == len(hits)
            ref.take(hits)
        elif name == "swap_out":
            assert tier.swap_out(next_key, arg) == ref.swap_out(next_key, arg)
            next_key += 1
        elif ref.swapped:
            key = sorted(ref.swapped)[arg % len(ref.swapped)]
            tier.swap_in(key)
            ref.swap_in(key)
        tier.check_invariants()
        assert lru_order(tier) == list(ref.lru.items())
        assert tier._free == ref.free and tier._swapped == ref.swapped
        assert (tier.offloaded_blocks, tier.reloaded_blocks, tier.evicted_blocks) == \
               (ref.offloaded, ref.reloaded, ref.evicted)


def test_a_batch_of_new_hashes_takes_free_blocks_then_the_oldest_cached_ones():
    """The bulk path by hand: 3 free blocks, then 2 of the 3 oldest cached hashes make room; a batch with a
    hash cached already touches it instead."""
    tier = HostTier(6, 10)
    assert tier.offload_many([1, 2, 3]) == 3
    assert tier.offload_many([4, 5, 6, 7, 8]) == 5  # 3 free blocks, then hashes 1 and 2 evicted
    assert tier.evicted_blocks == 2 and 1 not in tier and 2 not in tier and 3 in tier
    assert tier.offload_many([9, 3]) == 2  # 9 evicts 3 (the oldest) before 3 comes back, evicting 4
    assert 4 not in tier and 3 in tier
    assert tier.offload_many([5, 10]) == 1  # 5 is touched, 10 evicts the oldest: 6
    assert 6 not in tier and 5 in tier
    tier.check_invariants()
