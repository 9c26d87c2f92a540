"""The hybrid paged allocator on chunked-local attention (Llama 4's ``attention_chunk_size``): a token attends within
its own chunk only, so a chunked group frees every block of the earlier chunks at once (vLLM's
``ChunkedLocalAttentionManager``), caps a request's share at a chunk and a step's tokens, and a prefix hit needs
only the blocks of the chunk its next token is in."""

import dataclasses

import pytest

from allocators.base import cdiv
from allocators.catalog import get_model
from allocators.hybrid import HybridPagedAllocator
from allocators.kv_cache_groups import (
    hybrid_disabled,
    needs_hybrid,
    next_skip,
    skipped_blocks,
    split_kv_groups,
)
from tests.allocators.kv_group_fixture import KVGroupFixture

CHUNK, BLOCK = 8, 4
LLAMA4_LIKE = (KVGroupFixture("chunked", "chunked_local", 1, CHUNK, 100), KVGroupFixture("full", "full", 1, None, 100))


def _pool(**options) -> HybridPagedAllocator:
    return HybridPagedAllocator(4000, block_size=BLOCK, kv_groups=LLAMA4_LIKE, max_model_len=512, **options)


def test_a_chunked_group_skips_the_blocks_of_the_chunks_before_the_tokens_own():
    """``ChunkedLocalAttentionManager.get_num_skipped_tokens``: ``computed // chunk x chunk``, so 13 tokens computed
    skip the first chunk's 8 (two blocks of 4), 7 skip none, 16 skip two chunks; a sliding window of 8 skips
    only what falls out of its last 8 tokens. `next_skip` is the first count that skips more."""
    assert [skipped_blocks(c, CHUNK, BLOCK, chunked=True) for c in (7, 8, 13, 15, 16)] == [0, 2, 2, 2, 4]
    assert [skipped_blocks(c, CHUNK, BLOCK) for c in (7, 8, 13, 16)] == [0, 0, 1, 2]
    assert next_skip(0, CHUNK, BLOCK, chunked=True) == 8 and next_skip(2, CHUNK, BLOCK, chunked=True) == 16
    assert next_skip(0, CHUNK, BLOCK) == 4 + CHUNK - 1


def test_decoding_frees_a_whole_chunk_at_its_boundary():
    """Admitted with 6 tokens and decoding one token a step: the chunked group holds the blocks of the current
    chunk only, all of the previous chunk's freed in the step whose last computed token starts the next chunk; the
    full group keeps every block."""
    a = _pool()
    a.admit(1, 6, final_tokens=40)
    for tokens in range(7, 30):
        a.grow(1)
        chunked, full = a.block_tables(1)
        computed = tokens - 1
        skipped = computed // CHUNK * CHUNK // BLOCK
        assert chunked[:skipped] == (0,) * skipped and all(chunked[skipped:]), (tokens, chunked)
        assert len(full) == cdiv(tokens, BLOCK) and all(full)
        a.check_invariants()


def test_a_decoder_syncs_at_the_growth_that_frees_a_chunk():
    """Admitted with a 25-token prompt (nothing computed before its step, nothing freed), a decoder has no room: its
    first growth (25 computed) frees the three chunks before token 24's, so the fast-forward must sync it there.
    After that its room is its last block's free slots, which end before the next chunk does."""
    a = _pool()
    a.admit(1, 25, final_tokens=200)
    assert a.headroom(1) == 0 and a.live_blocks(1) == [7, 7]
    a.grow(1)
    assert a.block_tables(1)[0][:6] == (0,) * 6 and a.live_blocks(1) == [1, 7]
    assert a.headroom(1) == 2  # 26 tokens in 7 blocks of 4; the next chunk starts at 32


def test_a_chunked_groups_admission_cap_is_a_chunk_and_a_steps_tokens():
    """vLLM 0.33's ``ChunkedLocalAttentionSpec.max_admission_blocks_per_request``: ``cdiv(min(chunk +
    max_in_flight_tokens, max_model_len), block_size)`` (a chunk starts on a block boundary, so no block more than
    that, unlike a window); Llama 4 Scout at its 8,192-token chunk, a 2,048-token budget and blocks of 16: 640."""
    assert _pool(max_num_batched_tokens=16).admission_caps == [cdiv(CHUNK + 16, BLOCK), None]
    scout = HybridPagedAllocator(100_000, block_size=16, kv_groups=get_model("llama-4-scout-17b-16e").kv_groups(),
                                 max_model_len=131_072, max_num_batched_tokens=2048)
    assert scout.admission_caps == [640, 640, 640, None]


def test_a_prefix_hit_needs_only_the_chunk_its_next_token_is_in():
    """vLLM's two examples (chunk 8, blocks of 4): a 16-token request whose next token is token 15 needs block 2
    (tokens 8-11) cached in the chunked group, the blocks before it being nulls; one of 17 tokens (next token 16,
    a new chunk) needs no chunked block at all. The full group needs every block either way."""
    a = _pool(prefix_caching=True)
    hashes = [100, 101, 102, 103]
    a.admit(1, 17, final_tokens=17, block_hashes=hashes)
    a.grow(1)  # 18 tokens, 17 computed: the chunked group freed blocks 0-3 (still cached, as free blocks)
    a.free(1)
    assert a.num_cached_tokens(hashes, 16) == 12  # blocks 0-2: the chunked group's block 2, the full group's all
    hits = a._lookup(hashes, 16)
    assert hits[0][:2] == [0, 0] and hits[0][2] and all(hits[1])
    assert a.num_cached_tokens(hashes, 17) == 16
    assert a._lookup(hashes, 17)[0] == [0, 0, 0, 0]
    evicted = _pool(prefix_caching=True)  # block 2 of the chunked group not cached: the hit ends at its chunk's start
    evicted.admit(1, 9, final_tokens=9, block_hashes=hashes[:2])
    evicted.free(1)
    assert evicted.num_cached_tokens(hashes, 16) == 8


def test_accepted_drafts_cache_the_block_they_fill_before_a_chunk_boundary_skips_it():
    """A verification's accepted drafts fill block 1 (tokens 4-7) and reach the chunk boundary at 8: vLLM caches
    the block right after that step (``update_from_output``'s ``cache_blocks``), so the next verification, which
    skips the first chunk, frees a cached block, which a later request with the prefix can hit."""
    a = _pool(prefix_caching=True)
    hashes = [7, 8, 9]
    a.admit(1, 5, final_tokens=40, block_hashes=hashes)
    assert a.grow_with_drafts(1, 1, 3) is not None  # token 5 fed with 3 drafts, slots up to 9
    assert a.grow_with_drafts(1, 4, 3) is not None  # 3 accepted and the next token: 10 tokens, 9 computed
    chunked, _ = a.block_tables(1)
    assert chunked[:2] == (0, 0)
    n = len(a.groups)
    assert a._cache.getter(hashes[1] * n + 0) is not None, "the chunked group's block 1 was never cached"
    a.check_invariants()


def test_a_chunk_must_be_a_whole_number_of_blocks():
    with pytest.raises(ValueError, match="attention chunk of whole blocks"):
        HybridPagedAllocator(4000, block_size=16, kv_groups=LLAMA4_LIKE)


@pytest.mark.parametrize("name", ["llama-4-scout-17b-16e", "llama-4-maverick-17b-128e"])
def test_llama_4s_layers_make_three_chunked_kv_cache_groups_and_a_full_one(name):
    """Scout's and Maverick's configs: 36 of 48 layers attend within 8,192-token chunks (those whose
    ``no_rope_layers`` entry is 1), 12 are NoPE full attention; 8 KV heads of 128 dims at 2 bytes: 4,096 bytes per
    token per layer."""
    model = get_model(name)
    groups = model.kv_groups()
    assert [(g.attention, g.layers, g.window) for g in groups] == [("chunked_local", 36, 8192), ("full", 12, None)]
    assert model.kv_bytes_per_token == 48 * 4096
    unit, cache_groups = split_kv_groups(groups)
    assert unit == 12 and [(g.name, g.chunked) for g in cache_groups] == [
        ("chunked_local.0", True), ("chunked_local.1", True), ("chunked_local.2", True), ("full", False)]
    assert needs_hybrid(groups) and needs_hybrid(groups[:1])


def test_vllm_turns_its_hybrid_manager_off_for_chunked_attention_with_an_eagle_style_drafter():
    """vLLM 0.33 (``VllmConfig.__post_init__``): chunked-local attention with EAGLE (or MTP) runs without the
    hybrid manager; ngram drafts, and a sliding window with EAGLE, keep it."""
    chunked = get_model("llama-4-scout-17b-16e").kv_groups()
    window = get_model("gpt-oss-20b").kv_groups()
    assert hybrid_disabled(False, chunked, drafter=True) and not hybrid_disabled(False, chunked, drafter=False)
    assert not hybrid_disabled(False, window, drafter=True) and hybrid_disabled(True, window, drafter=False)


@pytest.mark.parametrize("fields, message", [
    ({"chunked_attention_layers": 12}, "chunked_attention_layers needs attention_chunk_size"),
    ({"attention_chunk_size": 8192, "chunked_attention_layers": 60}, "at most num_layers"),
    ({"attention_chunk_size": 8192, "sliding_window": 4096}, "one of them"),
    ({"attention_chunk_size": 0}, "attention_chunk_size"),
])
def test_a_bad_chunked_layout_is_refused_with_its_field(fields, message):
    base = dataclasses.replace(get_model("llama-3-8b"), name="test-chunked")
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(base, **fields)


def test_a_growth_refused_at_a_chunk_start_leaves_the_chunked_group_empty_and_consistent():
    """A pool of 8 usable blocks, all held: 6 tokens (blocks 0-1 in each group) growing to 13 cross the chunk start
    at 8, so vLLM's ``allocate_slots`` frees the chunked group's two blocks, then finds no room for the four it
    needs and refuses. The chunked group then holds no block and no reservation (the full group keeps its tail); a
    fork copies none there, and once room is made the growth goes through."""
    a = HybridPagedAllocator(18, block_size=BLOCK, kv_groups=LLAMA4_LIKE, max_model_len=64)
    a.admit(1, 6, final_tokens=16)
    a.admit(2, 8, final_tokens=8)
    assert a.grow(1, 7) is None
    assert a.block_tables(1)[0] == (0, 0) and a.live_blocks(1) == [0, 2]
    a.check_invariants()
    assert a.fork(1, 3, final_tokens=16) is not None and a.live_blocks(3) == [0, 2]
    a.check_invariants()
    a.free(3)
    a.free(2)
    assert a.grow(1, 7) is not None and a.block_tables(1)[0][:2] == (0, 0) and a.live_blocks(1) == [2, 4]
    a.check_invariants()
