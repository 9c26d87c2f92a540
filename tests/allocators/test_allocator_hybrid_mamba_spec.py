"""The hybrid paged allocator with Mamba groups under speculative decoding (vLLM's ``mamba_cache_mode='none'``):
``1 + num_speculative_blocks`` state blocks per sequence per Mamba group from admission to free
(``MambaManager.get_num_blocks_to_allocate``), and attention blocks held for a verification's drafts
(`HybridPagedAllocator.grow_with_drafts`), audited."""

import pytest

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


def test_align_mode_with_speculative_blocks_is_refused():
    with pytest.raises(ValueError, match="mamba_state_blocks"):
        pool(k=2, prefix_caching=True)
