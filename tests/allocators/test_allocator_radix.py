"""The radix allocator by hand and against a reference: hits under limited memory, one request at a time,
equal an LRU cache of page hashes written here (for `paged` too; and with a write-through host tier, GPU hits
and host hits equal that LRU and vLLM's offloading ranks written out, with or without a store threshold); eviction takes unreferenced leaves only, least
recently used first; forks share full pages and copy the partial one."""

from collections import OrderedDict

import numpy as np
import pytest

from allocators import make_allocator
from allocators.base import cdiv
from allocators.lru_tier import LruTier

BS = 4


def prompt_hashes(group: int, depth: int, num_pages: int) -> list[int]:
    """Chained page hashes: requests of one group share their first ``depth`` pages, then diverge."""
    return [group * 10_000 + i if i < depth else hash((group, depth, i)) & (2**62 - 1) for i in range(num_pages)]


class ReferenceLRU:
    """The cache the allocators should behave as, one request at a time: a set of page hashes in LRU order
    (oldest first). A request hits the longest cached run of its hashes (never its last prompt token), needs
    pages for its final length, takes empty pages first and evicts the oldest cached ones after; when it ends,
    its full prompt pages are cached, the deepest the oldest (a parent outlives its children)."""

    def __init__(self, usable_pages: int) -> None:
        self.usable = usable_pages
        self.cache: OrderedDict[int, None] = OrderedDict()

    def run(self, hashes: list[int], prompt: int, final: int) -> int:
        k = 0
        while k < min(len(hashes), (prompt - 1) // BS) and hashes[k] in self.cache:
            k += 1
        for h in hashes[:k]:
            del self.cache[h]
        empty = self.usable - cdiv(final, BS) - len(self.cache)
        for _ in range(max(0, -empty)):
            self.cache.popitem(last=False)
        for h in reversed(hashes):
            self.cache.pop(h, None)
            self.cache[h] = None
        return k * BS


@pytest.mark.parametrize("allocator", ["paged", "radix"])
@pytest.mark.parametrize("seed", range(4))
def test_hits_equal_a_reference_lru_one_request_at_a_time(allocator, seed):
    rng = np.random.default_rng(seed)
    usable = 30
    a = make_allocator(allocator, (usable + 1) * BS, block_size=BS, max_model_len=200, prefix_caching=True)
    ref = ReferenceLRU(usable)
    total = 0
    for seq in range(300):
        group, depth = int(rng.integers(0, 6)), int(rng.integers(0, 8))
        prompt = int(rng.integers(1, 12)) * BS + int(rng.integers(1, BS))  # the last page is partial
        final = prompt + int(rng.integers(1, 30))
        if cdiv(final, BS) > usable:
            continue
        hashes = prompt_hashes(group, depth, prompt // BS)
        expected = ref.run(hashes, prompt, final)
        admission = a.admit(seq, prompt, final_tokens=final, block_hashes=hashes)
        assert admission is not None and admission.cached_tokens == expected, seq
        assert a.grow(seq, final - prompt) is not None
        a.free(seq)
        a.check_invariants()
        assert a.breakdown().cached == len(ref.cache) * BS
        total += expected
    assert total > 1000  # the sequence really reuses, and really evicts
    assert len(ref.cache) > usable // 2


class WriteThroughReference:
    """vLLM 0.33's CPU offloading with its LRU policy, one request at a time, as ranks compared in full: a
    request takes the next tick; its host hits (after its GPU hits) are reused; it offers its full prompt
    blocks (from the first after its hits if it loaded any, else all), reusing the held ones and storing the
    others (with a ``threshold``, only those offered that often), ranked ``(tick, -position)`` and evicting
    the lowest ranks outside the offer; when it finishes every block it reused or stored is ranked anew,
    tail first. Returns the host hits."""

    def __init__(self, size: int, threshold: int = 0) -> None:
        self.size, self.threshold = size, threshold
        self.rank: dict[int, tuple[int, int]] = {}
        self.offers: dict[int, int] = {}
        self.tick = 0

    def run(self, hashes: list[int], gpu_hits: int, limit: int) -> int:
        self.tick += 1
        tick, rank, seen = self.tick, self.rank, {}

        def reuse(pos: int) -> None:
            if hashes[pos] not in seen:
                seen[hashes[pos]] = pos
                rank[hashes[pos]] = max(rank[hashes[pos]], (tick, -pos))

        n = 0
        while gpu_hits + n < min(len(hashes), limit) and hashes[gpu_hits + n] in rank:
            reuse(gpu_hits + n)
            n += 1
        start = gpu_hits + n if n else 0
        new = []
        for pos in range(start, len(hashes)):
            self.offers[hashes[pos]] = self.offers.get(hashes[pos], 0) + 1
        for pos in range(start, len(hashes)):
            if hashes[pos] in rank:
                reuse(pos)
            elif self.offers[hashes[pos]] >= self.threshold:
                new.append(pos)
        seen.update((hashes[pos], pos) for pos in new)
        need = len(new) - (self.size - len(rank))
        offered = set(hashes[start:])
        outside = sorted((r, h) for h, r in rank.items() if h not in offered)
        assert need <= len(outside), "the reference does not model a failed store"
        for _, h in outside[:max(need, 0)]:
            del rank[h]
        for pos in new:
            rank[hashes[pos]] = (tick, -pos)
        for h, _ in sorted(seen.items(), key=lambda item: -item[1]):
            if h in rank:
                self.tick += 1
                rank[h] = (self.tick, 0)
        return n


@pytest.mark.parametrize("allocator", ["paged", "radix"])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("threshold", [0, 2])
def test_hits_with_a_write_through_tier_equal_the_references(allocator, seed, threshold):
    """A GPU of 30 pages and a host of 60: the GPU's hits are those of the LRU above, the host's those of
    vLLM's offloading written out above, where every request's full prompt pages are offered as they are
    computed, not as the GPU evicts them (a host smaller than the GPU would hit nothing: it would hold the
    newest pages, which the GPU holds too); with a store threshold of 2, stored once a second request offers
    them."""
    rng = np.random.default_rng(seed)
    usable, host_size = 30, 60
    a = make_allocator(allocator, (usable + 1) * BS, block_size=BS, max_model_len=200, prefix_caching=True)
    tier = LruTier(host_size, block_bytes=1, store_threshold=threshold)
    assert a.attach_host_tier(tier)
    gpu_ref, host_ref = ReferenceLRU(usable), WriteThroughReference(host_size, threshold)
    gpu_total = host_total = 0
    for seq in range(300):
        group, depth = int(rng.integers(0, 6)), int(rng.integers(0, 8))
        prompt = int(rng.integers(1, 12)) * BS + int(rng.integers(1, BS))
        final = prompt + int(rng.integers(1, 30))
        if cdiv(final, BS) > usable:
            continue
        hashes = prompt_hashes(group, depth, prompt // BS)
        gpu = gpu_ref.run(hashes, prompt, final) // BS
        host = host_ref.run(hashes, gpu, (prompt - 1) // BS)
        admission = a.admit(seq, prompt, final_tokens=final, block_hashes=hashes)
        assert admission is not None, seq
        assert (admission.cached_tokens, admission.host_tokens) == ((gpu + host) * BS, host * BS), seq
        assert a.grow(seq, final - prompt) is not None
        a.free(seq)
        tier.release(seq, finished=True)
        a.check_invariants()
        tier.check_invariants()
        assert tier.cached_blocks == len(host_ref.rank) and all(h in tier for h in host_ref.rank)
        gpu_total, host_total = gpu_total + gpu, host_total + host
    assert gpu_total > 100 and host_total > 50  # both tiers really hit
    assert tier.offloaded_blocks > tier.evicted_blocks > 0
    assert (tier.skipped_blocks > 0) == bool(threshold)


def test_eviction_takes_unreferenced_leaves_least_recently_used_first():
    a = make_allocator("radix", 9 * BS, block_size=BS, prefix_caching=True)  # 8 usable pages
    # A caches pages a0 a1 a2; B shares a0 and adds b1; both end; A's branch is older
    a.admit(0, 3 * BS + 1, final_tokens=3 * BS + 1, block_hashes=[10, 11, 12])
    a.free(0)
    hit = a.admit(1, 2 * BS + 1, final_tokens=2 * BS + 1, block_hashes=[10, 21])
    assert hit.cached_tokens == BS
    a.free(1)
    tree = a._cache
    assert a.breakdown().cached == 4 * BS  # a0 a1 a2 b1 cached, the partial pages empty
    assert len(tree) == 4
    # a request needing 6 pages takes the 4 empty ones, then evicts a2 and a1 (the old branch, leaf first)
    a.admit(2, 6 * BS, final_tokens=6 * BS, block_hashes=[])
    assert sorted(h for h in tree.block_hash if h is not None) == [10, 21]
    a.check_invariants()
    a.free(2)
    assert a.num_cached_tokens([10, 21, 99], 3 * BS) == 2 * BS


@pytest.mark.parametrize("allocator", ["paged", "radix"])
def test_a_lookup_counts_as_use_in_radix_only(allocator):
    """SGLang stamps the nodes a lookup walks (a waiting request the scheduler keeps trying), so the branch a
    waiting request would hit outlives a branch used after it; vLLM's lookups change nothing. The scene of
    the test above, with A's branch looked up before a request that must evict one cached page: radix
    evicts B's leaf b1 (used before the lookup), paged A's leaf a2 (A's branch ended first)."""
    a = make_allocator(allocator, 9 * BS, block_size=BS, prefix_caching=True)
    a.admit(0, 3 * BS + 1, final_tokens=3 * BS + 1, block_hashes=[10, 11, 12])
    a.free(0)
    a.admit(1, 2 * BS + 1, final_tokens=2 * BS + 1, block_hashes=[10, 21])
    a.free(1)
    a.touch_prefixes([([10, 11, 12, 13], 4 * BS + 1)])  # A's next turn waits: its lookup walks a0 a1 a2
    a.check_invariants()
    a.admit(2, 5 * BS, final_tokens=5 * BS, block_hashes=[])  # the 4 empty pages and 1 cached one
    a.check_invariants()
    a.free(2)
    a_hit, b_hit = (3 * BS, BS) if allocator == "radix" else (2 * BS, 2 * BS)
    assert a.num_cached_tokens([10, 11, 12, 13], 4 * BS + 1) == a_hit
    assert a.num_cached_tokens([10, 21, 99], 3 * BS) == b_hit


def test_fork_shares_full_pages_and_copies_the_partial_one():
    a = make_allocator("radix", 20 * BS, block_size=BS, prefix_caching=True)
    a.admit(0, 2 * BS + 3, final_tokens=40, block_hashes=[1, 2])
    copies = a.fork(0, 1, final_tokens=40)
    parent, child = a.block_table(0), a.block_table(1)
    assert parent[:2] == child[:2] and parent[2] != child[2]
    assert copies == ((parent[2], child[2], BS),)
    assert a.breakdown().shared_saved == 2 * BS
    a.check_invariants()
    for seq in (0, 1):
        a.grow(seq, 5)
    a.free(0)
    a.free(1)
    a.check_invariants()
    assert a.breakdown().used_blocks == 0 and a.breakdown().cached == 2 * BS


def test_a_swapped_group_moves_each_shared_page_once_and_is_counted_as_it_forks_back():
    """Three beams of a 40-token prompt at 52 tokens, pages of 16: the prompt's 2 full pages shared by all, a
    third by beams 0 and 2 (beam 1 forked before the prompt's tail filled, so got a copy of it): 7 distinct
    pages of 12 listed, moved once each, and the forks `swap_group` gives are counted to need just those 7."""
    a = make_allocator("radix", 320, block_size=16)
    a.admit(0, 40, final_tokens=80)
    a.fork(0, 1, final_tokens=80)  # copies the partly filled tail
    a.grow(0, 8)
    a.grow(1, 8)
    a.fork(0, 2, final_tokens=80)  # at a page boundary: shares 3 pages
    for seq in range(3):
        a.grow(seq, 4)
    swap = a.swap_group([0, 1, 2], [0] * 3)
    assert (swap.slots, swap.transfers, swap.forks) == (7 * 16, 7, ((0, 32), (0, 48)))
    fits = [make_allocator("radix", pages * 16, block_size=16).group_fits(
        40, 2, final_tokens=80, then_tokens=12, forks=swap.forks) for pages in (7, 8)]  # 6 and 7 usable
    assert fits == [False, True]
