"""Copy-on-write: shared forks, the copies they report, parallel sampling, beam search, shared prefixes."""

from allocators import make_allocator
from allocators.base import SHARED_OWNER, fork_plan
from tests.allocators.block_trie import block_trie

BS = 16


def cow(num_blocks: int = 21, **options):
    return make_allocator("paged-cow", num_blocks * BS, **options)


def test_fork_shares_blocks_and_the_first_writer_copies_the_partial_tail():
    a = cow()
    a.admit(1, 40, final_tokens=50)  # blocks 1, 2 full; block 3 holds 8 tokens
    assert a.fork(1, 2, final_tokens=60) == ()
    assert a.block_table(2) == a.block_table(1) == (1, 2, 3)
    assert [a.ref_count(b) for b in (1, 2, 3)] == [2, 2, 2]
    assert a.headroom(1) == a.headroom(2) == 0  # the next write into block 3 needs a copy
    b = a.breakdown()
    assert (b.token_states, b.used_blocks, b.shared_saved) == (40, 3, 3 * BS)
    assert b.reservation == 8  # the shared tail: the longer sharer will fill it up to 48
    assert a.grow(2, 1) == ((3, 4, BS),)  # (src, dst, slots)
    assert a.block_table(2) == (1, 2, 4) and a.block_table(1) == (1, 2, 3)
    assert a.ref_count(3) == 1 and a.headroom(1) == 8  # the parent owns its tail again
    b = a.breakdown()
    assert (b.token_states, b.shared_saved, b.reservation, b.internal_frag) == (40 + 8 + 1, 2 * BS, 8 + 7, 0)
    assert a.grow(1, 1) == ()  # no copy: the parent's tail is no longer shared
    a.check_invariants()


def test_fork_at_a_block_boundary_needs_no_copy():
    a = cow()
    a.admit(1, 32, final_tokens=40)
    a.fork(1, 2, final_tokens=40)
    assert a.grow(1, 1) == () and a.grow(2, 1) == ()
    assert a.block_table(1)[:2] == a.block_table(2)[:2] and a.block_table(1)[2] != a.block_table(2)[2]
    a.check_invariants()


def test_parallel_sampling_n4_copies_the_tail_three_times():
    a = cow()
    a.admit(0, 40, final_tokens=60)
    for child in (1, 2, 3):
        assert a.fork(0, child, final_tokens=60) == ()
    copies = [a.grow(seq, 1) for seq in (1, 2, 3, 0)]
    assert [len(c) for c in copies] == [1, 1, 1, 0]  # the last holder writes in place
    assert all(c[0][0] == 3 for c in copies[:3])
    b = a.breakdown()
    assert b.used_blocks == 2 + 4 and b.shared_saved == 3 * 2 * BS  # 2 prompt blocks held once, not 4 times
    a.check_invariants()
    for seq in range(4):
        a.free(seq)
    assert a.breakdown().used_blocks == 0
    a.check_invariants()


def test_beam_search_forks_from_chosen_parents_and_frees_the_losers():
    a = cow(40)
    a.admit(0, 20, final_tokens=40)
    a.fork(0, 1, final_tokens=40)
    beams, next_id = [0, 1], 2
    for step in range(12):
        for seq in beams:
            a.grow(seq, 1)
        parents = [beams[0], beams[0]] if step % 3 else [beams[0], beams[1]]  # beam 0 wins twice most steps
        children = []
        for parent in parents:
            a.fork(parent, next_id, final_tokens=40)
            children.append(next_id)
            next_id += 1
        for seq in beams:
            a.free(seq)
        beams = children
        a.check_invariants()
    assert all(a.num_tokens(seq) == 32 for seq in beams)
    b = a.breakdown()
    assert b.used_blocks <= 2 * 2 + 1 and b.shared_saved >= BS  # at least the first prompt block is shared


def rebuild(a, ids, num_tokens, total_tokens, forks, final_tokens):
    """Place a group as the simulator places a swapped one: admit the first, fork the rest where ``forks`` say
    (`fork_plan`), grow every one to ``total_tokens``."""
    a.admit(ids[0], num_tokens, final_tokens=final_tokens)
    plan = fork_plan(forks, len(ids) - 1, num_tokens, total_tokens)
    for child, (source, tokens) in zip(ids[1:], plan, strict=True):
        grow_to(a, ids[source], tokens)
        assert a.fork(ids[source], child, final_tokens=final_tokens) is not None
    for seq in ids:
        grow_to(a, seq, total_tokens)


def grow_to(a, seq, tokens):
    if a.num_tokens(seq) < tokens:
        assert a.grow(seq, tokens - a.num_tokens(seq)) is not None


def test_a_swapped_group_moves_each_shared_block_once_and_forks_back_sharing_them():
    """Four beams of a 40-token prompt at 52 tokens: all share the prompt's 2 full blocks; beams 0, 2 and 3 a
    third; 2 and 3 a partly filled tail too (3 forked from 2 and neither wrote since). vLLM v0 swaps a group
    through a map keyed by GPU block, so the 7 distinct blocks move once each (not the 16 the tables list),
    and the forks `swap_group` gives make the same sharing again, in a pool with just those 7 blocks free."""
    a = cow()
    a.admit(0, 40, final_tokens=80)
    a.fork(0, 1, final_tokens=80)
    a.grow(0, 8)  # copies the shared tail
    a.grow(1, 8)
    a.fork(0, 2, final_tokens=80)  # at a block boundary: shares 3 blocks
    a.grow(0, 4)
    a.grow(2, 4)
    a.fork(2, 3, final_tokens=80)  # shares beam 2's tail
    a.grow(1, 4)
    tables = [a.block_table(seq) for seq in range(4)]
    assert sum(map(len, tables)) == 16 and len({b for t in tables for b in t}) == 7
    swap = a.swap_group(range(4), [0] * 4)
    assert (swap.slots, swap.transfers) == (7 * BS, 7)
    assert swap.forks == ((0, 2 * BS), (0, 3 * BS), (2, 4 * BS))  # from which, at how many tokens shared
    assert not cow(7).group_fits(40, 3, final_tokens=80, then_tokens=12, forks=swap.forks)
    back = cow(8)  # 7 usable blocks
    assert back.group_fits(40, 3, final_tokens=80, then_tokens=12, forks=swap.forks)
    rebuild(back, [10, 11, 12, 13], 40, 52, swap.forks, 80)
    again = [back.block_table(seq) for seq in (10, 11, 12, 13)]
    assert block_trie(again) == block_trie(tables) and back.num_free_blocks == 0
    assert sorted(back.ref_count(b) for b in set(sum(again, ()))) == sorted(a.ref_count(b) for b in
                                                                            set(sum(tables, ())))
    back.check_invariants()


def test_registered_prefix_is_allocated_once_and_shared():
    a = cow()
    prefix = [11, 12]  # a 32-token system prompt
    assert a.register_prefix(prefix) == 32
    pinned = a.registered_blocks
    assert pinned == 2 and a.breakdown().token_states == 32 and a.breakdown().used_blocks == 2
    for seq in range(3):
        adm = a.admit(seq, 40, final_tokens=50, block_hashes=[*prefix, 100 + seq])
        assert adm.cached_tokens == 32
    assert a.block_table(0)[:2] == a.block_table(1)[:2] == a.block_table(2)[:2] == (1, 2)
    assert [a.ref_count(b) for b in (1, 2)] == [4, 4]  # three sequences and the registry
    b = a.breakdown()
    assert (b.used_blocks, b.token_states, b.shared_saved) == (2 + 3, 32 + 3 * 8, 2 * 2 * BS)
    assert (a.memory_map()[BS:3 * BS] == SHARED_OWNER).all()
    a.check_invariants()
    assert a.release_prefix(prefix) == 32
    assert a.ref_count(1) == 3  # still held by the sequences
    for seq in range(3):
        a.free(seq)
    assert a.breakdown().used_blocks == 0
    a.check_invariants()


def test_a_swapped_group_leaves_its_pinned_prefix_and_takes_it_back_without_a_copy():
    """Two forks of a 40-token prompt whose first 2 blocks are a registered prefix, at 50 tokens: 2 pinned blocks
    and 2 of their own each. vLLM v0.3's swap_out skips the prefix blocks, so only the 4 others move; freed
    (swapped out), the pinned blocks stay allocated, and placing the group again re-takes them from the
    registry: it needs just the 4 moved blocks free."""
    prefix, hashes = [11, 12], [11, 12, 200]
    a = cow()
    a.register_prefix(prefix)
    a.admit(0, 40, final_tokens=80, block_hashes=hashes)
    a.fork(0, 1, final_tokens=80)
    grow_to(a, 0, 50)
    grow_to(a, 1, 50)
    tables = [a.block_table(seq) for seq in (0, 1)]
    assert tables[0][:2] == tables[1][:2] == (1, 2) and len({b for t in tables for b in t}) == 6
    swap = a.swap_group([0, 1], [0, 0])
    assert (swap.slots, swap.transfers, swap.resident_slots) == (4 * BS, 4, 2 * BS)
    assert swap.forks == ((0, 2 * BS),)
    a.free(0)
    a.free(1)
    assert a.breakdown().used_blocks == 2 and [a.ref_count(b) for b in (1, 2)] == [1, 1]
    filler = a.num_free_blocks - 4  # leave just the 4 moved blocks free
    a.admit(99, filler * BS, final_tokens=filler * BS)
    plan = fork_plan(swap.forks, 1, 40, 50)
    assert a.admit(10, 40, final_tokens=80, block_hashes=hashes).cached_tokens == 2 * BS
    for child, (source, tokens) in zip([11], plan, strict=True):
        grow_to(a, (10, 11)[source], tokens)
        assert a.fork((10, 11)[source], child, final_tokens=80) == ()
    for seq in (10, 11):
        grow_to(a, seq, 50)
    again = [a.block_table(seq) for seq in (10, 11)]
    assert again[0][:2] == again[1][:2] == (1, 2) and a.num_free_blocks == 0
    assert block_trie(again) == block_trie(tables) and [a.ref_count(b) for b in (1, 2)] == [3, 3]
    assert a.swap_group([10, 11], [0, 0]) == swap  # and would swap the same way again
    a.check_invariants()


def test_register_prefix_without_room_changes_nothing():
    a = cow(3)  # 2 usable blocks
    assert a.register_prefix([1, 2, 3]) is None
    assert a.breakdown().used_blocks == 0 and a.registered_blocks == 0
    assert a.register_prefix([1, 2]) == 32
    assert a.register_prefix([1, 2]) == 32  # a repeat pins the same blocks again
    assert a.ref_count(1) == 2
    a.release_prefix([1, 2])
    a.release_prefix([1, 2])
    assert a.breakdown().used_blocks == 0
    a.check_invariants()
