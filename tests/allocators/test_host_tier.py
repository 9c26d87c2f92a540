"""The host tier against a plain LRU written here with an OrderedDict (the tier's former implementation):
random offloads (in batches, with hashes cached already or repeated), loads and swap parking (with the hashes
it parks, which are not offloaded meanwhile, and whose cached copies it takes) must leave the same hashes in the same LRU order on the same host
blocks, with the same counters. The tier keeps its order
in a queue with stale entries and offloads a batch with bulk operations; this guards that it is still
exactly an LRU, block ids included."""

import copy
from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from allocators.host_tier import HostTier
from tests.soak import examples


class ReferenceTier:
    """``HostTier``'s behaviour one hash at a time: free blocks popped from the end, then the LRU's oldest; a
    parked hash the host does not cache is not stored but noted, and cached in a block its request frees when it
    is swapped back in (by the last request parking it); one it caches when its request is swapped out is taken out
    of the cache as a parked block, and noted the same way; one another request parks shares that request's block
    (handed on to a request still parking it when its holder is swapped back in)."""

    def __init__(self, num_blocks: int) -> None:
        self.lru: OrderedDict[int, int] = OrderedDict()
        self.free = list(range(num_blocks - 1, -1, -1))
        self.swapped: dict[int, list[int]] = {}
        self.parked: dict[int, frozenset[int]] = {}
        self.skipped: dict[int, None] = {}
        self.block_of: dict[int, int] = {}  # parked hash -> the host block holding its KV
        self.offloaded = self.reloaded = self.evicted = self.kept = self.shared = self.joined = 0

    def is_parked(self, h: int) -> bool:
        return any(h in hashes for hashes in self.parked.values())

    def stored(self, hashes: list[int]) -> int:
        """How many of ``hashes`` an offload would store if all were new (`HostTier.evicted_by`)."""
        return sum(1 for h in hashes if h in self.lru or not self.is_parked(h))

    def evictable(self) -> list[int]:
        """The cached hashes an eviction may take, least recently used first."""
        return list(self.lru)

    def room(self) -> int | None:
        if self.free:
            return self.free.pop()
        victims = self.evictable()
        if not victims:
            return None
        self.evicted += 1
        return self.lru.pop(victims[0])

    def offload_many(self, hashes: list[int]) -> int:
        moved = 0
        for h in hashes:
            if h in self.lru:
                self.lru.move_to_end(h)
                continue
            if self.is_parked(h):
                self.skipped.pop(h, None)
                self.skipped[h] = None
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

    def swap_out(self, key: int, num_blocks: int, hashes: frozenset[int]) -> bool:
        joined = [h for h in sorted(hashes) if h in self.block_of]
        evictable = self.evictable()  # room, or a parked copy
        if num_blocks - len(joined) > len(self.free) + len(evictable):
            return False
        rest = [h for h in sorted(hashes) if h not in self.block_of]
        shared = [h for h in rest if h in set(evictable)][:num_blocks - len(joined)]
        blocks = [self.lru.pop(h) for h in shared]
        blocks += [self.room() for _ in range(num_blocks - len(joined) - len(shared))]
        self.swapped[key] = blocks
        for h in shared:
            self.skipped[h] = None
        self.shared += len(shared)
        self.joined += len(joined)
        for h, block in zip(shared + [h for h in rest if h not in shared], blocks, strict=False):
            self.block_of[h] = block
        self.parked[key] = hashes
        return True

    def swap_in(self, key: int) -> None:
        blocks = self.swapped.pop(key)
        hashes = self.parked.pop(key)
        for h in sorted(hashes):
            if not self.is_parked(h):
                self.block_of.pop(h, None)
            elif self.block_of.get(h) in blocks:
                blocks.remove(self.block_of[h])
                self.swapped[min(k for k, parked in self.parked.items() if h in parked)].append(self.block_of[h])
        self.free.extend(reversed(blocks))
        for h in [h for h in self.skipped if h in hashes and not self.is_parked(h)]:
            del self.skipped[h]
            self.lru[h] = self.free.pop()
            self.kept += 1


def lru_order(tier: HostTier) -> list[tuple[int, int]]:
    """The tier's cached (hash, host block) pairs, least recently used first, pinned ones included where they
    stand, read by evicting them all from an unpinned copy (the only order the tier promises is the one it evicts
    in)."""
    probe = copy.deepcopy(tier)
    probe.pinned = set()
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
    st.tuples(st.just("swap_out"), st.integers(1, 4).flatmap(  # a request's hashed blocks are some of its blocks
        lambda n: st.tuples(st.just(n), st.frozensets(st.integers(0, 40), max_size=n)))),
    st.tuples(st.just("swap_in"), st.integers(0, 3)),
)


def run_operations(tier: HostTier, ref: ReferenceTier, ops, more=None) -> None:
    """Apply ``ops`` (`operation`) to ``tier`` and ``ref`` alike, checking after each that they hold the same
    hashes in the same order on the same blocks, with the same counters and eviction forecasts; ``more(name,
    arg)`` applies the operations a caller adds."""
    next_key = 0
    for name, arg in ops:
        if name == "offload":
            need = min(ref.stored(arg) - len(ref.free), len(ref.evictable()))  # what the batch would evict, if new
            assert tier.evicted_by(arg) == ref.evictable()[:max(need, 0)]
            assert tier.offload_many(arg) == ref.offload_many(arg)
        elif name == "take":  # load the most recently used ``arg`` cached hashes, oldest of them first
            hits = list(ref.lru)[-arg:] if arg else []
            assert tier.take(hits) == len(hits)
            ref.take(hits)
        elif name == "swap_out":
            assert tier.swap_out(next_key, *arg) == ref.swap_out(next_key, *arg)
            next_key += 1
        elif name == "swap_in":
            if ref.swapped:
                key = sorted(ref.swapped)[arg % len(ref.swapped)]
                tier.swap_in(key)
                ref.swap_in(key)
        else:
            more(name, arg)
        tier.check_invariants()
        assert lru_order(tier) == list(ref.lru.items())
        assert tier._free == ref.free and tier._swapped == ref.swapped
        assert (tier.offloaded_blocks, tier.reloaded_blocks, tier.evicted_blocks, tier.kept_blocks,
                tier.shared_blocks, tier.joined_blocks) == (ref.offloaded, ref.reloaded, ref.evicted, ref.kept,
                                                            ref.shared, ref.joined)


@settings(max_examples=examples(300), deadline=None)
@given(num_blocks=st.integers(0, 12), ops=st.lists(operation, max_size=40))
def test_the_host_tier_is_exactly_an_lru(num_blocks, ops):
    run_operations(HostTier(num_blocks, 10), ReferenceTier(num_blocks), ops)


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


def test_a_swap_out_takes_the_hosts_cached_copy_of_a_block_instead_of_copying_it():
    """A full block whose hash the host caches holds the same KV: the swap-out takes that host block as its
    parked copy (no second block, nothing copied), out of the cache while parked (and of the eviction order:
    making room for the rest evicts others), and cached again, the most recently used, when swapped back in."""
    tier = HostTier(5, 10)
    assert tier.offload_many([1, 2, 3, 4]) == 4  # 1 block free; 1 is the oldest
    assert tier.swap_out(7, 3, frozenset({1, 3, 9}))  # 1 and 3 cached: taken; 1 new block: the free one
    assert (tier.shared_blocks, tier.evicted_blocks, tier.num_free, tier.cached_blocks) == (2, 0, 0, 2)
    assert 1 not in tier and 3 not in tier and tier.lookup([1], 0, 1) == 0
    tier.check_invariants()
    assert tier.offload_many([5, 3]) == 1  # 5 evicts 2 (1 is out of the order); 3 is parked: not stored
    assert [h for h, _ in lru_order(tier)] == [4, 5]
    tier.check_invariants()
    assert tier.swap_in(7) == 3
    assert [h for h, _ in lru_order(tier)] == [4, 5, 1, 3] and tier.num_free == 1
    assert (tier.offloaded_blocks, tier.kept_blocks, tier.offload_bytes) == (5, 2, 50)
    tier.check_invariants()


def test_a_parked_hash_is_not_offloaded_again_and_stays_cached_when_swapped_back_in():
    """A swapped request's hashed blocks are on the host already: while they are parked a GPU eviction of one
    stores nothing (no bytes, no second block) and the forecast leaves it out; a cached one is only touched.
    Swapped back in, the request's swap block of an evicted hash becomes its cache entry, the most recently
    used, with no bytes moved."""
    tier = HostTier(6, 10)
    assert tier.offload_many([1, 2]) == 2  # 4 blocks free
    assert tier.swap_out(7, 3, frozenset({2, 3, 4}))  # 2 free; hash 2 cached: taken as a parked block
    assert tier.evicted_by([3, 4, 5, 6, 8]) == [1]  # only 5, 6 and 8 are stored: the free blocks, then the oldest
    assert tier.offload_many([3, 4, 5, 6, 8]) == 3
    assert (3 in tier, 4 in tier, 1 in tier, 2 in tier, tier.offloaded_blocks) == (False, False, False, False, 5)
    assert tier.offload_many([5]) == 0  # cached: touched
    tier.check_invariants()
    assert tier.swap_in(7) == 3
    assert 2 in tier and 3 in tier and 4 in tier and tier.num_free == 0
    assert (tier.offloaded_blocks, tier.kept_blocks, tier.offload_bytes) == (5, 3, 50)
    assert [h for h, _ in lru_order(tier)] == [6, 8, 5, 2, 3, 4]
    assert tier.offload_many([3, 4]) == 0  # cached now: no bytes when the GPU evicts them again
    tier.check_invariants()


def test_two_requests_parking_one_hash_share_its_host_block():
    """Two swapped requests whose blocks carry the same hash park one host copy of its KV, as vLLM v0's
    prefix-caching CPU allocator does (0.4.1 ``BlockSpaceManagerV1.swap_out`` asks
    ``CachedBlockAllocator.allocate(gpu_block.block_hash, ...)``, which hands back the CPU block cached under
    that hash, its reference count raised): the second swap-out takes no host block and copies nothing
    (`joined_blocks`). The block outlives its first holder, handed on to the request still parking it, and is
    cached when the last one is swapped back in."""
    tier = HostTier(3, 10)
    assert tier.offload_many([0, 2]) == 2  # one block free
    assert tier.swap_out(8, 1, frozenset({0}))  # hash 0 cached: its block taken
    assert tier.swap_out(9, 2, frozenset({0, 5}))  # 0 parked by 8: shared; 5 new: the free block
    assert (tier.shared_blocks, tier.joined_blocks, tier.num_free, tier.cached_blocks) == (1, 1, 0, 1)
    assert tier.swapped_blocks == 2
    tier.check_invariants()
    assert tier.swap_in(8) == 1 and 0 not in tier  # parked by 9 still: its block is 9's now, not cached
    assert tier.offload_many([0]) == 0  # the GPU evicts 0 again: parked, not stored
    tier.check_invariants()
    assert tier.swap_in(9) == 2
    assert 0 in tier and 5 not in tier and (tier.num_free, tier.kept_blocks, tier.evicted_blocks) == (1, 1, 0)
    tier.check_invariants()
