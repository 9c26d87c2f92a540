"""The hybrid paged allocator with Mamba groups under speculative decoding (vLLM's ``mamba_cache_mode='none'``):
``1 + num_speculative_blocks`` state blocks per sequence per Mamba group from admission to free
(``MambaManager.get_num_blocks_to_allocate``), and attention blocks held for a verification's drafts
(`HybridPagedAllocator.grow_with_drafts`), audited; with prefix caching on (``'align'``) the speculative blocks
after the running one, moved along the position-indexed table (`allocators.mamba_align.place_blocks`)."""

from allocators.hybrid import HybridPagedAllocator
from allocators.mamba_layout import mamba_state_blocks
from tests.allocators.kv_group_fixture import KVGroupFixture

ATTENTION = (KVGroupFixture("full", "full", 4, None, 4 * 4096),)  # Nemotron-H-8B's 4 attention layers
BS = 1040


def pool(blocks: int = 60, k: int = 2, **options) -> HybridPagedAllocator:
    a = HybridPagedAllocator(blocks * BS, block_size=BS, kv_groups=ATTENTION, mamba_groups=6, max_model_len=16384,
                             mamba_state_blocks=mamba_state_blocks(k), **options)
    a.check_invariants()
    return a


def test_a_sequence_holds_one_plus_k_state_blocks_per_mamba_group_for_its_life():
    a = pool(k=2)
    assert a.admit(1, 2000, final_tokens=3000) is not None
    assert a.live_blocks(1) == [2] + [3] * 6 and a.num_free_blocks == 59 - 20
    states = a.block_tables(1)[1:]
    assert a.grow_chunk(1, 100) is not None and a.grow(1, 200) is not None
    a.check_invariants()
    assert a.live_blocks(1) == [3] + [3] * 6 and a.block_tables(1)[1:] == states
    a.free(1)
    assert a.num_free_blocks == 59
    a.check_invariants()


def test_admission_and_the_empty_pool_count_the_speculative_blocks():
    """vLLM adds ``block_size x num_speculative_blocks`` tokens to a Mamba group's request, its block size being
    ``max_model_len``: 3 blocks a group with k = 2, in the admission test and the whole-prompt one alike."""
    a = pool(blocks=22, k=2)  # 21 usable
    assert a.admit(1, 4 * BS, final_tokens=4 * BS + 1, full_tokens=4 * BS) is None  # 4 + 18 > 21
    assert a.admit(1, 3 * BS, final_tokens=3 * BS + 1) is not None and a.num_free_blocks == 0  # 3 + 18
    a.free(1)
    assert a.never_fits(4 * BS, final_tokens=4 * BS) is not None and a.never_fits(3 * BS, final_tokens=3 * BS) is None


def test_drafts_hold_attention_blocks_all_or_nothing_and_later_tokens_fill_them():
    a = pool(blocks=21, k=2)  # 20 usable: 18 state blocks, 2 attention blocks
    assert a.admit(1, BS - 1, final_tokens=3 * BS) is not None and a.num_free_blocks == 1
    assert a.grow_with_drafts(1, 1, 2) is not None  # the fed token fills block 0, the drafts take block 1
    assert a.live_blocks(1) == [2] + [3] * 6 and a.num_free_blocks == 0
    a.check_invariants()
    assert a.grow_with_drafts(1, 1, 2) is not None  # a rejected draft's slot is filled: nothing new
    assert a.grow_with_drafts(1, BS, 2) is None  # a third attention block does not fit
    assert a.live_blocks(1) == [2] + [3] * 6
    a.check_invariants()


def test_align_mode_keeps_k_speculative_blocks_after_the_running_one_and_moves_them_along():
    """Prefix caching on (vLLM's ``mamba_cache_mode='align'``, ``MambaManager.allocate_new_blocks``): the first
    allocation takes the running block and k speculative ones after it; a chunk that leaves their columns behind
    moves them to the table's end (a null where they were) and takes only a checkpoint block and the running one;
    a verification's drafts count in the columns; the blocks no step reads are freed at the next allocation, so a
    decoding request rests at 1 + k state blocks a group."""
    a = pool(blocks=40, k=2, prefix_caching=True)
    assert a.admit(1, 2 * BS, final_tokens=8 * BS, prompt_tokens=6 * BS, request_tokens=6 * BS) is not None
    first = a.block_tables(1)[1]
    assert first[0] == 0 and all(first[1:]) and len(first) == 2 + 2  # running at column 1, then 2 speculative
    assert a.live_blocks(1) == [2] + [3] * 6 and a.num_free_blocks == 39 - 20
    a.check_invariants()
    assert a.grow_chunk(1, 4 * BS) is not None  # to the prompt's end at 6 blocks: a checkpoint at 5
    table = a.block_tables(1)[1]
    assert table[:6] == (0, first[1], 0, 0, first[2], first[3]) and all(table[6:]) and len(table) == 6 + 2
    assert a.live_blocks(1) == [6] + [5] * 6  # the copied-from state, the checkpoint, the running and 2 more
    a.check_invariants()
    assert a.grow_with_drafts(1, 1, 2) is not None  # 6 blocks + 3 tokens: a column more, the checkpoint freed
    assert len(a.block_tables(1)[1]) == 7 + 2 and a.live_blocks(1) == [7] + [4] * 6
    a.check_invariants()
    assert a.grow_with_drafts(1, 1, 2) is not None
    assert a.live_blocks(1) == [7] + [3] * 6 and a.num_free_blocks == 39 - 7 - 18
    a.check_invariants()
    a.free(1)
    assert a.num_free_blocks == 39
    a.check_invariants()


def test_align_mode_admission_counts_the_speculative_blocks():
    """vLLM's admission test in align mode (``get_num_blocks_to_allocate``): the columns missing, capped at the
    running, checkpoint and k speculative blocks a group: 1 + 6 x 3 for a 1-block prompt at k = 2, and a
    2-block one exports its checkpoint at 1 block into a block of its own, 2 + 6 x 4."""
    assert pool(blocks=19, k=2, prefix_caching=True).admit(1, BS, final_tokens=BS + 1) is None  # 18 usable
    a = pool(blocks=20, k=2, prefix_caching=True)
    assert a.admit(1, BS, final_tokens=BS + 1) is not None and a.num_free_blocks == 0
    assert a.live_blocks(1) == [1] + [3] * 6
    a.check_invariants()
    assert pool(blocks=26, k=2, prefix_caching=True).admit(1, 2 * BS, final_tokens=2 * BS + 1) is None
    b = pool(blocks=27, k=2, prefix_caching=True)
    assert b.admit(1, 2 * BS, final_tokens=2 * BS + 1) is not None and b.live_blocks(1) == [2] + [4] * 6
    b.check_invariants()


def test_a_drafters_lookahead_slots_take_attention_blocks_at_admission_up_to_max_model_len():
    """An MTP drafter's lookahead (vLLM's ``allocate_slots`` with ``num_lookahead_tokens``, prefix caching off):
    the attention group holds slots for the tokens and the k lookahead ones after them, counted in the admission
    test (not in the whole-prompt one), capped at ``max_model_len``; the Mamba groups' 1 + k state blocks cover
    them. The slots are held, not tokens: a later step's tokens fill them."""
    a = pool(blocks=21, k=2)  # 20 usable: 18 state blocks, 2 attention blocks
    assert a.admit(1, BS - 1, final_tokens=3 * BS, lookahead_slots=2) is not None
    assert a.live_blocks(1) == [2] + [3] * 6 and a.num_free_blocks == 0
    a.check_invariants()
    assert a.grow_with_drafts(1, 1, 2) is not None and a.num_free_blocks == 0  # the lookahead's block already
    a.free(1)
    b = pool(blocks=20, k=2)  # 19 usable: one attention block
    assert b.admit(1, BS - 1, final_tokens=3 * BS, lookahead_slots=2) is None
    assert b.admit(1, BS - 1, final_tokens=3 * BS, full_tokens=BS - 1, lookahead_slots=1) is not None
    b.free(1)
    capped = HybridPagedAllocator(21 * BS, block_size=BS, kv_groups=ATTENTION, mamba_groups=6, max_model_len=BS,
                                  mamba_state_blocks=mamba_state_blocks(2))
    assert capped.admit(1, BS - 1, final_tokens=BS, lookahead_slots=2) is not None
    assert capped.live_blocks(1) == [1] + [3] * 6  # one slot of lookahead: max_model_len


def test_align_mode_lookahead_slots_take_state_columns_as_a_verifications_drafts_do():
    """Prefix caching on: a padded admission's placeholder drafts (vLLM's ``pad_spec_decode`` schedules ``1 + k``
    tokens, ``num_tokens_main_model`` counting them) take attention slots and state columns in the one allocation,
    as `grow_with_drafts` gives a verification's drafts: 2,081 tokens' columns (a checkpoint at 2,080) for a
    2,079-token request, its running block and k speculative ones after them; the slots are held, not tokens."""
    plain = pool(blocks=40, k=2, prefix_caching=True)
    assert plain.admit(1, 2 * BS - 1, final_tokens=3 * BS) is not None
    assert plain.block_tables(1)[1] == (3, 4, 5, 6) and plain.live_blocks(1) == [2] + [4] * 6
    padded = pool(blocks=40, k=2, prefix_caching=True)
    assert padded.admit(1, 2 * BS - 1, final_tokens=3 * BS, lookahead_slots=2) is not None
    table = padded.block_tables(1)[1]
    assert table[0] == 0 and all(table[1:]) and len(table) == 3 + 2
    assert padded.live_blocks(1) == [3] + [4] * 6 and padded.num_tokens(1) == 2 * BS - 1
    padded.check_invariants()
    padded.free(1)
    assert padded.num_free_blocks == 39
    tight = pool(blocks=27, k=2, prefix_caching=True)  # 26 usable: 2 + 6 x 4 fit, 3 + 6 x 4 do not
    assert tight.admit(1, 2 * BS - 1, final_tokens=3 * BS, lookahead_slots=2) is None
    assert tight.admit(1, 2 * BS - 1, final_tokens=3 * BS) is not None
