"""The paged allocator: hand-computed waste categories, headroom, copying forks, never-fits reasons."""

from allocators import make_allocator
from allocators.base import FREE_OWNER, OVERHEAD_OWNER


def parts(b):
    return b.token_states, b.reservation, b.internal_frag, b.external_frag, b.free


def test_waste_categories_by_hand_block_16_requests_of_100_and_30():
    a = make_allocator("paged", 20 * 16 + 5)  # 20 blocks (19 usable) and 5 slots too few for a block
    assert (a.num_blocks, a.num_usable_blocks, a.overhead_slots) == (20, 19, 21)
    a.admit(1, 100, final_tokens=120)  # 7 blocks = 112 slots: 12 more tokens will land in them
    a.admit(2, 30, final_tokens=40)  # 2 blocks = 32 slots: 2 more will land in them
    assert parts(a.breakdown()) == (130, 14, 0, 21, 10 * 16)
    assert (a.headroom(1), a.headroom(2)) == (12, 2)
    assert a.grow(1, 12) == () and a.grow(1, 1) == ()  # block 8: 113 tokens of 120, 8 slots never filled
    assert a.grow(2, 10) == ()  # block 3: 40 tokens, the last block's 8 spare slots never filled
    assert parts(a.breakdown()) == (153, 7, 16, 21, 8 * 16)
    b = a.breakdown(waiting=True)
    assert parts(b) == (153, 7, 16, 21 + 128, 0)
    assert (b.used_blocks, b.total_blocks) == (11, 19)
    a.check_invariants()
    assert a.free(1) == 8 * 16 and a.free(2) == 3 * 16
    assert parts(a.breakdown()) == (0, 0, 0, 21, 19 * 16)


def test_grow_crosses_blocks_only_at_boundaries_and_refuses_without_change():
    a = make_allocator("paged", 4 * 16)  # 3 usable blocks
    a.admit(1, 10, final_tokens=48)
    assert a.block_table(1) == (1,)
    assert a.grow(1, 6) == () and a.block_table(1) == (1,) and a.headroom(1) == 0
    assert a.grow(1, 1) == () and a.block_table(1) == (1, 2) and a.headroom(1) == 15
    assert a.grow(1, 40) is None  # 57 tokens would need 4 blocks
    assert a.num_tokens(1) == 17 and a.block_table(1) == (1, 2)
    assert a.grow(1, 31) == () and a.block_table(1) == (1, 2, 3)
    a.check_invariants()


def test_fork_without_copy_on_write_copies_every_block():
    a = make_allocator("paged", 10 * 16)
    a.admit(1, 20, final_tokens=30)
    assert a.fork(1, 2, final_tokens=25) == ((1, 3, 16), (2, 4, 16))  # (src, dst, slots)
    assert a.block_table(2) == (3, 4) and a.num_tokens(2) == 20
    b = a.breakdown()
    assert (b.token_states, b.reservation, b.internal_frag, b.shared_saved) == (40, 10 + 5, 2 + 7, 0)
    a.check_invariants()


def test_freed_uncached_blocks_are_reused_first_tail_first():
    """vLLM 0.33's ``free_blocks``: blocks without a cached hash go to the head of the free queue (LIFO reuse),
    the sequence's tail first."""
    a = make_allocator("paged", 6 * 16, prefix_caching=False)
    a.admit(1, 40, final_tokens=40)
    a.free(1)
    assert a.free_block_ids() == [3, 2, 1, 4, 5]


def test_memory_map_marks_null_block_and_remainder_as_overhead():
    a = make_allocator("paged", 4 * 16 + 3)
    a.admit(7, 20, final_tokens=20)
    owners = a.memory_map()
    assert (owners[:16] == OVERHEAD_OWNER).all() and (owners[64:] == OVERHEAD_OWNER).all()
    assert (owners[16:48] == 7).all() and (owners[48:64] == FREE_OWNER).all()


def test_never_fits_counts_blocks_at_the_final_length():
    a = make_allocator("paged", 11 * 16)
    assert a.never_fits(100, final_tokens=160) is None
    assert "needs 11 blocks of 16 at its final length 161 but the pool has only 10 usable" in a.never_fits(
        100, final_tokens=161)


def test_prefix_caching_off_ignores_hashes():
    a = make_allocator("paged", 11 * 16)
    a.admit(1, 40, final_tokens=40, block_hashes=[1, 2])
    assert a.num_cached_tokens([1, 2], 40) == 0
    assert a.admit(2, 40, final_tokens=40, block_hashes=[1, 2]).cached_tokens == 0
    assert a.block_hash(1) is None


def test_chunked_prompt_blocks_are_cached_when_they_fill():
    a = make_allocator("paged", 11 * 16, prefix_caching=True)
    a.admit(1, 10, final_tokens=40, block_hashes=[1, 2])  # first chunk of a 40-token prompt
    assert a.block_hash(1) is None
    a.grow(1, 20)
    assert (a.block_hash(1), a.block_hash(2)) == (1, None)
    a.grow(1, 2)
    assert a.block_hash(2) == 2
    a.check_invariants()


def test_own_blocks_are_indexed_only_when_their_request_will_come_back():
    """Guards the parking of a request's own blocks (ids only it carries, from ``own_from`` on): while it runs
    they carry their hash but are not indexed; freed to come back (preempted) they are indexed and hit, in
    fill order; finished they never are. Either way they are evicted last and handed out as cached blocks."""
    own = [101, 102, 103]
    for finished in (False, True):
        a = make_allocator("paged", 11 * 16, prefix_caching=True)
        a.admit(1, 20, final_tokens=60, block_hashes=[7, *own], own_from=1)
        a.grow(1, 30)  # 50 tokens: blocks 1-3 full (hashes 7, 101, 102), block 4 partly
        assert [a.block_hash(b) for b in (1, 2, 3, 4)] == [7, 101, 102, None]
        assert a.num_cached_tokens([7, *own], 60) == 16  # the shared block is indexed, the own ones not yet
        a.check_invariants()
        a.free(1, finished=finished)
        assert a.free_block_ids()[:1] == [4] and a.free_block_ids()[-3:] == [3, 2, 1]  # cached: evicted last
        assert a.num_cached_tokens([7, *own], 60) == (16 if finished else 48)
        assert [a.block_hash(b) for b in (1, 2, 3)] == [7, 101, 102]
        a.check_invariants()
        a.admit(2, 16 * 10, final_tokens=16 * 10)  # takes every block: the parked ones are evicted too
        assert all(a.block_hash(b) is None for b in range(1, 11))
        a.check_invariants()


def test_a_host_lookup_to_the_end_finds_the_block_a_gpu_lookup_stops_short_of():
    """vLLM's offloading connector looks the host up to a request's last token (``to_end``): a request whose 6 full
    blocks are all cached hits 5 on the GPU (a GPU hit leaves the last token to compute) and the 6th on the host."""
    from allocators.lru_tier import LruTier

    hashes = list(range(1, 7))
    a = make_allocator("paged", 40 * 16, prefix_caching=True)
    tier = LruTier(20, block_bytes=1)
    assert a.attach_host_tier(tier, to_end=True)
    assert a.admit(1, 96, final_tokens=97, block_hashes=hashes).cached_tokens == 0
    a.free(1)
    tier.flush_stores()
    hit = a.admit(2, 96, final_tokens=97, block_hashes=hashes)
    assert ((hit.cached_tokens - hit.host_tokens) // 16, hit.host_tokens // 16) == (5, 1)
    a.check_invariants()
