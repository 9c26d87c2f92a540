"""The hybrid paged allocator (vLLM v1's KV cache groups over one pool): grouping, capacity in group slots,
sliding windows freeing what fell out of them, and prefix hits that need only a window's blocks."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocators.base import cdiv
from allocators.hybrid import HybridPagedAllocator
from allocators.hybrid_queries import _window_hit
from allocators.kv_cache_groups import needs_hybrid, skipped_blocks, split_kv_groups
from tests.allocators.kv_group_fixture import KVGroupFixture
from tests.soak import examples

LAYER = 8192  # bytes per token per layer: 2 (K, V) x 8 KV heads x 256 dims x 2 bytes (Gemma-3-12B)
GEMMA = (KVGroupFixture("local", "sliding_window", 40, 1024, 40 * LAYER),
         KVGroupFixture("global", "full", 8, None, 8 * LAYER))


def test_layers_are_cut_into_groups_of_the_smallest_group():
    """vLLM's grouping: Gemma-3-12B's 40 local and 8 global layers are 6 groups of 8; Gemma-3-27B's 52 and 10
    are 7 groups of 10, the last local one padded (2 real layers)."""
    unit, groups = split_kv_groups(GEMMA)
    assert unit == 8 and [g.name for g in groups] == ["local.0", "local.1", "local.2", "local.3", "local.4", "global"]
    assert [g.window for g in groups] == [1024] * 5 + [None]
    unit, groups = split_kv_groups((KVGroupFixture("local", "sliding_window", 52, 1024, 52),
                                    KVGroupFixture("global", "full", 10, None, 10)))
    assert unit == 10 and len(groups) == 7 and groups[5].layers == 2 and groups[5].group == "local"
    with pytest.raises(ValueError, match="one page size"):
        split_kv_groups((KVGroupFixture("a", "full", 2, None, 200), KVGroupFixture("b", "full", 2, None, 300)))
    assert needs_hybrid(GEMMA) and needs_hybrid(GEMMA[:1]) and not needs_hybrid(GEMMA[1:])


def test_capacity_is_counted_in_group_slots():
    """A pool of K full tokens (all 48 layers) holds K x 48 / 8 tokens of one group's 8 layers."""
    a = HybridPagedAllocator(10_000, block_size=16, kv_groups=GEMMA)
    assert a.kv_tokens == 10_000 and a.capacity == 60_000 and a.num_blocks == 3750
    assert a.slots_per_token == 6 and a.group_names == ("local", "global")


def test_a_window_group_is_capped_at_its_window_and_a_steps_tokens_in_flight():
    """vLLM 0.33's ``SlidingWindowSpec.max_admission_blocks_per_request``: ``cdiv(min(window - 1 +
    max_num_batched_tokens, max_model_len), block_size) + 1`` blocks (the window's start may fall inside a
    block); full-attention groups have no cap."""
    a = HybridPagedAllocator(10_000, block_size=16, kv_groups=GEMMA, max_model_len=131_072,
                             max_num_batched_tokens=2048)
    assert a.admission_caps == [cdiv(1023 + 2048, 16) + 1] * 5 + [None] == [193] * 5 + [None]
    short = HybridPagedAllocator(10_000, block_size=16, kv_groups=GEMMA, max_model_len=2000,
                                 max_num_batched_tokens=2048)
    assert short.admission_caps[0] == cdiv(2000, 16) + 1
    assert HybridPagedAllocator(10_000, block_size=16, kv_groups=GEMMA).admission_caps == [None] * 6


def test_a_prompt_longer_than_the_window_groups_could_hold_whole_is_admitted_in_chunks():
    """12,000 tokens need 750 blocks in every one of Gemma-3-12B's six groups (4,500) in a pool of 4,499
    usable: refused as never fitting where a window group counts its whole prompt. Prefilled in chunks a
    window group never holds more than its cap (193), so vLLM admits it when 750 + 5 x 193 = 1,715 blocks are
    free (``scheduler_reserve_full_isl``) and the request runs."""
    a = HybridPagedAllocator(12_000, block_size=16, kv_groups=GEMMA, max_model_len=131_072,
                             max_num_batched_tokens=2048)
    assert a.num_usable_blocks == 4499
    assert a.never_fits(12_000, final_tokens=12_050) is None
    assert HybridPagedAllocator(12_000, block_size=16, kv_groups=GEMMA).never_fits(
        12_000, final_tokens=12_050) is not None
    assert a.admit(0, 2048, final_tokens=12_050, full_tokens=12_000) is not None
    done = 2048
    while done < 12_000:  # chunk by chunk, the window groups freeing what left their window
        chunk = min(2048, 12_000 - done)
        assert a.grow_chunk(0, chunk) is not None
        done += chunk
        assert max(a.live_blocks(0)[:5]) <= 193
    assert a.live_blocks(0)[5] == 750
    a.check_invariants()
    # the whole-sequence test at its boundary: 1,715 usable blocks admit it, 1,713 do not
    for kv_tokens, usable, admitted in ((4576, 1715, True), (4573, 1713, False)):
        c = HybridPagedAllocator(kv_tokens, block_size=16, kv_groups=GEMMA, max_model_len=131_072,
                                 max_num_batched_tokens=2048)
        assert c.num_usable_blocks == usable
        assert (c.admit(0, 2048, final_tokens=12_000, full_tokens=12_000) is not None) == admitted
        assert (c.never_fits(12_000, final_tokens=12_000) is None) == admitted


def test_window_groups_hold_about_a_window_of_blocks_during_decode():
    """After a 3000-token prompt, at every decode step each window group holds at most window / block_size + 1
    blocks while the full group keeps every block; the prompt step itself holds the whole prompt (vLLM frees
    by the tokens computed before a step)."""
    bs, window = 16, 1024
    a = HybridPagedAllocator(200_000, block_size=bs, kv_groups=GEMMA)
    a.admit(0, 3000, final_tokens=3600)
    assert a.live_blocks(0) == [cdiv(3000, bs)] * 6
    for step in range(600):
        assert a.grow(0, 1) == ()
        tokens = 3001 + step
        live = a.live_blocks(0)
        assert all(n <= window // bs + 1 for n in live[:5]), (step, live)
        assert live[5] == cdiv(tokens, bs)
        assert a.block_tables(0)[0][:skipped_blocks(tokens - 1, window, bs)].count(0) == \
            skipped_blocks(tokens - 1, window, bs)
    a.check_invariants()
    b = a.breakdown()
    local, glob = b.groups
    assert local.used_blocks == 5 * live[0] and glob.used_blocks == live[5]
    assert local.token_states + glob.token_states == b.token_states


def test_lazy_growth_by_headroom_matches_token_by_token():
    """`headroom` stops at the next token whose step frees window blocks, so a decoder told its tokens in
    catch-ups of headroom + 1 (the fast-forward) ends in the same state as one told token by token."""
    groups = (KVGroupFixture("sw", "sliding_window", 1, 40, 100), KVGroupFixture("full", "full", 1, None, 100))
    one = HybridPagedAllocator(4000, block_size=16, kv_groups=groups)
    lazy = HybridPagedAllocator(4000, block_size=16, kv_groups=groups)
    for a in (one, lazy):
        a.admit(0, 100, final_tokens=400)
    for _ in range(300):
        one.grow(0, 1)
    told = 100
    while told < 400:
        step = min(lazy.headroom(0) + 1, 400 - told)
        lazy.grow(0, step)
        told += step
    assert one.block_tables(0) == lazy.block_tables(0) and one.breakdown() == lazy.breakdown()


def test_prefix_hit_needs_only_the_window_blocks():
    """A window group's early blocks can be evicted and a request with the same prompt still hits its whole
    prefix: the window group takes nulls for them and only the last cdiv(window - 1, block_size) blocks. Dense
    retention (vLLM's ``--prefix-cache-retention-interval None``), whose window group caches every full block."""
    bs, window, prompt = 4, 8, 40
    groups = (KVGroupFixture("sw", "sliding_window", 1, window, 100), KVGroupFixture("full", "full", 1, None, 100))
    a = HybridPagedAllocator(60, block_size=bs, kv_groups=groups, prefix_caching=True,
                             prefix_cache_retention_interval=None)  # 30 blocks, 29 usable
    hashes = list(range(100, 100 + prompt // bs))
    a.admit(0, prompt, final_tokens=prompt + 8, block_hashes=hashes)
    a.grow(0, 1)  # the first decode step frees the window's early blocks (cached, in the free queue)
    assert a.live_blocks(0) == [3, 11]
    filler = a.num_free_blocks // 2 * bs  # a block per group per 4 tokens: takes all but one free block,
    assert a.admit(1, filler, final_tokens=filler) is not None  # so the window block A needs next is evicted
    a.free(1)
    longer = hashes + [900, 901]  # the same prompt and 8 tokens more: its hit may end where A's blocks end
    assert a.num_cached_tokens(longer, prompt + 8) == prompt
    assert a.admit(2, prompt + 8, final_tokens=prompt + 16, block_hashes=longer).cached_tokens == prompt
    sw, full = a.block_tables(2)
    need = cdiv(window - 1, bs)  # 2 blocks: what the first uncached token attends to
    first = prompt // bs - need
    assert sw[:first] == (0,) * first and sw[first:prompt // bs] == a.block_tables(0)[0][first:prompt // bs]
    assert full[:prompt // bs] == a.block_tables(0)[1][:prompt // bs]
    a.check_invariants()


def test_a_growth_counts_the_blocks_its_window_frees():
    """A pool too small for a new block refuses a growth unless the same step frees a window block."""
    groups = (KVGroupFixture("sw", "sliding_window", 1, 4, 100),)
    a = HybridPagedAllocator(4 * 4, block_size=4, kv_groups=groups)  # 4 blocks, 3 usable
    a.admit(0, 12, final_tokens=20)  # 3 blocks: the pool is full
    assert a.num_free_blocks == 0
    assert a.grow(0, 1) == ()  # token 13 needs a new block, and computing it frees block 0 .. 1
    assert a.live_blocks(0) == [2]
    a.check_invariants()


def test_a_verification_counts_the_blocks_its_window_frees_before_its_drafts_blocks():
    """ngram drafts on a sliding-window model: vLLM's ``allocate_slots`` for a verification frees what the tokens
    before it leave out of the window, then allocates the fed token's and the drafts' slots in every group, all or
    nothing, so a pool with one free block takes a verification that needs two once its window frees six."""
    groups = (KVGroupFixture("sw", "sliding_window", 1, 4, 100), KVGroupFixture("full", "full", 1, None, 100))
    a = HybridPagedAllocator(4 * 10, block_size=4, kv_groups=groups)  # 19 usable blocks
    a.admit(0, 28, final_tokens=60)  # 7 blocks in each group
    a.admit(1, 8, final_tokens=8)
    assert a.num_free_blocks == 1
    assert a.grow_with_drafts(0, 1, 2) == ()  # token 29 fed, drafts 30 .. 31: a block more in each group
    assert a.block_tables(0)[0][:6] == (0,) * 6 and [len(t) for t in a.block_tables(0)] == [8, 8]
    assert a.num_free_blocks == 5
    a.check_invariants()


def test_accepted_drafts_told_as_a_sequence_is_freed_free_no_window_block():
    """A verification's accepted drafts are told when the sequence is freed (preempted, or finished, with them):
    vLLM caches their full blocks after the step (``update_from_output``'s ``cache_blocks``) but frees window
    blocks only in an ``allocate_slots``, which the sequence no longer has, so its window keeps what it held (told
    as growth, block 1 would leave the window and reach the free queue before the rest)."""
    groups = (KVGroupFixture("sw", "sliding_window", 1, 8, 100), KVGroupFixture("full", "full", 1, None, 100))
    a = HybridPagedAllocator(4 * 20, block_size=4, kv_groups=groups, prefix_caching=True,
                             prefix_cache_retention_interval=None)
    hashes = [1, 2, 3, 4, 5, 6]
    a.admit(0, 12, final_tokens=40, block_hashes=hashes)
    assert a.grow_with_drafts(0, 1, 4) == ()  # token 13 fed, drafts 14 .. 17
    assert a.block_tables(0) == ((0, 2, 3, 7, 8), (4, 5, 6, 9, 10)) and a.num_cached_tokens(hashes, 24) == 12
    assert a.cache_held(0, 3) == ()  # three drafts accepted: 16 tokens, the fourth block full and cached
    assert a.block_tables(0) == ((0, 2, 3, 7, 8), (4, 5, 6, 9, 10)) and a.num_cached_tokens(hashes, 24) == 16
    a.check_invariants()


def test_a_refused_chunk_frees_its_windows_blocks_before_the_preemption_does():
    """vLLM's ``allocate_slots`` removes the blocks a window left before it checks for room, so a refused chunk
    has freed them when the preemption that follows frees its victim's: they are evicted first, the victim's
    cached blocks after them (kvsim freed them only on the retry, after the victim's, and evicted a cached
    window block more, which cost later hits: 7 requests' hits and 14 steps in the harness's
    ``hybrid_small_budget_threshold``). Dense retention: every full window block is cached."""
    groups = (KVGroupFixture("sw", "sliding_window", 1, 8, 100), KVGroupFixture("full", "full", 1, None, 100))
    a = HybridPagedAllocator(22, block_size=4, kv_groups=groups, prefix_caching=True,
                             prefix_cache_retention_interval=None)  # 10 usable blocks
    a.admit(0, 12, final_tokens=20, block_hashes=[1, 2, 3, 4])
    a.admit(1, 8, final_tokens=8, block_hashes=[7, 8])
    assert a.num_free_blocks == 0 and a.block_tables(0) == ((1, 2, 3), (4, 5, 6))
    assert a.grow_chunk(0, 4) is None  # the chunk after token 12 frees window block 1, and needs two
    assert a.block_tables(0) == ((0, 2, 3), (4, 5, 6)) and a.free_block_ids() == [1]
    assert a.grow_chunk(0, 4) is None and a.free_block_ids() == [1]  # tried again: nothing more to free
    a.free(1)  # the victim's blocks, each group's tail first, behind the window's
    assert a.free_block_ids() == [1, 8, 7, 10, 9]
    assert a.grow_chunk(0, 4) == () and a.block_tables(0) == ((0, 2, 3, 1), (4, 5, 6, 8))
    a.check_invariants()


def test_a_request_whose_window_holds_a_prompts_share_only_while_prefilling_fits():
    """gpt-oss-20b's groups (window 128 beside a full one) in 300 blocks, a budget of 2048: a 2,500-token prompt
    takes 157 full blocks and, prefilled in chunks, at most 137 window blocks (its admission cap): 294 fit in
    299; decoding to 2,644 tokens holds 166 full blocks and a window's 9, not the prompt's share (kvsim added
    the two and refused 3 of the harness's ``hybrid_reserve_full_isl_off`` requests that vLLM runs). Alone,
    the request runs to its end; a final length needing 291 + 9 blocks never fits."""
    groups = (KVGroupFixture("sw", "sliding_window", 1, 128, 100), KVGroupFixture("full", "full", 1, None, 100))
    a = HybridPagedAllocator(2400, block_size=16, kv_groups=groups, max_model_len=16_384,
                             max_num_batched_tokens=2048)
    assert a.num_usable_blocks == 299 and a.admission_caps == [137, None]
    assert a.never_fits(2500, final_tokens=2644) is None
    assert a.never_fits(2500, final_tokens=290 * 16) is None
    assert "needs 300 blocks of 16 in 2 KV cache groups at its final length 4641" in a.never_fits(
        2500, final_tokens=290 * 16 + 1)
    assert a.admit(0, 2048, final_tokens=2644, full_tokens=2500) is not None
    assert a.grow_chunk(0, 452) is not None
    for _ in range(2644 - 2500):
        assert a.grow(0, 1) is not None
    assert a.live_blocks(0) == [9, 166]
    a.check_invariants()


@settings(max_examples=examples(300), deadline=None)
@given(st.data())
def test_prefix_hit_is_the_longest_prefix_every_group_accepts(data):
    """`_lookup`'s hit (full groups asked first, window groups skipping a window's length past an uncached
    block, chunked groups reading from the start of the hit's last chunk) equals a brute-force reading of
    vLLM's rule on random caches: per group a random set of cached blocks of one prompt, with windows of 1-5
    blocks, chunks of 2 or 3 blocks (Llama 4's chunked-local attention: the blocks from the chunk the hit's next
    token is in), and a full group or none."""
    bs = 4
    kinds = data.draw(st.lists(st.sampled_from([None, 5, 8, 13, 20, "chunk8", "chunk12"]), min_size=1, max_size=3))
    groups = tuple(KVGroupFixture(f"g{i}", "full" if k is None else "sliding_window" if isinstance(k, int)
                                  else "chunked_local", 1, k if k is None or isinstance(k, int) else int(k[5:]), 1)
                   for i, k in enumerate(kinds))
    a = HybridPagedAllocator(4096, block_size=bs, kv_groups=groups, prefix_caching=True)
    num_blocks = data.draw(st.integers(1, 40))
    hashes = [1000 + i for i in range(num_blocks)]
    n = len(a.groups)
    cached = [data.draw(st.sets(st.integers(0, num_blocks - 1))) for _ in a.groups]
    block = 1
    for g, hit in enumerate(cached):
        for i in sorted(hit):
            a._cache.insert(block, hashes[i] * n + g)
            block += 1
    num_tokens = data.draw(st.integers(1, num_blocks * bs + bs))
    limit = min((num_tokens - 1) // bs, num_blocks)

    def first_needed(g: int, length: int) -> int:
        w = a.windows[g]
        return 0 if w is None else length * bs // w * w // bs if a.chunked[g] else max(0, length - cdiv(w - 1, bs))

    want = next((length for length in range(limit, 0, -1)
                 if all(all(i in hit for i in range(first_needed(g, length), length))
                        for g, hit in enumerate(cached))), 0)
    hits = a._lookup(hashes, num_tokens)
    assert a.num_cached_tokens(hashes, num_tokens) == want * bs
    assert (len(hits[0]) if hits else 0) == want
    for g, hit in enumerate(hits):
        first = first_needed(g, want)
        assert hit[:first] == [0] * first and all(b != 0 for b in hit[first:]), f"group {g}: {hit}"


def test_window_hit_reads_each_block_at_most_once():
    """`_window_hit` looks each block up at most once: a miss found inside a candidate's window leaves the
    blocks between the window's start and the miss known cached, so the next candidate reads only the ones
    before them. Here every block but 90 is cached, with a window of 20 blocks: the hit ends at 90, read in
    21 lookups (the candidate ending at 100 read from 80 up to the miss, then 79 down to 70)."""
    asked: list[int] = []

    def get(key: int) -> int | None:
        asked.append(key)
        return None if key == 90 or not cached[0] <= key < cached[1] else 1

    cached = (0, 100)
    assert _window_hit(get, range(100), 1, 0, 100, 20) == 90
    assert sorted(asked) == list(range(70, 91))
    asked.clear()
    cached = (30, 45)  # an island shorter than the window: no window fits, the (empty) leading run is the hit
    assert _window_hit(get, range(100), 1, 0, 100, 20) == 0
    assert len(set(asked)) == len(asked)
