"""The allocators' bulk fast paths against the one-at-a-time operations they replace.

`FreeBlockQueue.pop_many` / `extend` must leave the queue exactly as `popleft` / `append` in a loop would, and
`PagedAllocator.grow_due` exactly as `grow` would (same blocks in the same order, same free-queue order, same
breakdown and prefix-cache state), while the changes it reports (headroom, new blocks, reservation delta) must
be the ones that really happened.
"""

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocators import make_allocator
from allocators.free_queue import FreeBlockQueue
from allocators.host_tier import HostTier
from allocators.paged import PagedAllocator
from tests.soak import examples

SETTINGS = settings(max_examples=examples(40), deadline=None)


# -- FreeBlockQueue --------------------------------------------------------------------------------------
@SETTINGS
@given(order=st.permutations(list(range(12))), ops=st.lists(st.tuples(st.booleans(), st.integers(0, 6)),
                                                           max_size=20))
def test_pop_many_and_extend_equal_their_loops(order, ops):
    bulk, single = FreeBlockQueue(12, order), FreeBlockQueue(12, order)
    out: list[int] = []  # blocks taken out, most recent last (both queues hand out the same ones)
    for pop, count in ops:
        if pop:
            count = min(count, len(single))
            ahead = bulk.peek(count)
            got = bulk.pop_many(count)
            assert got == ahead == [single.popleft() for _ in range(count)]
            out += got
        else:
            count = min(count, len(out))
            back, out = out[len(out) - count:], out[:len(out) - count]
            back.reverse()  # any order: the queue must keep the one it is given
            bulk.extend(back)
            for b in back:
                single.append(b)
        assert bulk.check() == single.check()
        assert len(bulk) == len(single)
    assert set(bulk) | set(out) == set(range(12))


def test_peek_skips_removed_blocks_and_changes_nothing():
    q = FreeBlockQueue(8, [5, 2, 7, 1])
    q.remove(2)  # a prefix-cache hit on a free block leaves a hole
    assert q.peek(2) == [5, 7] and q.peek(9) == [5, 7, 1]
    assert q.check() == [5, 7, 1] and q.pop_many(2) == [5, 7]


def test_move_to_tail_reorders_as_remove_then_extend_and_skips_a_tail_in_place():
    q = FreeBlockQueue(8, [5, 2, 7, 1, 3])
    q.move_to_tail([2, 5])
    assert list(q) == [7, 1, 3, 2, 5] and q.num_free == 5
    q.move_to_tail([2, 5])  # the tail already: nothing moves, no hole is left
    assert list(q) == [7, 1, 3, 2, 5] and q.check() == [7, 1, 3, 2, 5]
    q.move_to_tail([5, 3])
    assert q.check() == [7, 1, 2, 5, 3]


def test_pop_many_takes_the_head_in_order_and_refuses_too_many_without_change():
    q = FreeBlockQueue(8, [5, 2, 7, 1])
    assert q.pop_many(0) == []
    assert q.pop_many(2) == [5, 2]
    assert q.check() == [7, 1] and 5 not in q and 2 not in q
    with pytest.raises(IndexError, match="3 blocks asked for but 2 free"):
        q.pop_many(3)
    assert q.check() == [7, 1]
    assert q.pop_many(2) == [7, 1]
    assert q.check() == [] and q.num_free == 0
    q.append(3)  # the emptied queue still links correctly
    assert q.check() == [3]


def test_extend_appends_at_the_tail_and_stops_cleanly_at_a_queued_block():
    q = FreeBlockQueue(8, [4])
    q.extend([6, 0])
    assert q.check() == [4, 6, 0]
    q.extend([])
    assert q.check() == [4, 6, 0]
    with pytest.raises(ValueError, match="block 6 is already in the free queue"):
        q.extend([2, 6, 3])
    assert q.check() == [4, 6, 0, 2]  # what was linked before the bad id stays, consistently counted
    with pytest.raises(ValueError, match="block 5 is already"):
        q.extend([5, 5])  # a duplicate inside one call
    assert q.check() == [4, 6, 0, 2, 5]
    assert q.popleft() == 4


# -- PagedAllocator.grow_due -----------------------------------------------------------------------------
def state(alloc: PagedAllocator) -> tuple:
    """Everything `grow` may change, in a comparable form."""
    seqs = {s: (alloc.block_table(s), alloc.num_tokens(s), alloc.headroom(s)) for s in alloc._seqs}
    hashes = [alloc.block_hash(b) for b in range(alloc.num_blocks)]
    refs = [alloc.ref_count(b) for b in range(alloc.num_blocks)]
    return alloc.breakdown(), alloc.breakdown(True), alloc.free_block_ids(), seqs, hashes, refs


def check_grow_due(alloc: PagedAllocator, seq: int, num_tokens: int) -> tuple[int, int, int] | None:
    """Run `grow_due` on ``alloc`` and `grow` on a copy; assert equal outcomes and true reported changes."""
    twin = copy.deepcopy(alloc)
    before = alloc.breakdown()
    table_before = alloc.block_table(seq)
    expected = twin.grow(seq, num_tokens)
    got = alloc.grow_due(seq, num_tokens)
    assert (got is None) == (expected is None)
    assert state(alloc) == state(twin)
    if got is None:
        return None
    headroom, new_blocks, reserved = got
    assert headroom == alloc.headroom(seq)
    assert alloc.block_table(seq)[:len(table_before)] == table_before
    assert new_blocks == len(alloc.block_table(seq)) - len(table_before)
    after = alloc.breakdown()
    assert new_blocks == after.used_blocks - before.used_blocks
    assert reserved == after.reservation - before.reservation
    assert after.token_states - before.token_states == num_tokens
    alloc.check_invariants()
    return got


def test_grow_due_by_hand_block_4():
    alloc = PagedAllocator(10 * 4, block_size=4)
    alloc.admit(0, 3, final_tokens=9)  # one block, headroom 1, reservation 1
    alloc.admit(1, 4, final_tokens=5)  # one full block, headroom 0
    assert alloc.headroom(0) == 1 and alloc.breakdown().reservation == 1
    # seq 0 crosses into a second block: 3 + 2 = 5 tokens in 2 blocks, will fill 8 of them: reservation 3
    assert check_grow_due(alloc, 0, 2) == (3, 1, 2)
    # seq 1 fills its last token into a new block: 5 = final, nothing reserved
    assert check_grow_due(alloc, 1, 1) == (3, 1, 0)
    # a jump over several blocks at once (pop_many path): 5 + 8 = 13 tokens, 4 blocks, 3 room, final 9 passed
    assert check_grow_due(alloc, 0, 8) == (3, 2, -3)
    with pytest.raises(ValueError, match="cannot grow by 0"):
        alloc.grow_due(0, 0)


def test_grow_due_refuses_without_change_when_the_pool_is_short():
    alloc = PagedAllocator(4 * 4, block_size=4)  # 3 usable blocks
    alloc.admit(0, 8, final_tokens=20)
    assert check_grow_due(alloc, 0, 8) is None  # needs 2 more blocks, 1 free
    assert check_grow_due(alloc, 0, 4) == (0, 1, 0)  # full blocks: nothing reserved before or after


def test_grow_due_evicts_cached_blocks_in_queue_order():
    alloc = PagedAllocator(6 * 4, block_size=4, prefix_caching=True)  # 5 usable blocks
    alloc.admit(0, 9, final_tokens=9, block_hashes=[11, 12])  # blocks 1-3; 1 and 2 cached
    alloc.free(0)  # uncached 3 to the head, cached 2 and 1 to the back (tail first): queue 3 4 5 2 1
    alloc.admit(1, 5, final_tokens=40, block_hashes=[21])  # takes 3 and 4
    assert alloc.free_block_ids() == [5, 2, 1]
    assert alloc.hit_layout([11, 12], 9) == ([1, 2], [])  # a prompt of 9 tokens would hit both, on the GPU
    assert alloc.evicted_blocks(1, 3) == []  # 8 tokens fit in its 2 blocks
    check_grow_due(alloc, 1, 3)  # 8 tokens: its second block fills and is cached under no hash (none given)
    assert alloc.evicted_blocks(1, 5) == [2] and alloc.new_blocks(1, 5) == 2  # the empty 5 first, then cached 2
    grown = check_grow_due(alloc, 1, 5)  # 13 tokens: needs 2 new blocks, popping 5 then cached 2
    assert grown == (3, 2, 3)  # 3 of the 16 slots held are still to fill
    assert alloc.block_table(1) == (3, 4, 5, 2) and alloc.block_hash(2) is None
    assert alloc.num_cached_tokens([11, 12], 9) == 4  # block 1 (hash 11) still hits; 12 was evicted
    assert alloc.block_hash(1) == 11


def test_what_growth_evicts_from_a_write_back_host_tier():
    """Blocks 1 and 2 cached (hashes 11, 12), a one-block host holding hash 99: growth that evicts block 2
    spills hash 12, which evicts 99, the host's only block; a prompt 11, 99 hits block 1, then 99 on the host."""
    alloc = PagedAllocator(6 * 4, block_size=4, prefix_caching=True)
    tier = HostTier(1, 10)
    alloc.attach_host_tier(tier)
    tier.offload_many([99])
    alloc.admit(0, 9, final_tokens=9, block_hashes=[11, 12])
    alloc.free(0)  # queue 3 4 5 2 1
    alloc.admit(1, 5, final_tokens=40, block_hashes=[21])  # takes 3 and 4
    assert alloc.hit_layout([11, 99, 7], 13) == ([1], [99])
    assert alloc.host_evictions(1, 3, alloc.evicted_blocks(1, 3)) == []  # no block taken, nothing spilled
    alloc.grow(1, 3)
    assert alloc.host_evictions(1, 5, alloc.evicted_blocks(1, 5)) == [99] and not alloc.stores(1, 5)
    alloc.grow(1, 5)
    assert 99 not in tier and 12 in tier


@SETTINGS
@given(block=st.sampled_from([1, 2, 4, 16]), caching=st.booleans(),
       seqs=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 40), st.sampled_from([None, 1, 2])),
                     min_size=1, max_size=6),
       grows=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 30)), max_size=25),
       frees=st.sets(st.integers(0, 5), max_size=3))
def test_grow_due_equals_grow(block, caching, seqs, grows, frees):
    alloc = PagedAllocator(block * 24 + 3, block_size=block, max_model_len=4096, prefix_caching=caching)
    live = []
    for i, (prompt, extra, group) in enumerate(seqs):
        hashes = [group * 100 + j for j in range(prompt // block)] if group else []
        if alloc.admit(i, prompt, final_tokens=prompt + extra, block_hashes=hashes) is not None:
            live.append(i)
    for i in sorted(frees):  # freed (cached) blocks back in the queue, so that growth evicts some
        if i in live and len(live) > 1:
            alloc.free(i)
            live.remove(i)
    for which, extra in grows:
        if not live:
            break
        seq = live[which % len(live)]
        # the simulator's call: the sequence has used its headroom and needs `extra` tokens past it
        num = alloc.headroom(seq) + extra if which % 2 else extra
        check_grow_due(alloc, seq, num)


def test_only_the_paged_allocator_reports_growth():
    """Guards the capability flag the fast-forward reads (never a probe for the method): copy-on-write growth
    can copy a shared tail and slabs never grow into new blocks, so neither reports growth deltas."""
    assert make_allocator("paged", 64, block_size=4).reports_growth
    assert not make_allocator("paged-cow", 64, block_size=4).reports_growth
    contiguous = make_allocator("contiguous-oracle", 64)
    assert not contiguous.reports_growth
    with pytest.raises(NotImplementedError):
        contiguous.grow_due(0, 1)
