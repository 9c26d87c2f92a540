"""vLLM 0.33's ``prefix_cache_retention_interval`` in the hybrid allocator: which full blocks a sliding-window group
caches (``SlidingWindowManager.reachable_block_mask``), and the hits that leaves (`allocators.window_retention`)."""

import pytest

from allocators.hybrid import HybridPagedAllocator
from allocators.window_retention import check_retention_interval, retained_blocks
from tests.allocators.kv_group_fixture import KVGroupFixture

BS, WINDOW = 4, 8  # a window hit needs cdiv(8 - 1, 4) = 2 blocks before its end
GROUPS = (KVGroupFixture("sw", "sliding_window", 1, WINDOW, 100), KVGroupFixture("full", "full", 1, None, 100))


def pool(retention: int | None = 0) -> HybridPagedAllocator:
    return HybridPagedAllocator(400, block_size=BS, kv_groups=GROUPS, prefix_caching=True,
                                prefix_cache_retention_interval=retention)  # 200 blocks


def cached(a: HybridPagedAllocator, seq_id: int) -> list[list[int]]:
    """Per group, the indices of the sequence's blocks that carry a hash."""
    return [[i for i, b in enumerate(t) if b and a._cache.block_hash[b] is not None] for t in a.block_tables(seq_id)]


def test_the_mask_is_vllms():
    """None: every block; 0: the 2 blocks before each boundary's block (39 -> block 9: blocks 7, 8); 16 tokens:
    also the last 2 blocks of every 4-block segment; a segment no longer than a hit's blocks: every block."""
    assert retained_blocks(0, 12, need=2, interval=None, boundaries=(39,), block_size=BS) is None
    assert [i for i, m in enumerate(retained_blocks(0, 12, need=2, interval=0, boundaries=(39,), block_size=BS))
            if m] == [7, 8]
    assert [i for i, m in enumerate(retained_blocks(0, 12, need=2, interval=0, boundaries=(39, 24), block_size=BS))
            if m] == [4, 5, 7, 8]
    assert [i for i, m in enumerate(retained_blocks(0, 12, need=2, interval=16, boundaries=(41,), block_size=BS))
            if m] == [2, 3, 6, 7, 8, 9, 10, 11]
    assert [5 + i for i, m in enumerate(retained_blocks(5, 9, need=2, interval=0, boundaries=(39,), block_size=BS))
            if m] == [7, 8]  # a later call's range
    assert retained_blocks(0, 12, need=2, interval=8, boundaries=(), block_size=BS) is None


def test_by_default_a_window_group_caches_only_the_blocks_before_the_prompts_last_token():
    """A 40-token prompt then 12 decode tokens: the full group caches all 13 full blocks, the window group the 2
    before block 9 (which holds token 39), none of the generated ones. A resend hits 36 tokens (its hit never
    covers the last token); a longer request on the same prompt too (dense: 40, its window ending at block 10)."""
    hashes = list(range(100, 113))
    for retention, prompt_blocks, decode_blocks, longer_hit in ((0, [7, 8], [], 36),
                                                                 (None, list(range(10)), [11, 12], 40)):
        a = pool(retention)
        a.admit(0, 40, final_tokens=52, block_hashes=hashes, prompt_tokens=40)
        assert cached(a, 0) == [prompt_blocks, list(range(10))]
        a.grow(0, 12)  # the window group keeps blocks 11 and 12
        assert cached(a, 0) == [decode_blocks, list(range(13))]
        assert a.num_cached_tokens(hashes[:10], 40) == 36
        assert a.num_cached_tokens(hashes[:10] + [900, 901], 48) == longer_hit
        a.check_invariants()


def test_a_shared_prefix_the_window_group_has_not_cached_is_cached_at_its_junction():
    """Request 0 caches its window tail only at its own prompt's end, so request 1, sharing its first 24 tokens,
    hits nothing: the full group alone would hit 6 blocks. vLLM then pins that junction (its
    ``shared_prefix_boundary``): request 1 caches the window blocks before it, and request 2 sharing the same
    prefix hits its 24 tokens."""
    a = pool()
    mine = list(range(100, 110))
    a.admit(0, 40, final_tokens=40, block_hashes=mine, prompt_tokens=40)
    a.free(0)
    sibling = mine[:6] + list(range(200, 204))
    assert a.num_cached_tokens(sibling, 40) == 0
    assert a.admit(1, 40, final_tokens=40, block_hashes=sibling, prompt_tokens=40).cached_tokens == 0
    assert cached(a, 1)[0] == [4, 5, 7, 8]
    third = mine[:6] + list(range(300, 304))
    assert a.num_cached_tokens(third, 40) == 24
    a.check_invariants()


def test_a_resumed_request_caches_by_its_prompt_not_its_tokens():
    """Preempted after 8 generated tokens, a 40-token prompt comes back as 48 tokens: its replay boundary is still
    token 39's block."""
    a = pool()
    a.admit(0, 48, final_tokens=60, block_hashes=list(range(100, 112)), prompt_tokens=40)
    assert cached(a, 0)[0] == [7, 8]


@pytest.mark.parametrize(("interval", "has_window", "message"), [
    (-16, True, "must be non-negative"), (6, True, "multiple of the scheduler block size"),
    (64, False, "no sliding-window or Mamba KV cache group")])
def test_vllms_checks(interval, has_window, message):
    with pytest.raises(ValueError, match=message):
        check_retention_interval(interval, 4, has_window)


def test_settings_vllm_accepts():
    for interval, has_window in ((None, False), (0, False), (None, True), (0, True), (16, True)):
        check_retention_interval(interval, 4, has_window)
    with pytest.raises(ValueError, match="multiple of the scheduler block size"):
        pool(6)


def test_the_junction_is_looked_up_over_the_whole_request_not_the_first_chunk():
    """A 60-token prompt preempted after a 48-token chunk comes back with a 16-token first chunk: vLLM looks its
    full-attention hit up to its last token (12 blocks, where its window group caches nothing), so the junction is
    token 48 and its window blocks 10 and 11 are cached as the chunks reach them."""
    a = pool()
    hashes = list(range(100, 115))
    a.admit(0, 48, final_tokens=60, block_hashes=hashes, prompt_tokens=60, request_tokens=60)
    a.free(0)
    a.admit(1, 16, final_tokens=60, block_hashes=hashes, prompt_tokens=60, request_tokens=60)
    for _ in range(2):
        a.grow_chunk(1, 16)
    assert cached(a, 1)[0] == [10, 11]
    a.check_invariants()
