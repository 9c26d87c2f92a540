"""The paged allocator: vLLM v1's KV cache manager (``anchors.md`` section 5), block for block.

All ``capacity // block_size`` blocks exist from the start; block 0 is a reserved null block, so a pool of N
blocks has N-1 usable (the null block and ``capacity % block_size`` are allocator overhead). Each sequence
has a block table (a list of block ids, append-only); free blocks sit in a `FreeBlockQueue` whose order is
the eviction order.

Automatic prefix caching (``prefix_caching=True``): ``block_hashes`` given to `admit` are chained hashes of
the prompt's full blocks, looked up and cached in the `PrefixCache` (``prefix_cache.py`` draws an admission).
Hashes from ``own_from`` on are the request's own (no other request carries them): their blocks are parked
while the sequence runs, indexed when it is freed to come back (`free`), never once it finished.

Reference counts count the sequences (and, in `PagedCowAllocator`, registered prefixes) holding a block;
block ids, reference counts, the free queue and the prefix cache are the `BlockPool`'s. Only full blocks are
ever shared here (prefix-cache hits); a fork copies every block.

The state and its read-only side (queries, fit checks, accounting) are `PagedQueries`' (``paged_queries.py``);
this module holds the state changes. Hot path: `grow` touches only the sequence's record while the last block
has room; block structures are touched when a block boundary is crossed.
"""

from __future__ import annotations

from collections.abc import Sequence

from allocators.base import NO_COPIES, Admission, Copy, cdiv
from allocators.paged_audit import audit_paged
from allocators.paged_queries import PagedQueries
from allocators.paged_seq import SeqBlocks

_NO_HITS = Admission()
"""The admission result without cache hits, shared (it is frozen): building one costs more than the rest of
a small admission."""


class PagedAllocator(PagedQueries):
    """Fixed-size blocks allocated on demand (vLLM). ``fork`` copies every block (no sharing). The state and
    its read-only queries are `PagedQueries`' (``paged_queries.py``); the state changes are here."""

    name = "paged"
    kind = "paged"
    follows_vllm_block_size = True  # and `paged-cow`'s; not `radix`'s pages, which are SGLang's
    allocates_per_chunk = True
    reports_growth = True
    parks_own_blocks = True
    knows_own_hashes = True  # `radix` and `paged-cow` too, though they park nothing

    # -- state changes ---------------------------------------------------------------------------------
    def _settle_last_block(self, s: SeqBlocks) -> None:
        """Recompute the exclusive last block's room and reservation after the table or tokens changed."""
        self._reserved -= s.res
        held = len(s.table) * self.block_size
        s.room = held - s.tokens
        s.res = max(0, min(s.final, held) - s.tokens)
        self._reserved += s.res

    def _cache_full_blocks(self, s: SeqBlocks) -> None:
        """Cache every block that is full by now under its hash (vLLM caches a block when the step that fills
        it is scheduled); hits (prefix-cache or registered blocks) lie below ``num_hashed`` already."""
        full = s.tokens // self.block_size
        if full > len(s.hashes):
            full = len(s.hashes)
        if s.num_hashed < full:
            self._cache.insert_full(s.table, s.hashes, s.num_hashed, full, s.own_from)
            s.num_hashed = full

    def forget_tail_hash(self, seq_id: int) -> bool:
        """Uncache the block the sequence's last token filled, if it just filled one (vLLM's async scheduling: a
        generated token is known, and its block cached, only once the output that sampled it is processed; a
        request preempted before keeps that block uncached); True if it did. Such a block is the request's own,
        parked, or (a session turn's generated block, which the next turn's prompt holds) indexed under a shared
        hash."""
        return self.forget_hashes_past(seq_id, 1)

    def forget_hashes_past(self, seq_id: int, unknown: int) -> bool:
        """Uncache the hashed blocks of the sequence that its last ``unknown`` tokens reach into (`forget_tail_hash`
        for one; with speculative drafts under async scheduling a verification's accepted drafts are in flight too,
        and a drafter's lookahead block hashes need one token more, `sim.kernel.async_outputs.InFlight.tail_unknown`);
        True if it did."""
        s = self._seqs[seq_id]
        keep = max(0, s.tokens - unknown) // self.block_size
        hashed = min(s.num_hashed, len(s.hashes))
        if hashed <= keep:
            return False
        for index in range(hashed - 1, keep - 1, -1):
            self._cache.forget(s.table[index])
        s.num_hashed = keep
        return True

    def hide_shared_tail(self, seq_id: int, unknown: int = 1) -> bool:
        """`forget_hashes_past` for blocks whose hash other requests may look up (a session turn's generated
        blocks, which the next turn's prompt holds; not the request's own), reached by the last ``unknown`` tokens
        (its last token, and with drafts the accepted ones, in flight): vLLM's async scheduling has not hashed them
        yet, so admissions planned meanwhile miss them. True if hidden; `cache_blocks` caches them again."""
        s = self._seqs[seq_id]
        return max(0, s.tokens - unknown) // self.block_size < s.own_from and self.forget_hashes_past(seq_id, unknown)

    def cache_blocks(self, seq_id: int) -> None:
        """Cache the full blocks of a sequence admitted with ``delay_cache_blocks`` (vLLM's ``cache_blocks``)."""
        if self.prefix_caching:
            self._cache_full_blocks(self._seqs[seq_id])

    def admit(
        self,
        seq_id: int,
        num_tokens: int,
        *,
        final_tokens: int,
        max_total_tokens: int | None = None,
        block_hashes: Sequence[int] = (),
        full_tokens: int | None = None,
        apply_watermark: bool = True,
        own_from: int | None = None,
        lookup_tokens: int | None = None,
        delay_cache_blocks: bool = False,
        reserved_blocks: int = 0,
        lookahead_slots: int = 0,
    ) -> Admission | None:
        """Allocate ``num_tokens`` slots (prefix hits included). With ``full_tokens`` (vLLM's
        ``scheduler_reserve_full_isl``) admit only if blocks for that many tokens would be free, though only
        ``num_tokens`` are allocated now (chunked prefill allocates the rest chunk by chunk). The watermark
        applies only when ``apply_watermark`` (vLLM: only while other requests are running). ``own_from``:
        the first of ``block_hashes`` that only this request carries (None: none); parked from there on
        where ``parks_own_blocks``, and told apart from shared ones as the sequence grows (`shared_fill`).
        ``lookup_tokens``: the tokens the lookups may cover (never the last of them), by default ``num_tokens``
        (``full_tokens`` if more, on the GPU); a request given blocks for its hits only while the host tier
        loads them (``--offload-loads async``) is looked up over its whole prompt, as vLLM looks it up.
        ``delay_cache_blocks`` (vLLM's name): cache the blocks it fills only when told (`cache_blocks`), as
        vLLM caches blocks being loaded only once their load is done. ``reserved_blocks``: free blocks what is
        allocated now must leave to others (vLLM's, for prefills in flight; not counted against ``full_tokens``).
        ``lookahead_slots``: slots held after the ``num_tokens`` (padded speculative drafts, a drafter's
        lookahead), never cached; up to ``max_model_len`` (vLLM's ``num_tokens_need_slot``)."""
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id} is already allocated")
        if num_tokens <= 0:
            raise ValueError(f"sequence {seq_id}: num_tokens must be positive, got {num_tokens}")
        lookahead_slots = max(0, min(lookahead_slots, self.max_model_len - num_tokens))
        hits = self._lookup(block_hashes, lookup_tokens or max(num_tokens, full_tokens or 0))
        free = self._free.num_free - (self.watermark_blocks if apply_watermark else 0)
        if full_tokens is not None and self._admission_blocks(hits, full_tokens) > free:
            return None
        if self._admission_blocks(hits, num_tokens + lookahead_slots) > free - reserved_blocks:
            return None
        bs, pool = self.block_size, self._pool
        for b in hits:  # touch the hits first so that popping new blocks cannot evict them
            if self._shares_with_sequence(b):
                self._shared_saved += bs
            if pool.take(b):
                self._num_token_slots += bs
        tier = self.host_tier
        loaded = self._host_hits(block_hashes, len(hits), lookup_tokens or num_tokens) if tier is not None else 0
        if loaded:  # host hits fill the first new blocks, cached under their hashes below like computed ones
            tier.load(seq_id, block_hashes, len(hits), loaded)
        table = hits + pool.pop_many(cdiv(num_tokens + lookahead_slots, bs) - len(hits))
        hashes = tuple(block_hashes) if self.prefix_caching else ()
        parked_from = own_from if hashes and self.parks_own_blocks else None
        s = SeqBlocks(table, num_tokens, final_tokens, hashes, parked_from)
        if own_from is not None and hashes:
            s.shared_to = own_from
        s.num_hashed = len(hits)
        self._seqs[seq_id] = s
        self._num_token_slots += num_tokens - len(hits) * bs
        self._settle_last_block(s)
        if hashes:
            if not delay_cache_blocks:
                self._cache_full_blocks(s)
            if tier is not None and tier.write_through:  # the blocks computed so far (`RequestTier`)
                tier.computed(seq_id, hashes, num_tokens // bs)
        if loaded:
            return Admission(cached_tokens=(len(hits) + loaded) * bs, host_tokens=loaded * bs, host_blocks=loaded)
        return Admission(cached_tokens=len(hits) * bs) if hits else _NO_HITS

    def grow(self, seq_id: int, num_tokens: int = 1) -> tuple[Copy, ...] | None:
        s = self._seqs[seq_id]
        # fast path: stays inside the last block, no block structure touched (room past the last block is held for
        # speculative drafts, `grow_with_drafts`: tokens crossing into it fill a block, which is cached)
        if 0 < num_tokens < s.room <= self.block_size:
            s.room -= num_tokens
            s.tokens += num_tokens
            self._num_token_slots += num_tokens
            res = s.res
            if res:
                used = res if res < num_tokens else num_tokens
                s.res = res - used
                self._reserved -= used
            return ()  # NO_COPIES (the same object: a literal, which skips a global lookup)
        return self._grow_slow(seq_id, s, num_tokens)

    def _grow_slow(self, seq_id: int, s: SeqBlocks, num_tokens: int) -> tuple[Copy, ...] | None:
        """Growth that fills the last block or crosses into new blocks (all or nothing): `grow_due`'s state
        change without its report (copy-on-write runs it after copying a shared tail)."""
        if num_tokens == 0:
            return NO_COPIES
        return None if PagedAllocator.grow_due(self, seq_id, num_tokens) is None else NO_COPIES

    def grow_due(self, seq_id: int, num_tokens: int) -> tuple[int, int, int] | None:
        """`grow` for a sequence that has used up its headroom, reporting what changed instead of copies.

        Returns ``(headroom, new_blocks, reserved_delta)``: the sequence's headroom afterwards, the blocks it
        took from the free queue and the change of the pool's reservation; None (nothing changed) if the pool
        lacks the blocks. The simulator's decode fast-forward calls this once per block a decoding sequence
        fills and integrates memory from the deltas, so it never needs a `breakdown` in between. It is
        `grow`'s own slow path (`_grow_slow`), so the state changes are the same by construction; it never
        copies, so an allocator whose growth can copy a shared tail says ``reports_growth = False``.
        """
        s = self._seqs[seq_id]
        if num_tokens <= 0:
            raise ValueError(f"sequence {seq_id}: cannot grow by {num_tokens} tokens")
        bs, table = self.block_size, s.table
        tokens = s.tokens + num_tokens
        num_new = -(-tokens // bs) - len(table)
        if num_new > 0:
            free = self._free
            if num_new > free.num_free:
                return None
            if num_new == 1:  # the usual case: one block a boundary
                block = free.popleft()
                self._ref[block] = 1
                table.append(block)
                cache = self._cache
                if cache.block_hash[block] is not None:
                    cache.evict_many((block,))
                    self._pool.num_cached -= 1
            else:
                table += self._pool.pop_many(num_new)
        held = len(table) * bs
        final = s.final
        res = (final if final < held else held) - tokens
        if res < 0:
            res = 0
        delta = res - s.res
        s.tokens, s.room, s.res = tokens, held - tokens, res
        self._reserved += delta
        self._num_token_slots += num_tokens
        tier = self.host_tier
        if tier is not None and tier.write_through:  # the blocks this growth fills, as they are computed
            if (tokens - num_tokens) // bs < tokens // bs and s.hashes:
                tier.computed(seq_id, s.hashes, tokens // bs)
        done, hashes = s.num_hashed, s.hashes
        if done < len(hashes):  # `_cache_full_blocks`, with the usual case inlined: one own block filled
            full = tokens // bs
            if full == done + 1 and done >= s.own_from:
                hashed = self._cache.block_hash
                block = table[done]
                if hashed[block] is None:
                    hashed[block] = hashes[done]
                    self._cache.parked += 1
                s.num_hashed = full
            elif full > done:
                self._cache_full_blocks(s)
        headroom = self._headroom(seq_id, s) if hashes else held - tokens  # one short of a fill that is work
        return headroom, num_new, delta

    def grow_with_drafts(self, seq_id: int, num_tokens: int, drafts: int, *,
                         chunk: bool = False) -> tuple[Copy, ...] | None:
        """Grow by ``num_tokens`` and hold slots for ``drafts`` more tokens after them, all or nothing (vLLM's
        ``allocate_slots`` for a verification step of speculative decoding: slots for the fed token and the
        drafts, but only tokens up to ``request.num_tokens``, no draft, are cached). The draft slots are held,
        not token slots: a rejected draft's slot is filled by a later token, never freed before the request.
        Up to ``max_model_len`` (``allocate_slots`` caps a drafter's lookahead slots there). ``chunk``: a prefill
        chunk's (one table, nothing freed by the tokens computed: grown as a verification's tokens are)."""
        s, bs = self._seqs[seq_id], self.block_size
        drafts = max(0, min(drafts, self.max_model_len - s.tokens - num_tokens))
        if -(-(s.tokens + num_tokens + drafts) // bs) - len(s.table) > self._free.num_free:
            return None
        if num_tokens:
            PagedAllocator.grow_due(self, seq_id, num_tokens)  # never the fast path: it may cross draft blocks
        more = -(-(s.tokens + drafts) // bs) - len(s.table)
        if more > 0:
            s.table += self._pool.pop_many(more)
            self._settle_last_block(s)
        return NO_COPIES

    def fork(self, parent_id: int, child_id: int, *, final_tokens: int) -> tuple[Copy, ...] | None:
        """Without copy-on-write the child gets private blocks and every parent block is copied."""
        if child_id in self._seqs:
            raise ValueError(f"sequence {child_id} is already allocated")
        parent = self._seqs[parent_id]
        if len(parent.table) > self._free.num_free:
            return None
        table = self._pool.pop_many(len(parent.table))
        child = SeqBlocks(table, parent.tokens, final_tokens)
        self._seqs[child_id] = child
        self._num_token_slots += parent.tokens
        self._settle_last_block(child)
        bs = self.block_size
        return tuple(Copy(src, dst, bs) for src, dst in zip(parent.table, table, strict=True))

    def free(self, seq_id: int, *, finished: bool = False) -> int:
        """Release a sequence's blocks. Unless it ``finished`` (its request will never be admitted again), its
        parked own blocks are indexed first, so that it can hit them when it comes back."""
        s = self._seqs.pop(seq_id)
        bs, ref, table = self.block_size, self._ref, s.table
        if not finished and s.own_from < s.num_hashed and s.own_from < len(s.hashes):
            self._cache.index_parked(table, s.hashes, s.own_from, min(s.num_hashed, len(s.hashes)))
        self._reserved -= s.res
        released = self._pool.drop(table, self.prefix_caching)  # tail first: the chain's end is evicted first
        kept = len(table) - released
        if kept:
            kept -= self._pinned_only(table)
        if released:
            slots = released * bs
            if not ref[table[-1]]:  # the tail was exclusive: only its written slots held tokens
                slots -= len(table) * bs - s.tokens
            self._num_token_slots -= slots
        self._shared_saved -= kept * bs
        return len(table) * bs

    def _shares_with_sequence(self, block: int) -> bool:
        """Whether a block found by lookup is held by a sequence already (sharing it saves its slots)."""
        return self._ref[block] > 0

    def _pinned_only(self, table: list[int]) -> int:
        """Blocks of ``table`` that, once it is freed, are held by nothing but pins (none without pinning)."""
        return 0

    def check_invariants(self) -> None:
        audit_paged(self)
