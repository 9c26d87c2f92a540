"""Scenarios 1-6 of docs/paper-facts.md section 5, taken from vLLM's own KV-cache tests, on kvsim's paged allocator."""

import pytest

from allocators.free_queue import FreeBlockQueue
from allocators.paged import PagedAllocator

BS = 16
SHARED = [101, 102, 103]  # chained hashes of the 48 shared prompt tokens


def pool(num_blocks: int, **options) -> PagedAllocator:
    """A pool of ``num_blocks`` blocks (block 0 is the null block)."""
    return PagedAllocator(num_blocks * options.get("block_size", BS), prefix_caching=True, **options)


def test_scenario_1_shared_prefix_hits_and_ref_counts():
    a = pool(11)
    adm_a = a.admit(0, 48 + 7, final_tokens=60, block_hashes=SHARED)
    assert adm_a.cached_tokens == 0
    assert a.block_table(0) == (1, 2, 3, 4)
    assert [a.block_hash(b) for b in (1, 2, 3)] == SHARED and a.block_hash(4) is None
    assert [a.ref_count(b) for b in (1, 2, 3, 4)] == [1, 1, 1, 1]
    assert a.num_cached_tokens(SHARED, 48 + 5) == 48
    adm_b = a.admit(1, 48 + 5, final_tokens=60, block_hashes=SHARED)
    assert adm_b.cached_tokens == 48
    assert a.block_table(1) == (1, 2, 3, 5)
    assert [a.ref_count(b) for b in (1, 2, 3)] == [2, 2, 2]
    assert a.num_free_blocks == 5
    assert a.breakdown().shared_saved == 3 * BS
    a.check_invariants()


def test_scenario_2_free_order_is_eviction_order_and_lazy_eviction_hits():
    a = pool(11)
    a_hashes = [201, 202, 203, 204, 205]  # 87 tokens: 5 full blocks + 7
    a.admit(0, 87, final_tokens=87, block_hashes=a_hashes)
    a.admit(1, 48, final_tokens=48, block_hashes=[301, 302, 303])
    assert a.block_table(0) == (1, 2, 3, 4, 5, 6) and a.block_table(1) == (7, 8, 9)
    assert a.num_free_blocks == 1
    a.free(0)
    a.free(1)
    # vLLM 0.33 ``free_blocks``: the uncached partial tail (6) is reused first, cached blocks are evicted last
    assert a.free_block_ids() == [6, 10, 5, 4, 3, 2, 1, 9, 8, 7]
    adm = a.admit(2, 35, final_tokens=35, block_hashes=a_hashes[:2])  # shares A's first 2 blocks
    assert adm.cached_tokens == 32
    assert a.block_table(2) == (1, 2, 6)  # the hits, then the head of the free queue
    assert a.free_block_ids() == [10, 5, 4, 3, 9, 8, 7]
    a.check_invariants()


def test_scenario_3_hit_blocks_leave_the_queue_before_new_blocks_are_popped():
    a = pool(3)  # 2 usable
    a.admit(0, 16, final_tokens=16, block_hashes=[1])
    a.admit(1, 16, final_tokens=16, block_hashes=[2])
    a.free(0)
    a.free(1)
    assert a.free_block_ids() == [1, 2] and a.block_hash(1) == 1 and a.block_hash(2) == 2
    adm = a.admit(2, 17, final_tokens=17, block_hashes=[2])  # hits block 2; must get block 1 as new
    assert adm.cached_tokens == 16
    assert a.block_table(2) == (2, 1)
    assert a.block_hash(1) is None  # block 1 was evicted when handed out
    a.check_invariants()


def test_scenario_4_reusing_a_cached_block_for_a_partial_block_drops_its_hash():
    a = pool(2)  # 1 usable
    a.admit(0, 16, final_tokens=16, block_hashes=[7])
    assert a.block_hash(1) == 7
    a.free(0)
    assert a.num_cached_tokens([7], 17) == 16  # lazily evicted: still a hit while free
    a.admit(1, 5, final_tokens=5)
    assert a.block_table(1) == (1,)
    assert a.block_hash(1) is None
    assert a.num_cached_tokens([7], 17) == 0
    a.check_invariants()


def test_scenario_5_no_prefix_caching_block_size_4():
    a = PagedAllocator(5 * 4, block_size=4)  # 4 usable blocks
    assert a.admit(0, 10, final_tokens=10) is not None
    assert len(a.block_table(0)) == 3
    a.free(0)
    assert a.admit(1, 16, final_tokens=16) is not None
    assert len(a.block_table(1)) == 4
    assert a.admit(2, 4, final_tokens=4) is None
    a.check_invariants()


def test_scenario_6_free_queue_operations():
    q = FreeBlockQueue(6, range(6))
    assert q.popleft() == 0 and q.num_free == 5
    q.remove(3)  # a middle element: its neighbours are relinked
    assert list(q) == [1, 2, 4, 5] and q.num_free == 4
    q.append(0)
    assert list(q) == [1, 2, 4, 5, 0] and q.num_free == 5
    assert 3 not in q and 0 in q
    q.check()
    with pytest.raises(ValueError):
        q.remove(3)
    with pytest.raises(ValueError):
        q.append(1)
    for expected in (1, 2, 4, 5, 0):
        assert q.popleft() == expected
    with pytest.raises(IndexError):
        q.popleft()
    assert q.num_free == 0 and q.check() == []


def test_lookup_never_covers_the_last_prompt_token():
    a = pool(11)
    a.admit(0, 48, final_tokens=48, block_hashes=SHARED)
    # a 48-token prompt whose 3 blocks are all cached still recomputes the last block
    assert a.num_cached_tokens(SHARED, 48) == 32
    adm = a.admit(1, 48, final_tokens=48, block_hashes=SHARED)
    assert adm.cached_tokens == 32 and a.block_table(1)[:2] == (1, 2) and a.block_table(1)[2] != 3
    a.check_invariants()


def test_admission_watermark_leaves_blocks_free_but_running_sequences_may_use_them():
    a = PagedAllocator(11 * BS, watermark=0.2)  # int(0.2 * 11) = 2 blocks kept free for admissions
    assert a.watermark_blocks == 2
    assert a.admit(0, 8 * BS, final_tokens=10 * BS) is not None
    assert a.admit(1, 1, final_tokens=1) is None  # 2 free, 1 needed, would leave 1 < 2
    assert a.grow(0, 2 * BS) == ()  # growth ignores the watermark
    assert a.num_free_blocks == 0
    a.free(0)
    assert a.admit(2, 10 * BS, final_tokens=10 * BS, apply_watermark=False) is not None  # vLLM: none runs
    assert a.never_fits(10 * BS, final_tokens=10 * BS) is None
    assert "only 10 usable" in a.never_fits(11 * BS, final_tokens=11 * BS)
