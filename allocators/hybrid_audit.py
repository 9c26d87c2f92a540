"""A from-scratch audit of the hybrid paged allocator, for `HybridPagedAllocator.check_invariants`.

Everything kept incrementally (reference counts, each block's group, the free queue, the prefix cache, the
per-group token, reservation and block counters, shared slots, each sequence's room) is recomputed from the
block tables alone; the tables are checked against the windows (nulls only as a leading run, only in window
groups, never over a block the last token, or a refused growth's first, still attends to; a Mamba group's table
one live state block (1 + vLLM's num_speculative_blocks with speculative decoding), whole and unshared, or in
align mode a table as long as the attention ones with at most 3 live state blocks, more under async
scheduling), and the breakdown must sum to capacity, in total and per group, its cached slots being the free
blocks that keep a hash.
"""

from __future__ import annotations

from allocators.base import cdiv
from allocators.kv_cache_groups import next_skip, skipped_blocks


def audit_hybrid(a) -> None:
    """Audit a `HybridPagedAllocator` (``a``); raises AssertionError on the first inconsistency."""
    bs, n, ngroups = a.block_size, a.num_blocks, len(a.groups)
    refs = [0] * n
    fill = [0] * n
    group = [-1] * n
    tok, used = [0] * ngroups, [0] * ngroups
    reserved = 0
    for seq_id, s in a._seqs.items():
        length = cdiv(s.tokens, bs)
        assert s.tokens > 0, f"sequence {seq_id}: holds no token"
        # attention blocks held for speculative drafts past the tokens (`grow_with_drafts`; with windows, at most
        # the blocks of the most drafts a verification held)
        held_len = len(s.tables[0])
        spec = a.mamba_state_blocks - 1
        assert held_len == length or (length < held_len and (
            spec and all(w is None for w in a.windows) or held_len <= cdiv(s.tokens + a.draft_slots, bs))), \
            f"sequence {seq_id}: {held_len} blocks held for {s.tokens} tokens"
        for g, (table, k) in enumerate(zip(s.tables, s.skipped, strict=True)):
            w = a.windows[g]
            if a.mamba[g] and a.align:  # a state table as long as the attention ones, at most 3 live, whole
                # (with speculative decoding ``spec`` columns longer, and ``spec`` more live after the running one,
                # `mamba_align.place_blocks`)
                # (under async scheduling frees lag a step: 4, and 5 where any chunk may take a checkpoint block,
                # a positive or dense retention interval, as two chunks' checkpoint and running blocks and the
                # state the first was copied from are held; vLLM 0.33's AsyncScheduler holds the same five)
                # (a drafter's lookahead slots lengthen the attention tables only: up to cdiv(lookahead, bs) columns
                # fewer, `HybridQueries._main_model_drafts`)
                live = [b for b in table[k:] if b]
                most = 3 + spec + (1 + (a.retention_interval != 0) if a.processed_basis else 0)
                short = held_len + spec - len(table)
                assert 0 <= short <= cdiv(a.lookahead_tokens, bs) and not any(table[:k]) and 0 < len(live) <= most, \
                    f"sequence {seq_id} Mamba group {g}: table {table} is not a state table of {held_len + spec} " \
                    f"columns (less up to {cdiv(a.lookahead_tokens, bs)} for the drafter's lookahead)"
                # synchronous, the live states are the running one, the checkpoint before it (the chunk's, on any
                # chunk under a positive retention interval) and the one the running state was copied from
                assert a.processed_basis or all(i >= len(table) - 2 - spec or i == s.last_state
                                                for i in range(k, len(table)) if table[i]), \
                    f"sequence {seq_id} Mamba group {g}: a live state outside the running, checkpoint and copied " \
                    f"columns of {table}"
                for b in live:
                    assert 0 < b < n and (refs[b] == 0 or group[b] == g), f"block {b}: sharers disagree"
                    refs[b] += 1
                    fill[b], group[b] = bs, g
                continue
            if a.mamba[g]:  # its live state blocks (1 + speculative ones), whole, never shared (prefix caching off)
                assert len(table) == a.mamba_state_blocks and k == 0 and all(0 < b < n for b in table), \
                    f"sequence {seq_id} Mamba group {g}: table {table} is not {a.mamba_state_blocks} live state " \
                    "blocks"
                for b in table:
                    assert refs[b] == 0, f"block {b}: a Mamba state block is shared"
                    refs[b], fill[b], group[b] = 1, bs, g
                continue
            assert len(table) == held_len, f"sequence {seq_id} group {g}: table length {len(table)} != {held_len}"
            assert all(b == 0 for b in table[:k]) and all(b for b in table[k:]), \
                f"sequence {seq_id} group {g}: nulls are not exactly the leading {k} entries"
            assert w is not None or k == 0, f"sequence {seq_id} group {g}: a full-attention group freed blocks"
            if w is not None:
                assert k <= skipped_blocks(max(s.tokens - 1, s.computed), w, bs, a.chunked[g]), \
                    f"sequence {seq_id} group {g}: freed {k} blocks, but the last token still needs some"
            for i in range(k, held_len):
                b = table[i]
                assert 0 < b < n, f"sequence {seq_id}: block id {b} out of range"
                f = max(0, min(bs, s.tokens - i * bs))
                assert refs[b] == 0 or (fill[b] == f and group[b] == g), f"block {b}: sharers disagree"
                refs[b] += 1
                fill[b], group[b] = f, g
        assert len({b for t in s.tables for b in t if b}) == sum(a.live_blocks(seq_id)), \
            f"sequence {seq_id}: a block appears twice in its tables"
        last_shared = refs[s.tables[0][-1]] > 1
        assert not last_shared, f"sequence {seq_id}: its last block is shared"
        held = held_len * bs
        assert s.res == (max(0, min(s.final, held) - s.tokens) if a._holds_tail(s) else 0), \
            f"sequence {seq_id}: reservation drifted"
        room = held - s.tokens
        if a.align and sum(1 for b in s.tables[-1] if b) > 1:
            room = 0
        if room and a.prefix_caching and s.tokens // bs < len(s.hashes):
            room -= 1  # the step filling a hashed block caches it
        lag = 1 if a.step_basis else 0
        for g, w in enumerate(a.windows):
            if w is not None:
                room = min(room, max(0, next_skip(s.skipped[g], w, bs, a.chunked[g]) + lag - s.tokens))
        assert s.room == room, f"sequence {seq_id}: room {s.room} != {room}"
        reserved += s.res
    queued = a._pool.audit(refs)
    for b in range(1, n):
        if refs[b]:
            assert a._group_of[b] == group[b], f"block {b}: group {a._group_of[b]} != {group[b]}"
            tok[group[b]] += fill[b]
            used[group[b]] += 1
    for b, h in enumerate(a._cache.block_hash):
        assert h is None or a.prefix_caching, f"block {b}: hashed with prefix caching off"
        assert h is None or refs[b] == 0 or fill[b] == bs, f"block {b}: hashed but not full"
        assert h is None or refs[b] == 0 or h % ngroups == group[b], f"block {b}: cached under another group"
    saved = sum(max(0, r - 1) for r in refs) * bs
    assert tok == a._tok, f"token slots per group {a._tok} != recomputed {tok}"
    assert used == a._used, f"blocks per group {a._used} != recomputed {used}"
    assert reserved == a._reserved, f"reservation {a._reserved} != recomputed {reserved}"
    assert saved == a._shared_saved, f"shared_saved {a._shared_saved} != recomputed {saved}"
    assert sum(used) + len(queued) == a.num_usable_blocks, "blocks not conserved"
    b = a.breakdown()
    total = b.token_states + b.reservation + b.internal_frag + b.external_frag + b.free
    assert total == a.capacity and b.internal_frag >= 0, f"breakdown sums to {total}, not {a.capacity}"
    cached = sum(1 for blk in queued if a._pool.cache.block_hash[blk] is not None) * bs
    assert b.cached == cached <= b.free + b.external_frag, f"cached slots {b.cached}, {cached} recounted"
    parts = b.groups
    assert sum(p.used_blocks for p in parts) == b.used_blocks, "group blocks do not sum to the used blocks"
    assert sum(p.token_states + p.reservation + p.internal_frag for p in parts) == b.used_blocks * bs, \
        "group shares do not sum to the used share"
    assert all(p.internal_frag >= 0 for p in parts), "a group's internal fragmentation is negative"
