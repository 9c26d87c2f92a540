"""The hybrid paged allocator: vLLM v1's KV cache manager for models that mix sliding-window and full layers.

One `BlockPool` serves every KV cache group (``kv_cache_groups.py``: vLLM cuts the layers into groups of
equal layer count, so every block has the same page size); each sequence has one block table per group,
all of the same length. A sliding-window group frees the blocks that fell entirely out of the window and
puts the null block (id 0) in their place, so its table is a run of nulls followed by at most about
``window / block_size + 1`` live blocks::

    full    | b3 | b7 | b9 | b12 | b15 |        every token's KV is kept
    window  |  0 |  0 |  0 | b13 | b16 |        window 2 blocks: the leading blocks went back to the pool

Memory is counted in *group slots* (one token in one group's layers), so ``capacity`` is the pool's bytes
over the bytes of a token in one group, and a token appended to a sequence fills one slot in every group
(``slots_per_token``). When a window frees blocks (vLLM's ``remove_skipped_blocks``): `grow` (decode, whose
last token is computed now) frees what the *last* new token no longer needs, `grow_chunk` and `admit` (a
prefill step) what the *first* one no longer needs, as vLLM does with the tokens computed before the step.
`headroom` stops at the next token whose step frees a block, so the decode fast-forward calls `grow` at the
very step at which `--step-by-step` would, and the two stay identical (``reports_growth`` is False: the
fast-forward re-reads the breakdown after every call). With ngram speculative drafts a verification
(`grow_with_drafts`) frees what the tokens before it leave first and then holds blocks for its drafts in every
group; accepted drafts told as a sequence is freed (`cache_held`) are cached and free no window block.

Prefix caching (vLLM's ``HybridKVCacheCoordinator``): a block is cached under its hash and its group, a
full-attention group hits on a prefix whose every block is cached, a window group on a prefix whose last
``cdiv(window - 1, block_size)`` blocks are (the blocks before it become nulls), and the hit is the longest
prefix every group accepts; a window group caches only the blocks that can end such a hit (vLLM 0.33's
``--prefix-cache-retention-interval``, ``window_retention.py``). With a host tier a needed block may be cached
on the host instead (`HOST` in a lookup): it is loaded into a new block at admission, and the tokens the tier
adds to the GPU's own hit are the admission's ``host_tokens``. The read-only side and the audit are in
``hybrid_queries.py``.

A hybrid Mamba model (Nemotron-H) adds ``mamba_groups`` after its attention groups (``kv_cache_groups.
mamba_cache_groups``): with prefix caching off (vLLM's ``mamba_cache_mode='none'``) a sequence's table there is
one state block, taken when it is admitted, never grown (a block covers ``max_model_len`` tokens), copied by a
fork and released with the sequence (with speculative decoding, one more per draft token: ``mamba_state_blocks``);
it counts as ``block_size`` token states of the ``mamba`` group and holds no reservation, and a token appended fills a slot in the attention groups only (``slots_per_token``). With prefix
caching on (``'align'``) the table is position-indexed like an attention table, but holds at most three live
state blocks among nulls (with speculative decoding ``mamba_state_blocks - 1`` more after the running one, the
table as many columns longer: `mamba_align.place_blocks`): each allocation first frees the states no longer read
(`_free_states`), a prefix hit needs only the state at its end, and only the states a later request can resume
at are cached; a state another request cached in the step being scheduled is not hit before the next step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from allocators.base import NO_COPIES, Admission, Copy, cdiv
from allocators.hybrid_queries import HOST, HybridQueries, HybridSeq
from allocators.kv_cache_groups import next_skip, skipped_blocks
from allocators.mamba_align import blocks_to_allocate, freed_columns, needs_checkpoint, place_blocks
from allocators.window_retention import retained_blocks

_NO_HITS = Admission()


class HybridPagedAllocator(HybridQueries):
    """vLLM v1's paged KV cache over several KV cache groups that share one pool (``kv_groups``: the model's
    attention groups, catalog `KVGroup` objects). The state and the read-only side are `HybridQueries`'."""

    name = "paged"
    kind = "paged"
    allocates_per_chunk = True
    reports_growth = False

    # -- state changes ---------------------------------------------------------------------------------
    def admit(self, seq_id: int, num_tokens: int, *, final_tokens: int, max_total_tokens: int | None = None,
              block_hashes: Sequence[int] = (), full_tokens: int | None = None,
              apply_watermark: bool = True, prompt_tokens: int | None = None,
              request_tokens: int | None = None, lookahead_slots: int = 0) -> Admission | None:
        """As `PagedAllocator.admit`: blocks for ``num_tokens`` in every group (prefix hits included), the
        window groups keeping what the first uncached token needs; ``full_tokens``: admit only if that many
        tokens would fit; the watermark only when ``apply_watermark``. ``prompt_tokens``: the request's prompt
        (a resumed one's tokens include its output; default ``num_tokens``), whose replay boundary a window
        group caches under sparse retention (`window_retention`); ``request_tokens``: all its tokens (default
        ``num_tokens``), up to which vLLM looks the full groups' hit up for its shared-prefix junction.
        ``lookahead_slots``: slots held after the ``num_tokens``, never cached, up to ``max_model_len``, counted in
        the admission test but not in ``full_tokens``' (`PagedAllocator.admit`'s): a padded admission's placeholder
        drafts (vLLM's ``pad_spec_decode``: a request with one token left to compute scheduled with ``1 +
        num_speculative_tokens``), or an MTP drafter's lookahead (``allocate_slots``' ``num_lookahead_tokens``:
        ``num_tokens_need_slot``, ``v1/core/kv_cache_manager.py:551-553``). In align mode placeholders take state
        columns in the same allocation, as `grow_with_drafts` gives a verification's drafts, the drafter's
        lookahead none (`_main_model_drafts`); in mode 'none' a Mamba group's ``mamba_state_blocks`` cover them
        (its block is ``max_model_len`` tokens)."""
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id} is already allocated")
        if num_tokens <= 0:
            raise ValueError(f"sequence {seq_id}: num_tokens must be positive, got {num_tokens}")
        lookahead = max(0, min(lookahead_slots, self.max_model_len - num_tokens))
        mamba_tokens = num_tokens + min(lookahead, self._main_model_drafts(lookahead_slots))
        looked_up = max(num_tokens, full_tokens or 0)
        hits = self._lookup(block_hashes, looked_up)
        if hits and self.align and self._cache.block_hash[hits[-1][-1]] in self._fresh:
            return None  # vLLM's MambaManager defers a hit on a state another request cached in this step
        prefill_end = self._checkpoint_end(max(num_tokens if prompt_tokens is None else prompt_tokens,
                                               (request_tokens or num_tokens) - 1))
        free = self._free.num_free - (self.watermark_blocks if apply_watermark else 0)
        if full_tokens is not None and self._admission_blocks(hits, full_tokens, capped=True, prefill_end=prefill_end) > free:
            return None
        if self._admission_blocks(hits, num_tokens + lookahead, prefill_end=prefill_end,
                                  mamba_tokens=mamba_tokens) > free:
            return None
        # with host hits, the hit the GPU alone gives: the tokens the tier adds are the rest
        gpu = (self._hit_blocks(block_hashes, looked_up, self._cache.getter)
               if self.host_tier is not None and any(HOST in h for h in hits) else None)
        bs, pool, ref = self.block_size, self._pool, self._ref
        num_hit = len(hits[0]) if hits else 0
        reach = (self._reachable(block_hashes, max(looked_up, request_tokens or 0), num_hit if gpu is None else gpu,
                                 num_tokens if prompt_tokens is None else prompt_tokens)
                 if self.prefix_caching and self.retention_interval is not None else ())  # looked up before any pop
        length = cdiv(num_tokens + lookahead, bs)
        hits = hits or [[] for _ in self.groups]
        n, loads = len(self.groups), []
        for g, group_hits in enumerate(hits):  # every group's hits first, so that popping cannot evict them
            for i, b in enumerate(group_hits):
                if b <= 0:  # a null, or a host hit
                    if b == HOST:
                        loads.append(block_hashes[i] * n + g)
                    continue
                if ref[b] > 0:
                    self._shared_saved += bs
                if pool.take(b):
                    self._tok[g] += bs
                    self._used[g] += 1
                    self._group_of[b] = g
        if loads:  # touched on the host before new blocks are popped, so that their spills cannot drop them
            self.host_tier.take(loads)
        tables = []
        start = num_hit * bs
        spec = self.mamba_state_blocks - 1
        checkpoint = self.checkpoints and needs_checkpoint(hits[-1], start, mamba_tokens, prefill_end, bs, spec)
        last = -1
        for g, group_hits in enumerate(hits):
            if self.mamba[g] and self.align:  # the hit's state, then the checkpoint's and the running block
                table = list(group_hits)
                before = self._used[g]
                last = place_blocks(table, mamba_tokens, checkpoint, False, bs,
                                    lambda k, g=g: self._pop(g, k), spec)
                self._tok[g] += (self._used[g] - before) * bs
                tables.append(table)
                continue
            if self.mamba[g]:  # its state blocks for the sequence's life (no hits: prefix caching is off)
                tables.append(self._pop(g, self.mamba_state_blocks))
                self._tok[g] += bs * self.mamba_state_blocks
                continue
            table = list(group_hits)
            if loads:
                self._load(g, table, block_hashes)
            tables.append(table + self._pop(g, length - num_hit))
            self._tok[g] += num_tokens - num_hit * bs
        s = HybridSeq(tables, num_tokens, final_tokens, tuple(block_hashes) if self.prefix_caching else ())
        s.skipped = [sum(1 for b in t[:num_hit] if b == 0) for t in tables]
        s.num_hashed = num_hit
        s.before = s.at_start = num_hit * bs  # computed before the step that admits it
        s.sched_at, s.sched_tokens = self.clock, num_tokens - num_hit * bs
        s.reach = reach
        if self.align:
            s.last_state = -1 if last is None else last
            s.placed, s.prefill_end = True, prefill_end
            s.junction = reach[1] if len(reach) > 1 else 0
        self._seqs[seq_id] = s
        self._skip(s, num_hit * bs)
        self._settle(s)
        self._cache_full_blocks(s)
        if loads:
            return Admission(cached_tokens=num_hit * bs, host_tokens=(num_hit - gpu) * bs, host_blocks=len(loads))
        return Admission(cached_tokens=num_hit * bs) if num_hit else _NO_HITS

    def _reachable(self, block_hashes: Sequence[int], looked_up: int, gpu_hit: int, prompt: int) -> tuple[int, ...]:
        """The positions whose window tails a sequence caches under sparse retention: its prompt's replay
        boundary, and the shared-prefix junction when the full groups alone hit more than the ``gpu_hit``
        blocks every group does (vLLM's ``shared_prefix_boundary``, from its local lookup)."""
        full = self._full_hit(block_hashes, looked_up)
        return (prompt - 1, full * self.block_size) if full > gpu_hit else (prompt - 1,)

    def _load(self, g: int, table: list[int], block_hashes: Sequence[int]) -> None:
        """Put a new block of group ``g`` in place of each `HOST` entry of ``table`` (a hit's blocks), holding
        the KV loaded back from the host tier, and cache it under its key as a computed block would be."""
        at = [i for i, b in enumerate(table) if b == HOST]
        if not at:
            return
        cache, n = self._cache, len(self.groups)
        for i, b in zip(at, self._pop(g, len(at)), strict=True):
            table[i] = b
            cache.insert(b, block_hashes[i] * n + g)
        self._tok[g] += len(at) * self.block_size

    def begin_step(self, landed: Mapping[int, int] | None = None, step: int | None = None) -> None:
        """A step is being planned (with ``processed_basis``, vLLM's async scheduling): remember every sequence's
        tokens as the previous step and this one began. vLLM frees window blocks and Mamba states by the tokens
        whose output is processed (``allocate_slots``: ``num_computed_tokens - num_in_flight_tokens``,
        ``v1/core/kv_cache_manager.py:561-567``), and under async scheduling the step before's output is still in
        flight while a step is scheduled: the tokens as that step began, plus ``landed``, sequence -> the drafts
        accepted by the verification of the step before that one (its output was processed after the step before
        was scheduled, ``update_from_output``: they count as computed then; this allocator is told them with the
        sequence's next token, `sim.kernel.spec_decode.SpecDecode.landed`). With `step_basis` the planned
        ``step`` is told instead (`_processed`)."""
        if step is not None:
            self.clock = step
        if self.step_basis:
            return
        landed = landed or {}
        for seq_id, s in self._seqs.items():
            s.before, s.at_start = s.at_start + landed.get(seq_id, 0), s.tokens

    def new_step(self) -> None:
        """A step is being scheduled (vLLM's ``new_step_starts``): states cached before it may be hit now."""
        self._fresh.clear()

    def forget_tail_hash(self, seq_id: int) -> bool:
        """As `PagedAllocator.forget_tail_hash`, in every group that holds that block."""
        return self.forget_hashes_past(seq_id, 1)

    def forget_hashes_past(self, seq_id: int, unknown: int) -> bool:
        """As `PagedAllocator.forget_hashes_past` (a victim's accepted drafts in flight, and a drafter's lookahead
        hash's token), in every group that holds those blocks: an attention block, or the Mamba state cached at its
        end."""
        s = self._seqs[seq_id]
        keep = max(0, s.tokens - unknown) // self.block_size
        hashed = min(s.num_hashed, len(s.hashes), len(s.tables[0]))
        if hashed <= keep:
            return False
        cache = self._cache
        for index in range(hashed - 1, keep - 1, -1):
            for table in s.tables:
                if index < len(table) and table[index] and cache.block_hash[table[index]] is not None:
                    cache.forget(table[index])
        s.num_hashed = keep
        return True

    def hide_shared_tail(self, seq_id: int, unknown: int = 1) -> bool:
        """As `PagedAllocator.hide_shared_tail`; a hybrid pool indexes every hash it caches, so any such tail."""
        return self.forget_hashes_past(seq_id, unknown)

    def cache_blocks(self, seq_id: int) -> None:
        """Cache the sequence's full blocks again (`hide_shared_tail`'s)."""
        self._cache_full_blocks(self._seqs[seq_id])

    def grow(self, seq_id: int, num_tokens: int = 1) -> tuple[Copy, ...] | None:
        """Append decode tokens (the last computed now): the window groups free what the last one no longer
        needs."""
        s = self._seqs[seq_id]
        computed = s.tokens + num_tokens - 1
        if self.step_basis:
            return self._told(s, self._extend(s, num_tokens, self._processed(s, computed, num_tokens)), 1)
        return self._extend(s, num_tokens, computed)

    def idle(self, seq_id: int) -> None:
        """With `step_basis`: the sequence computes nothing in the step being planned (a deferred decoder)."""
        self._seqs[seq_id].idle_at = self.clock

    def _processed(self, s: HybridSeq, computed: int, steps: int) -> int:
        """With `step_basis`, the tokens whose output is processed as the current step (``clock``) is scheduled, of
        a sequence that had ``computed`` before it and grows by the tokens of ``steps`` steps ending at it (a lazily
        grown decoder's): those computed before the step before it began (vLLM's ``num_computed_tokens -
        num_in_flight``), so less what that step scheduled of it: one token if the growth spans it, else what the
        sequence's last growth (or its admission) scheduled if that was at it, and nothing if it was deferred then.
        Where every step is planned this is `begin_step`'s snapshot; a lazily grown decoder has none."""
        before = self.clock - 1
        if s.idle_at == before:
            return computed
        if steps > 1:
            return computed - 1
        return computed - s.sched_tokens if s.sched_at == before else computed

    def _told(self, s: HybridSeq, grown, tokens: int):
        """After a growth at ``clock`` that scheduled ``tokens`` of the sequence (a decoder's 1, a chunk's all):
        remembered for `_processed` unless refused; returns ``grown``."""
        if grown is not None:
            s.sched_at, s.sched_tokens = self.clock, tokens
        return grown

    def cache_held(self, seq_id: int, num_tokens: int) -> tuple[Copy, ...] | None:
        """Append tokens computed in slots the sequence holds, told as it is freed (a verification's accepted
        drafts): their full blocks are cached, as vLLM's ``update_from_output`` caches them (``cache_blocks``),
        and its windows free nothing, as vLLM frees window blocks only in an ``allocate_slots``, which a freed
        sequence no longer has."""
        s = self._seqs[seq_id]
        return self._extend(s, num_tokens, s.computed)

    def grow_chunk(self, seq_id: int, num_tokens: int) -> tuple[Copy, ...] | None:
        """Append a prefill chunk computed in one step: the window groups free only what its first token no
        longer needs (vLLM frees by the tokens computed before the step)."""
        s = self._seqs[seq_id]
        if self.step_basis:
            return self._told(s, self._extend(s, num_tokens, self._processed(s, s.tokens, 1)), num_tokens)
        return self._extend(s, num_tokens, s.tokens)

    def _extend(self, s: HybridSeq, num_tokens: int, computed: int, drafts: int = 0,
                mamba_drafts: int | None = None) -> tuple[Copy, ...] | None:
        """Free what ``computed`` tokens leave out of each window, then give the new tokens their blocks. A
        refused call still frees those (vLLM's ``allocate_slots`` removes the skipped blocks before it checks
        for room): they join the free queue ahead of whatever the preemption that follows frees, which
        decides what later allocations evict. ``drafts``: slots held after them (align mode and window groups,
        `grow_with_drafts`), all or nothing, but not counted as tokens; ``mamba_drafts`` of them (default all: without a drafter's
        lookahead, `_main_model_drafts`) take state columns too."""
        if num_tokens == 0 and not drafts:
            return NO_COPIES
        if num_tokens < 0:
            raise ValueError(f"cannot grow by {num_tokens} tokens")
        if self.processed_basis and not self.step_basis and s.before < computed:
            computed = s.before
        bs = self.block_size
        old_len, new_len = len(s.tables[0]), cdiv(s.tokens + num_tokens + drafts, bs)
        targets = self._targets(s, computed)
        need = released = 0
        ref = self._ref
        checkpoint = False
        mamba_end = s.tokens + num_tokens + (drafts if mamba_drafts is None else mamba_drafts)
        if self.align:  # the states no longer needed go back first, even if the step is refused
            checkpoint = self._free_states(s, computed, mamba_end)
            need += self.mamba.count(True) * max(0, blocks_to_allocate(len(s.tables[-1]), mamba_end, checkpoint, bs,
                                                                          self.mamba_state_blocks - 1))
        if new_len > old_len:  # (a Mamba group's one state block covers any length; align mode: above)
            for g in self.attention_groups:  # a window may skip a block before it is written: it needs none
                need += max(0, new_len - max(old_len, targets[g]))
        free = self._free.num_free
        if need > free:  # what the windows release counts too (only then: a long chunk's window is many blocks)
            for g, target in enumerate(targets):
                if not self.mamba[g]:
                    table = s.tables[g]
                    released += sum(1 for i in range(s.skipped[g], min(target, old_len)) if ref[table[i]] == 1)
        if need > free + released:
            self._skip(s, min(computed, old_len * bs))  # vLLM never computed more tokens than it has slots for
            self._settle(s)
            return None
        self._skip(s, computed, targets)
        t = s.tokens
        end = t + num_tokens
        tok = self._tok
        groups = self.attention_groups
        # as a rule every group takes the same blocks (none skipped unwritten): popped at once, in group order
        whole = new_len > old_len and all(targets[g] <= old_len for g in groups)
        fresh = self._pop_groups(groups, new_len - old_len) if whole else None
        for i, g in enumerate(groups):  # in group order, the Mamba groups (after them) last
            table = s.tables[g]
            if fresh is not None:
                table += fresh[i]
            else:
                start = max(old_len, targets[g])
                if start > old_len:  # blocks the window skips before they are ever written
                    table += [0] * (start - old_len)
                    s.skipped[g] = start
                if new_len > start:
                    table += self._pop(g, new_len - start)
            first = max(t, s.skipped[g] * bs)
            if end > first:
                tok[g] += end - first
        if self.align:
            for g in self.state_groups:
                before = self._used[g]
                last = place_blocks(s.tables[g], mamba_end, checkpoint, s.placed, bs, lambda k, g=g: self._pop(g, k),
                                    self.mamba_state_blocks - 1)
                tok[g] += (self._used[g] - before) * bs
                if last is not None:
                    s.last_state = last
        s.tokens = end
        self._settle(s)
        if s.num_hashed < min(len(s.hashes), end // bs):
            self._cache_full_blocks(s)
        return NO_COPIES

    def grow_with_drafts(self, seq_id: int, num_tokens: int, drafts: int, *,
                         chunk: bool = False) -> tuple[Copy, ...] | None:
        """`grow` (``chunk``: `grow_chunk`, a prefill chunk with a drafter's lookahead slots after it) by
        ``num_tokens``, then hold slots for ``drafts`` speculative tokens after them in every attention
        group, all or nothing, up to ``max_model_len`` (`PagedAllocator.grow_with_drafts`: vLLM's ``allocate_slots``
        for a verification step; a rejected draft's slots stay held, filled by later tokens). A Mamba group's state
        blocks cover the drafts already (``1 + num_speculative_blocks`` from admission: ``mamba_state_blocks``).
        With prefix caching on (align mode) the drafts take state columns too, in the one allocation vLLM makes
        for them (`mamba_align.place_blocks` with ``num_tokens_main_model`` counting them), a drafter's lookahead
        slots after them none (`_main_model_drafts`). A chunk frees the states the tokens computed before it no
        longer need, a verification those its fed token leaves (``allocate_slots`` calls ``remove_skipped_blocks``
        with the tokens computed before the step, ``v1/core/kv_cache_manager.py:564-568``). With window groups
        (ngram drafts on a sliding-window model) the windows free what those tokens leave first, then every group
        takes the blocks for the tokens and drafts, all or nothing (`_extend`)."""
        s, bs = self._seqs[seq_id], self.block_size
        main = self._main_model_drafts(drafts)
        drafts = max(0, min(drafts, self.max_model_len - s.tokens - num_tokens))
        main = min(main, drafts)
        computed = s.tokens if chunk else s.tokens + num_tokens - 1
        local = any(w is not None for w in self.windows)
        if (self.align or local) and not chunk and num_tokens > 1 and s.num_hashed < len(s.hashes):
            # the last verification's accepted drafts, in slots it held: vLLM cached the blocks they filled right
            # after that step (``update_from_output``'s ``cache_blocks``), before this allocation frees a state no
            # step reads (the running block of a column they crossed) or a block a chunk boundary they crossed skips
            held = min(len(t) for g, t in enumerate(s.tables) if not self.mamba[g]) * bs
            self._cache_full_blocks(s, min(s.tokens + num_tokens - 1, held))
        if self.align:
            return self._extend(s, num_tokens, computed, drafts, main)
        if local:  # the windows free what ``computed`` leaves out first
            self.draft_slots = max(self.draft_slots, drafts)
            return self._extend(s, num_tokens, computed, drafts)
        if (cdiv(s.tokens + num_tokens + drafts, bs) - len(s.tables[0])) * self.slots_per_token > self._free.num_free:
            return None
        if num_tokens and self._extend(s, num_tokens, computed) is None:
            return None
        more = cdiv(s.tokens + drafts, bs) - len(s.tables[0])
        if more > 0:
            for g, table in enumerate(s.tables):
                if not self.mamba[g]:
                    table += self._pop(g, more)
            self._settle(s)
        return NO_COPIES

    def _free_states(self, s: HybridSeq, computed: int, end: int) -> bool:
        """vLLM's ``MambaManager.remove_skipped_blocks`` in align mode, ``computed`` tokens processed: release
        the state blocks no later step reads (`mamba_align.freed_columns`); returns whether the allocation for
        ``end`` tokens that follows takes a checkpoint block (`mamba_align.needs_checkpoint`)."""
        bs = self.block_size
        for g, table in enumerate(s.tables):
            if not self.mamba[g]:
                continue
            columns, retired = freed_columns(table, s.skipped[g], s.last_state, computed, bs)
            s.skipped[g] = retired
            if columns:
                blocks = [table[i] for i in columns]
                for i in columns:
                    table[i] = 0
                released = []
                for b in blocks:
                    self._ref[b] -= 1
                    if self._ref[b]:
                        self._shared_saved -= bs
                    else:
                        released.append(b)
                        self._tok[g] -= bs
                self._release(g, released)
                self.window_released += len(released)  # waiting requests may fit now: a decode run ends here
        return self.checkpoints and needs_checkpoint(s.tables[-1], s.tokens, end, s.prefill_end, bs,
                                                     self.mamba_state_blocks - 1, s.placed)

    def _targets(self, s: HybridSeq, computed: int) -> list[int]:
        """Leading blocks each group may drop once ``computed`` tokens are computed (full groups: none)."""
        targets = list(s.skipped)
        for w, chunked, groups in self.local_kinds:
            skipped = skipped_blocks(computed, w, self.block_size, chunked)
            for g in groups:
                if skipped > targets[g]:
                    targets[g] = skipped
        return targets

    def _skip(self, s: HybridSeq, computed: int, targets: list[int] | None = None) -> None:
        """vLLM's ``remove_skipped_blocks``: replace each window group's blocks that ``computed`` tokens left
        out of the window by the null block, and release them (a block a prefix hit shares stays held)."""
        targets = targets or self._targets(s, computed)
        s.computed = max(s.computed, computed)
        used = self._used
        for g in self.local_groups:  # only a local group's target passes what it skipped
            table = s.tables[g]
            stop = min(targets[g], len(table))
            start = s.skipped[g]
            if stop <= start:
                continue
            before = used[g]
            self._drop(s, g, start, stop)
            self.window_released += before - used[g]
            table[start:stop] = [0] * (stop - start)
            s.skipped[g] = stop

    def _cache_full_blocks(self, s: HybridSeq, tokens: int | None = None) -> None:
        """Cache every live block full by now under its hash and group (vLLM caches a block when the step that
        fills it is scheduled), a window group's only where its retention keeps it (`window_retention`); blocks
        below ``num_hashed`` are settled already. ``tokens``: the tokens computed, if more than the sequence was
        told of (a verification's accepted drafts, `grow_with_drafts`)."""
        full = min((s.tokens if tokens is None else tokens) // self.block_size, len(s.hashes))
        if s.num_hashed >= full:
            return
        cache, n, start = self._cache, len(self.groups), s.num_hashed
        kept: dict[int, Sequence[int]] = {}  # the blocks each tail length keeps: groups of one window keep alike
        for g, table in enumerate(s.tables):
            need = self._needs[g]
            fresh = self._fresh if self.align and self.mamba[g] else None
            if need is None and fresh is None and 0 not in (run := table[start:full]):  # a full group: in bulk
                cache.insert_run(run, [h * n + g for h in s.hashes[start:full]])
                continue
            if need is None:
                indices = range(start, full)
            elif (indices := kept.get(need)) is None:
                mask = retained_blocks(start, full, need=need, interval=self.retention_interval, boundaries=s.reach,
                                       block_size=self.block_size)
                indices = range(start, full) if mask is None else [start + k for k, m in enumerate(mask) if m]
                kept[need] = indices
            for i in indices:
                b = table[i]
                if b and cache.block_hash[b] is None:
                    cache.insert(b, s.hashes[i] * n + g)
                    if fresh is not None:
                        fresh.add(s.hashes[i] * n + g)
        self.hit_changes += full - s.num_hashed
        s.num_hashed = full

    def fork(self, parent_id: int, child_id: int, *, final_tokens: int) -> tuple[Copy, ...] | None:
        """The child gets private copies of every live block of every group (nulls stay nulls)."""
        if child_id in self._seqs:
            raise ValueError(f"sequence {child_id} is already allocated")
        p = self._seqs[parent_id]
        live = self.live_blocks(parent_id)
        if sum(live) > self._free.num_free:
            return None
        bs = self.block_size
        tables, copies = [], []
        for g, (table, k) in enumerate(zip(p.tables, p.skipped, strict=True)):
            held = [b for b in table[k:] if b]  # a Mamba group's (align mode) keep their columns
            new = iter(self._pop(g, len(held)))
            tables.append([0] * k + [next(new) if b else 0 for b in table[k:]])
            copies += [Copy(src, dst, bs) for src, dst in zip(table[k:], tables[-1][k:], strict=True) if src]
            self._tok[g] += bs * len(held) if self.mamba[g] else max(0, p.tokens - k * bs)
        child = HybridSeq(tables, p.tokens, final_tokens)
        # where the parent stood as the steps in flight began (`begin_step`): its processed tokens are the child's
        child.skipped, child.computed, child.before, child.at_start = list(p.skipped), p.computed, p.before, p.at_start
        child.sched_at, child.sched_tokens, child.idle_at = p.sched_at, p.sched_tokens, p.idle_at
        child.last_state, child.placed, child.prefill_end, child.junction = \
            p.last_state, p.placed, p.prefill_end, p.junction
        self._seqs[child_id] = child
        self._settle(child)
        return tuple(copies)

    def free(self, seq_id: int) -> int:
        held = sum(self.live_blocks(seq_id)) if self.align else 0
        s = self._seqs.pop(seq_id)
        self._reserved -= s.res
        for g in self.free_order:
            self._drop(s, g, s.skipped[g], len(s.tables[g]))
        if self.align:
            return held * self.block_size
        return sum(len(table) - k for table, k in zip(s.tables, s.skipped, strict=True)) * self.block_size

    # -- pool helpers ----------------------------------------------------------------------------------
    def _pop(self, g: int, count: int) -> list[int]:
        """``count`` blocks for group ``g`` off the head of the free queue."""
        return self._pop_groups((g,), count)[0] if count > 0 else []

    def _pop_groups(self, groups: Sequence[int], count: int) -> list[list[int]]:
        """``count`` blocks for each of ``groups``, one group after another, in one pass over the free queue (a
        decoder's new block in every attention group at once, `_extend`)."""
        pool = self._pool
        cached = pool.num_cached
        total = len(groups) * count
        blocks = [pool.pop()] if total == 1 else pool.pop_many(total)
        group_of, used, out = self._group_of, self._used, []
        for i, g in enumerate(groups):
            mine = blocks[i * count:(i + 1) * count]
            for b in mine:
                group_of[b] = g
            used[g] += count
            out.append(mine)
        self.hit_changes += cached - pool.num_cached  # `Allocator.hit_changes` (admissions count too: harmless)
        return out

    def _drop(self, s: HybridSeq, g: int, start: int, stop: int) -> None:
        """Drop ``s``'s references to its group-``g`` blocks ``start:stop``, the latest first (vLLM frees a run
        tail first, so a freed chain's end is evicted first), and release those nobody else holds."""
        bs, ref, table = self.block_size, self._ref, s.tables[g]
        released = []
        shared = slots = 0
        # the slots a released block held, counted in the one pass (a freed long prompt is thousands of blocks): a
        # Mamba state block is whole, an attention block full below the last token's block, partly filled there
        full = len(table) if self.mamba[g] else s.tokens // bs
        last = 0 if self.mamba[g] else s.tokens - full * bs
        for i in range(stop - 1, start - 1, -1):
            b = table[i]
            if not b:  # a Mamba group's column without a state (align mode)
                continue
            ref[b] -= 1
            if ref[b]:
                shared += 1
            else:
                released.append(b)
                slots += bs if i < full else last if i == full else 0
        self._shared_saved -= shared * bs
        self._tok[g] -= slots
        self._release(g, released)

    def _release(self, g: int, blocks: list[int]) -> None:
        if blocks:
            self._used[g] -= len(blocks)
            self._pool.release(blocks, self.prefix_caching)

    def _holds_tail(self, s: HybridSeq) -> bool:
        """Whether every attention group holds the block of the sequence's last slot: a growth refused at a
        chunk start frees a chunked group's whole table first (vLLM's ``remove_skipped_blocks`` runs before the
        allocation fails), leaving no slot there to reserve until the sequence grows again or is preempted."""
        return not self.tails_may_empty or all(m or k < len(t) for t, k, m in zip(s.tables, s.skipped, self.mamba,
                                                                                 strict=True))

    def _settle(self, s: HybridSeq) -> None:
        """Recompute the last block's room (up to the next window free) and reservation."""
        self._reserved -= s.res
        held = len(s.tables[0]) * self.block_size
        s.res = max(0, min(s.final, held) - s.tokens) if self._holds_tail(s) else 0
        self._reserved += s.res
        room = held - s.tokens
        if self.align and sum(1 for b in s.tables[-1][s.skipped[-1]:] if b) > 1:
            room = 0  # the next allocation frees a state block (`_free_states`): step by step from here
        if room and self.prefix_caching and s.tokens // self.block_size < len(s.hashes):
            room -= 1  # stop in the step that fills a hashed block: it is cached then (`_cache_full_blocks`)
        lag = 1 if self.step_basis else 0  # the processed tokens reach the next free a step later (`_processed`)
        skipped = s.skipped
        for w, chunked, groups in self.local_kinds:  # a kind's next free is its least-skipped group's (monotone)
            first = min([skipped[g] for g in groups])
            room = min(room, max(0, next_skip(first, w, self.block_size, chunked) + lag - s.tokens))
        s.room = room
