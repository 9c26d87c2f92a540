"""The store threshold of a write-through host tier by hand: a block is stored once it has been offered often
enough, a block the tier holds always passes, a request counts a block once however often it offers it, the
count table is bounded and forgets the least recently offered hash that the current batch does not offer, and
a write-through tier stores only what passes."""

import pytest

from allocators.lru_tier import LruTier
from allocators.store_filter import StoreFilter


def test_a_block_passes_on_its_second_offer_and_a_held_one_always():
    f = StoreFilter(2)
    assert f.offer([1, 2, 3], held=()) == [] and f.skipped_blocks == 3
    assert f.offer([2, 3, 4], held=()) == [2, 3] and f.skipped_blocks == 4
    assert f.offer([4, 9], held={9}) == [4, 9] and f.skipped_blocks == 4  # 9: held, passed on to be touched
    assert [f.count(h) for h in (1, 2, 3, 4, 9, 5)] == [1, 2, 2, 2, 1, 0]
    f.check_invariants()


def test_a_hash_twice_in_one_batch_counts_twice_only_once_tracked():
    """As vLLM counts: a new hash enters with 1 however often the batch offers it; a tracked one is counted
    at each of its places."""
    f = StoreFilter(3)
    assert f.offer([7, 7], held=()) == [] and f.count(7) == 1
    assert f.offer([7, 7], held=()) == [7, 7] and f.count(7) == 3


def test_a_request_counts_a_block_once():
    """vLLM 0.34's ``counted_keys``: one request's offers again (a failed store retried, its offers restarted
    after a preemption) neither count its blocks again nor skip them again; another request's offer counts."""
    f = StoreFilter(2)
    mine: set[int] = set()
    assert f.offer([1, 2], held=(), counted=mine) == [] and mine == {1, 2} and f.skipped_blocks == 2
    assert f.offer([1, 2, 3], held=(), counted=mine) == [] and f.skipped_blocks == 3  # only 3 is new to it
    assert [f.count(h) for h in (1, 2, 3)] == [1, 1, 1]
    assert f.offer([2, 3], held=(), counted=set()) == [2, 3]  # a second request: each now offered twice
    f.check_invariants()


def test_a_preempted_request_offering_again_does_not_reach_the_threshold_alone():
    """A request preempted after its blocks were skipped offers them again from the first (`RequestTier.bind`):
    under vLLM 0.33 that counted as a second use and stored them; 0.34 (and kvsim) store nothing until another
    request offers them."""
    tier = LruTier(8, block_bytes=10, store_threshold=2)
    tier.bind(0, "r", prompt_blocks=3)
    assert tier.computed(0, [1, 2, 3], 3) == 0
    tier.release(0, finished=False)
    tier.bind(1, "r", prompt_blocks=3)  # "r" placed again
    assert tier.computed(1, [1, 2, 3], 3) == 0 and tier.cached_blocks == 0 and tier.skipped_blocks == 3
    tier.release(1, finished=True)
    tier.bind(2, "s", prompt_blocks=3)
    assert tier.computed(2, [1, 2, 3], 3) == 3 and tier.cached_blocks == 3
    tier.check_invariants()


def test_the_table_forgets_the_least_recently_offered_hash_not_in_the_batch():
    f = StoreFilter(2, max_tracked=3)
    f.offer([1, 2, 3], held=())
    assert f.offer([1, 4], held=()) == [1]  # 1 counted again (now the most recent); 4 takes 2's place
    assert [f.count(h) for h in (1, 2, 3, 4)] == [2, 0, 1, 1]
    assert f.offer([2], held=()) == []  # 2 was forgotten: its count starts again (3, the oldest, leaves)
    assert [f.count(h) for h in (1, 2, 3, 4)] == [2, 1, 0, 1]
    f.check_invariants()


def test_a_table_full_of_this_batchs_hashes_tracks_no_new_one():
    f = StoreFilter(2, max_tracked=2)
    f.offer([1, 2], held=())
    assert f.offer([1, 2, 3], held=()) == [1, 2] and f.count(3) == 0 and f.skipped_blocks == 3


def test_the_tier_stores_only_what_the_threshold_passes():
    """Three requests offer blocks 1, 2, 3 / 1, 2, 5 / 1, 2, 5: the second stores 1 and 2 (offered twice), the
    third 5 and reuses 1 and 2."""
    tier = LruTier(4, block_bytes=10, store_threshold=2)
    assert tier.computed(0, [1, 2, 3], 3) == 0 and tier.cached_blocks == 0 and tier.skipped_blocks == 3
    assert tier.computed(1, [1, 2, 5], 3) == 2 and 1 in tier and 2 in tier and 5 not in tier
    assert tier.computed(2, [1, 2, 5], 3) == 1 and tier.cached_blocks == 3
    assert (tier.offloaded_blocks, tier.skipped_blocks, tier.offload_bytes) == (3, 4, 30)
    tier.check_invariants()
    assert LruTier(4, block_bytes=10, store_threshold=1).store_filter is None


@pytest.mark.parametrize("threshold, max_tracked", [(1, 10), (2, 0)])
def test_a_filter_that_filters_nothing_is_an_error(threshold, max_tracked):
    with pytest.raises(ValueError, match="threshold must be >= 2"):
        StoreFilter(threshold, max_tracked)
