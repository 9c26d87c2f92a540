"""What the hybrid paged allocator holds and what can be read from it without changing it: the pool, the
sequences' per-group block tables, the per-group counters, the contract's queries, the prefix lookup of
vLLM's hybrid coordinator, the fit checks, the memory accounting (per group and in total) and the audit.

`HybridPagedAllocator` (``hybrid.py``) adds the state changes on top.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from allocators.base import (
    FREE_OWNER,
    OVERHEAD_OWNER,
    SHARED_OWNER,
    SLOT_FREE,
    SLOT_OVERHEAD,
    Allocator,
    GroupShare,
    MemoryBreakdown,
    cdiv,
    fill_states,
)
from allocators.block_pool import BlockPool, pool_size
from allocators.kv_cache_groups import group_slots, mamba_cache_groups, split_kv_groups
from allocators.mamba_align import blocks_to_allocate, needs_checkpoint
from allocators.window_retention import check_retention_interval

HOST = -1
"""`HybridQueries._lookup`'s entry for a block cached only in the host tier (block ids are >= 0)."""


class HybridSeq:
    """One sequence: a block table per KV cache group (0: the null block), its tokens and final length, the
    leading nulls of each table (``skipped``), and its last block's ``room`` (tokens appendable before the
    allocator has work: a new block or a window free) and ``res`` (slots it will still fill there).
    ``computed``: the most computed tokens its windows were freed for, at most ``tokens - 1`` except after a
    refused growth (vLLM frees by the tokens computed before a step even when the step's blocks are refused).
    ``reach``: the token positions whose window tails it caches under sparse retention (`window_retention`)."""

    __slots__ = ("tables", "tokens", "final", "skipped", "room", "res", "hashes", "num_hashed", "computed",
                 "before", "at_start", "sched_at", "sched_tokens", "idle_at", "reach", "last_state", "placed",
                 "prefill_end", "junction")

    def __init__(self, tables: list[list[int]], tokens: int, final: int, hashes: tuple[int, ...] = ()) -> None:
        self.tables, self.tokens, self.final, self.hashes = tables, tokens, final, hashes
        self.skipped = [0] * len(tables)
        self.room = self.res = self.num_hashed = self.computed = 0
        # with windows freed on the processed-token basis (async scheduling): its tokens as the previous step
        # and the current one began (`HybridPagedAllocator.begin_step`)
        self.before = self.at_start = 0
        # the same, where steps are told (`HybridPagedAllocator.step_basis`: lazily grown decoders): the last step
        # that scheduled tokens of it and how many, and the last step that scheduled none (a decoder deferred)
        self.sched_at = self.idle_at = -2
        self.sched_tokens = 0
        self.reach: tuple[int, ...] = ()
        # Mamba groups in align mode (`mamba_align`; every such group's table has the same nulls): the column of
        # the state block copied from (freed at a later allocation; -1 none), whether blocks were placed since
        # admission, where its prefill ends and its shared-prefix junction (vLLM's ``shared_prefix_boundary``)
        self.last_state, self.placed, self.prefill_end, self.junction = -1, False, 0, 0


def _chunk_start(length: int, chunk: int, block_size: int) -> int:
    """The first block a chunked-local group's hit of ``length`` blocks needs: the one holding the start of the
    chunk its next token is in (the blocks before it are nulls: ``ChunkedLocalAttentionManager``'s
    ``local_attention_start_block_idx``)."""
    return length * block_size // chunk * chunk // block_size


def _window_hit(get: Callable[[int], int | None], block_hashes: Sequence[int], n: int, g: int, length: int,
                need: int) -> int:
    """The longest prefix of at most ``length`` blocks a window group accepts: the largest ``e <= length``
    whose ``need`` blocks before it are all cached in group ``g`` (block ``i``'s key ``block_hashes[i] * n +
    g``), else the leading run of cached blocks (shorter than ``need``: nothing before it is needed).

    Candidates are tried from ``e = length`` down, each block looked up at most once: a candidate's first
    block ``s = e - need`` is read first, and if it is not cached no candidate ending in the next ``need``
    blocks can be, so the search skips them all (a long uncached stretch costs one lookup per ``need``
    blocks); if it is, the blocks after it are read left to right, and an uncached one at ``j`` makes ``j``
    the next candidate, of which ``s .. j - 1`` are known cached, so only the blocks before ``s`` are read,
    right to left. Why not step the candidate back one block per miss: a cached island (a window group's
    early blocks are freed, and evicted, first) would cost two lookups per block for up to ``need``
    blocks, for every waiting request at every `lpm` sort."""
    if need <= 0:  # a one-token window needs no earlier block
        return length
    e = length
    while e >= need:
        s = e - need
        if get(block_hashes[s] * n + g) is None:
            e = s
            continue
        j = s + 1
        while j < e and get(block_hashes[j] * n + g) is not None:
            j += 1
        if j == e:
            return e
        e = j  # blocks s .. j - 1 are cached: the candidate ending at j needs the ones before s
        if e < need:
            break
        i = s - 1
        while i >= e - need and get(block_hashes[i] * n + g) is not None:
            i -= 1
        if i < e - need:
            return e
        e = i
    run = 0
    while run < length and get(block_hashes[run] * n + g) is not None:
        run += 1
    return run


def _state_hit(get: Callable[[int], int | None], block_hashes: Sequence[int], n: int, g: int, length: int) -> int:
    """The longest prefix of at most ``length`` blocks a Mamba group (align mode) accepts: it needs only the
    state at the prefix's end, so the last block of it cached in group ``g``, looked for right to left
    (``MambaManager.find_longest_cache_hit``)."""
    for e in range(length, 0, -1):
        if get(block_hashes[e - 1] * n + g) is not None:
            return e
    return 0


class HybridQueries(Allocator):
    """A hybrid pool's state and its read-only side; `HybridPagedAllocator` is the one to build.

    ``capacity_slots`` is the pool in full tokens (every layer), as for every allocator; the pool counts
    ``capacity`` in group slots (``kv_cache_groups.py``). A host tier (``--cpu-offload-gib``) keeps evicted
    blocks under their group keys, in host blocks of one group block each (write-back only)."""

    supports_host_tier = True
    knows_prompt = True

    def attach_host_tier(self, tier, *, to_end: bool = False) -> bool:
        """`Allocator.attach_host_tier`, refusing a write-through tier: storing a window group's blocks as
        they are computed (vLLM's HMA-aware connector) is not modelled, and running write-back instead would
        answer another question than the one asked."""
        if tier.write_through and self.prefix_caching:
            raise ValueError("--offload-write-policy write_through is not modelled for vLLM's hybrid KV cache "
                             "manager (this model's sliding-window, chunked-local or Mamba groups): use "
                             "write_back, or --disable-hybrid-kv-cache-manager")
        return super().attach_host_tier(tier, to_end=to_end)

    def __init__(self, capacity_slots: int, *, block_size: int = 16, max_model_len: int = 2048,
                 placement: str = "buddy", prefix_caching: bool = False, watermark: float = 0.0,
                 kv_groups: Sequence = (), max_num_batched_tokens: int | None = None,
                 prefix_cache_retention_interval: int | None = 0, mamba_groups: int = 0,
                 mamba_groups_first: bool = False, mamba_checkpoints: bool = True,
                 mamba_state_blocks: int = 1, lookahead_tokens: int = 0) -> None:
        """``mamba_groups``: KV cache groups of Mamba layers after the attention ones (`mamba_cache_groups`),
        each holding one state block per sequence; with any, ``capacity_slots`` is the pool itself, its blocks x
        ``block_size`` (`allocators.mamba_layout.HybridMambaPool`), as a token has no bytes in a Mamba layer.
        ``max_num_batched_tokens``: the scheduler's token budget, the tokens a step has in flight, which
        bounds what a window group holds per request (`admission_caps`); None: a prompt's whole length.
        ``prefix_cache_retention_interval``: vLLM's, which window blocks and (align mode) Mamba states are cached
        (`window_retention`; 0 is vLLM 0.33's default, None caches every full block). ``mamba_groups_first``:
        vLLM's KV cache config lists the Mamba groups before the attention ones (`MambaStateLayers.groups_first`),
        so a request's blocks are freed group by group in that order (`free_order`). ``mamba_checkpoints``: the
        layers export a state from inside a prefill (vLLM's ``num_prefill_checkpoint_blocks`` 1: Mamba-2, gated
        DeltaNet on Hopper); a Mamba-1 layer, or gated DeltaNet before Hopper, does not (0), so no chunk takes a
        checkpoint block (`checkpoints`). ``mamba_state_blocks``: the state blocks a sequence holds in each Mamba
        group with prefix caching off, 1 + vLLM's ``num_speculative_blocks``
        (`allocators.mamba_layout.mamba_state_blocks`); in align mode the ``num_speculative_blocks`` more after the
        running block (`allocators.mamba_align.place_blocks`). ``lookahead_tokens``: a model-based drafter's
        lookahead slots (vLLM's ``num_lookahead_tokens``, `sim.kernel.spec_decode.num_lookahead_tokens`), the last
        of the slots every ``admit`` and ``grow_with_drafts`` of such a run is given past a sequence's tokens
        (`_main_model_drafts`)."""
        super().__init__(capacity_slots, block_size=block_size, max_model_len=max_model_len, placement=placement,
                         prefix_caching=prefix_caching, watermark=watermark)
        self.unit, self.groups = split_kv_groups(kv_groups)
        self.groups += mamba_cache_groups(mamba_groups, self.unit)
        # prefix caching on: vLLM's mamba_cache_mode 'align', a position-indexed state table (`mamba_align`)
        self.align = bool(mamba_groups and prefix_caching)
        # align mode with prefill checkpoints: a chunk may take a block for a state inside it (`needs_checkpoint`)
        self.checkpoints = self.align and mamba_checkpoints
        if type(mamba_state_blocks) is not int or mamba_state_blocks < 1:
            raise ValueError(f"mamba_state_blocks must be a positive integer, got {mamba_state_blocks!r}")
        self.mamba_state_blocks = mamba_state_blocks  # 1 + num_speculative_blocks
        self.lookahead_tokens = lookahead_tokens
        self.draft_slots = 0  # the most speculative slots a verification held past its tokens (`grow_with_drafts`)
        self._fresh: set[int] = set()  # Mamba keys cached in the step being scheduled (`new_step`)
        self.mamba = [g.mamba for g in self.groups]  # a group of one state block per sequence
        # the groups in vLLM's order (``KVCacheCoordinator.free`` frees a request's blocks manager by manager,
        # each tail first): which of them join the free queue first decides which cached blocks are evicted first
        self.free_order = sorted(range(len(self.groups)), key=lambda g: not self.mamba[g]) if mamba_groups_first \
            else list(range(len(self.groups)))
        self.windows = [g.window for g in self.groups]
        self.chunked = [g.chunked for g in self.groups]  # a window that is Llama 4's attention chunk
        # the hot paths' loops (`HybridPagedAllocator._extend`), each in group order: the attention groups (the
        # Mamba groups come after them), the local ones, and the local ones by kind, (window, chunked, groups):
        # groups of one kind skip alike
        self.attention_groups = [g for g, m in enumerate(self.mamba) if not m]
        self.state_groups = [g for g, m in enumerate(self.mamba) if m]
        self.local_groups = [g for g, w in enumerate(self.windows) if w is not None]
        kinds = list(zip(self.windows, self.chunked, strict=True))
        self.local_kinds = [(w, c, [g for g, kind in enumerate(kinds) if kind == (w, c)])
                            for w, c in dict.fromkeys(kinds) if w is not None]
        # whether a growth refused at a skip can leave a group without the block of a sequence's last slot: a
        # chunk start skips every block before it, a one-token window the last one (`HybridPagedAllocator._settle`)
        self.tails_may_empty = any(g.chunked or g.window == 1 for g in self.groups)
        for g in self.groups:
            if g.chunked and g.window % block_size:
                raise ValueError(f"KV group {g.group}: kvsim models an attention chunk of whole blocks, got "
                                 f"{g.window} tokens with --block-size {block_size}")
        # vLLM validates the interval on any model with a window or Mamba group, against its scheduler block size:
        # a Mamba group without prefix caching (mamba_cache_mode 'none') has blocks of max_model_len tokens
        # (``MambaModelConfig.verify_and_update_config``), and a multiple of their lcm with the attention block
        # caches nothing there (``KVCacheCoordinatorNoPrefixCache``), so it runs as 0
        none_mode = bool(mamba_groups and not prefix_caching)
        check_retention_interval(prefix_cache_retention_interval,
                                 math.lcm(block_size, self.max_model_len) if none_mode else block_size,
                                 any(w is not None and not c for w, c in zip(self.windows, self.chunked,
                                                                              strict=True)) or bool(mamba_groups),
                                 f": {block_size} and, prefix caching off, the Mamba groups' max_model_len "
                                 f"{self.max_model_len}" if none_mode else "")
        self.retention_interval = prefix_cache_retention_interval
        # a hit's tail blocks: a window's, a Mamba state's one block (align mode: cached where reachable); a
        # chunked-local group caches every full block, as full attention does (vLLM's retention leaves it dense)
        self._needs = [(1 if self.align and g.mamba else None) if w is None or g.chunked else cdiv(w - 1, block_size)
                       for g, w in zip(self.groups, self.windows, strict=True)]
        # the blocks a local group holds per request at most (``max_admission_blocks_per_request``): a window's
        # last ``w - 1`` tokens, or a chunk, plus the tokens in flight
        self.admission_caps = [None if w is None or max_num_batched_tokens is None
                               else cdiv(min(w + max_num_batched_tokens, self.max_model_len), block_size) if c
                               else cdiv(min(w - 1 + max_num_batched_tokens, self.max_model_len), block_size) + 1
                               for w, c in zip(self.windows, self.chunked, strict=True)]
        # `_hit_blocks` asks full-attention groups first (a miss is settled at its first uncached block)
        self._lookup_order = sorted(enumerate(self.windows), key=lambda gw: (self.mamba[gw[0]], gw[1] is not None))
        self.group_names = tuple(dict.fromkeys([*(g.name for g in kv_groups), *(g.group for g in self.groups)]))
        self._attention_of = [self.group_names.index(g.group) for g in self.groups]
        self.slots_per_token = self.mamba.count(False)  # a token fills a slot in each attention group only
        self.kv_tokens = self.capacity
        if not mamba_groups:
            self.capacity = group_slots(self.capacity, kv_groups, self.unit)
        self.block_size = int(block_size)
        self.prefix_caching = bool(prefix_caching)
        self.num_blocks = pool_size(self.capacity, self.block_size)
        self.num_usable_blocks = self.num_blocks - 1
        self.watermark_blocks = int(watermark * self.num_blocks)
        self.overhead_slots = self.block_size + self.capacity % self.block_size
        self._pool = pool = BlockPool(self.num_blocks)
        self._ref, self._free, self._cache = pool.ref, pool.free, pool.cache
        self._group_of = [-1] * self.num_blocks  # the KV cache group of each live block
        self._seqs: dict[int, HybridSeq] = {}
        self._tok = [0] * len(self.groups)  # token slots in each group's live blocks (a shared block once)
        self._used = [0] * len(self.groups)  # live blocks of each group
        self._reserved = 0  # reserved slots of one group (every group's last blocks are alike)
        self._shared_saved = 0
        self.processed_basis = False  # windows free by the tokens processed (async scheduling): `begin_step`
        # with ``processed_basis``: whether the steps are told (`step_basis`) instead of snapshots taken
        self.step_basis = False
        self.clock = 0  # the step being planned or run (told with ``step_basis``)

    # -- queries ---------------------------------------------------------------------------------------
    def block_tables(self, seq_id: int) -> tuple[tuple[int, ...], ...]:
        """The sequence's block table in every KV cache group (0: a null block a window freed)."""
        return tuple(tuple(t) for t in self._seqs[seq_id].tables)

    def live_blocks(self, seq_id: int) -> list[int]:
        """Blocks the sequence holds now in each KV cache group."""
        s = self._seqs[seq_id]
        return [len(t) - k if not m else sum(1 for b in t[k:] if b)
                for t, k, m in zip(s.tables, s.skipped, self.mamba, strict=True)]

    def ref_count(self, block_id: int) -> int:
        return self._ref[block_id]

    @property
    def num_free_blocks(self) -> int:
        return self._free.num_free

    def free_block_ids(self) -> list[int]:
        return list(self._free)

    def num_tokens(self, seq_id: int) -> int:
        return self._seqs[seq_id].tokens

    def headroom(self, seq_id: int) -> int:
        return self._seqs[seq_id].room

    def swap_extent(self, seq_id: int, pending: int = 0) -> tuple[int, int]:
        blocks = sum(self.live_blocks(seq_id))
        return blocks * self.block_size, blocks

    def swap_hashes(self, seq_id: int) -> frozenset[int]:
        """The group keys of the live blocks this sequence holds that carry one (a window's nulls carry none)."""
        hashed = self._cache.block_hash
        return frozenset(h for table in self._seqs[seq_id].tables for b in table if (h := hashed[b]) is not None)

    def _lookup(self, block_hashes: Sequence[int], num_tokens: int) -> list[list[int]]:
        """Per group, the blocks of the longest prefix every group can use (vLLM's hybrid coordinator): a
        full group needs every block cached, a window group only the last ``cdiv(window - 1, block_size)``
        before the end (nulls before them). With a host tier a block may be cached there instead: its entry is
        `HOST` (loaded into a new block at admission). Never covers the last of ``num_tokens``; [] on a miss."""
        get = self._cached_getter()
        length = self._hit_blocks(block_hashes, num_tokens, get)
        if not length:
            return []
        n, bs = len(self.groups), self.block_size
        out = []
        for g, w in enumerate(self.windows):
            first = (length - 1 if self.mamba[g] else 0 if w is None else _chunk_start(length, w, bs)
                     if self.chunked[g] else max(0, length - cdiv(w - 1, bs)))
            out.append([0] * first + [get(block_hashes[i] * n + g) for i in range(first, length)])
        return out

    def _cached_getter(self) -> Callable[[int], int | None]:
        """Where a group block's key is cached: the GPU block holding it, else `HOST` if the host tier holds
        it, else None. Without a tier, the GPU index's own ``dict.get``."""
        get, tier = self._cache.getter, self.host_tier
        if tier is None:
            return get
        on_host = tier.holds

        def cached(key: int) -> int | None:
            block = get(key)
            return block if block is not None else HOST if on_host(key) else None

        return cached

    def _hit_blocks(self, block_hashes: Sequence[int], num_tokens: int,
                    get: Callable[[int], int | None] | None = None) -> int:
        """How many blocks `_lookup` hits, with ``get`` telling where a key is cached (default: the GPU or
        the host tier, `_cached_getter`). The hit is the longest prefix every group accepts: each group's
        test gives the longest it accepts within ``length`` (monotone in ``length``), so taking them in turn
        until none shortens it reaches that prefix in any order; full groups go first because they settle a
        miss at its first uncached block, where a window group would have to look for a run."""
        limit = (num_tokens - 1) // self.block_size
        if not self.prefix_caching or limit <= 0 or not block_hashes:
            return 0
        get = get or self._cached_getter()
        n, bs = len(self.groups), self.block_size
        length = min(limit, len(block_hashes))
        changed = True
        while changed and length:
            changed = False
            for g, w in self._lookup_order:
                if self.mamba[g]:
                    hit = _state_hit(get, block_hashes, n, g, length)
                elif w is None or self.chunked[g]:  # a chunked group needs its chunk's blocks, full ones all
                    hit = 0 if w is None else _chunk_start(length, w, bs)
                    while hit < length and get(block_hashes[hit] * n + g) is not None:
                        hit += 1
                else:
                    hit = _window_hit(get, block_hashes, n, g, length, cdiv(w - 1, bs))
                if hit < length:
                    length, changed = hit, True
        return length

    def _full_hit(self, block_hashes: Sequence[int], num_tokens: int) -> int:
        """The blocks of the longest prefix every full-attention group has cached on the GPU (0 without one): with
        a shorter hit of every group, vLLM's ``shared_prefix_boundary`` (`window_retention`)."""
        get, n = self._cache.getter, len(self.groups)
        length = min((num_tokens - 1) // self.block_size, len(block_hashes))
        full = [g for g, w in enumerate(self.windows) if w is None and not self.mamba[g]]
        if not full or not self.prefix_caching:
            return 0
        hit = 0
        while hit < length and all(get(block_hashes[hit] * n + g) is not None for g in full):
            hit += 1
        return hit

    def shared_prefix_boundary(self, block_hashes: Sequence[int], num_tokens: int) -> int:
        """vLLM's ``shared_prefix_boundary`` for a request of ``num_tokens`` looked up now: the full-attention
        hit where it is longer than the hit every group gives (a prefix whose states are not cached), else 0
        (``KVCacheManager.get_computed_blocks``); the Mamba split stops there (`mamba_align.aligned_split`)."""
        full = self._full_hit(block_hashes, num_tokens)
        return full * self.block_size if full > self._hit_blocks(block_hashes, num_tokens) else 0

    def num_cached_tokens(self, block_hashes: Sequence[int], num_tokens: int) -> int:
        return self._hit_blocks(block_hashes, num_tokens) * self.block_size

    def num_gpu_cached_tokens(self, block_hashes: Sequence[int], num_tokens: int) -> int:
        return self._hit_blocks(block_hashes, num_tokens, self._cache.getter) * self.block_size

    def _checkpoint_end(self, prefill_end: int) -> int:
        """The prefill end a Mamba group's checkpoint rule reads (`mamba_align.needs_checkpoint`): the request's
        under vLLM's default retention 0, which keeps only the prefill-end chunk's checkpoint; 0 under a positive
        interval, whose segment states any chunk may export, so every chunk whose checkpoint is valid reserves a
        block (``KVCacheCoordinator.get_num_blocks_to_allocate``: ``if self.retention_interval != 0:
        prefill_end = 0``, ``v1/core/kv_cache_coordinator.py``)."""
        return prefill_end if self.retention_interval == 0 else 0

    def _admission_blocks(self, hits: list[list[int]], num_tokens: int, capped: bool = False,
                          prefill_end: int = 0, mamba_tokens: int | None = None) -> int:
        """Free blocks admitting ``num_tokens`` with these hits takes: new blocks in every group (host hits
        load into new blocks too), plus the hits that sit in the free queue. ``capped``: the test that a
        request's whole sequence would fit, where a window group needs at most its `admission_caps` blocks.
        A Mamba group in align mode takes at most a running block and a checkpoint block (`mamba_align`;
        ``prefill_end``: where the request's prefill ends) for ``mamba_tokens`` (default ``num_tokens``: without
        a drafter's lookahead slots, `_main_model_drafts`)."""
        lengths = self._lengths(cdiv(num_tokens, self.block_size), capped)
        if self.align:
            bs, start = self.block_size, len(hits[0]) * self.block_size if hits else 0
            table = hits[-1] if hits else []
            spec = self.mamba_state_blocks - 1
            mamba_tokens = num_tokens if mamba_tokens is None else mamba_tokens
            checkpoint = self.checkpoints and needs_checkpoint(table, start, mamba_tokens, prefill_end, bs, spec)
            state = blocks_to_allocate(len(table), mamba_tokens, checkpoint, bs, spec, allocated=False)
            lengths = [len(table) + state if m else n for n, m in zip(lengths, self.mamba, strict=True)]
        if not hits:
            return sum(lengths)
        ref = self._ref
        return sum(max(n - len(h), 0) + sum(1 for b in h if b < 0 or b and ref[b] == 0)
                   for n, h in zip(lengths, hits, strict=True))

    def _main_model_drafts(self, slots: int) -> int:
        """Of ``slots`` held past a sequence's tokens (a verification's drafts or a padded admission's placeholders,
        then a drafter's `lookahead_tokens`), those the target model computes: vLLM's ``num_tokens_main_model``
        (``KVCacheManager.allocate_slots``, ``v1/core/kv_cache_manager.py:550-553``), which is all a Mamba group in
        align mode allocates state columns and checkpoints for (``MambaManager.get_num_blocks_to_allocate`` and
        ``allocate_new_blocks``, ``v1/core/single_type_kv_cache_manager.py:1731-1736`` and ``1810-1815``: the
        drafter has no Mamba layer); the attention groups hold all of them."""
        return max(0, slots - self.lookahead_tokens)

    def _lengths(self, length: int, capped: bool = False) -> list[int]:
        """Each group's table length for a sequence of ``length`` blocks: a Mamba group's state blocks
        (vLLM's ``mamba_cache_mode='none'``: a block of ``max_model_len`` tokens covers any request, and one more
        per speculative token, `mamba_state_blocks`), a window
        group's capped at its `admission_caps` when ``capped``."""
        return [self.mamba_state_blocks if m else length if cap is None or not capped else min(length, cap)
                for m, cap in zip(self.mamba, self.admission_caps, strict=True)]

    def group_fits(self, num_tokens: int, count: int, *, final_tokens: int, max_total_tokens: int | None = None,
                   block_hashes: Sequence[int] = (), then_tokens: int = 1,
                   forks: Sequence[tuple[int, int]] = ()) -> bool:
        """`admit`'s test, then ``count`` forks copying every live block and the blocks every group of the
        ``count + 1`` sequences takes for their next ``then_tokens`` (window frees those tokens would make are
        not counted: a conservative answer, wherever the ``forks`` are made, as nothing is shared)."""
        hits = self._lookup(block_hashes, num_tokens)
        taken = self._admission_blocks(hits, num_tokens)
        free = self._free.num_free
        if taken > free - self.watermark_blocks:
            return False
        length = cdiv(num_tokens, self.block_size)
        live = (sum(length - sum(1 for b in h if b == 0) for h in hits) if hits
                else sum(self._lengths(length)))
        tail = (count + 1) * self.slots_per_token * (cdiv(num_tokens + then_tokens, self.block_size) - length)
        return taken + count * live + tail <= free

    def never_fits(self, num_tokens: int, *, final_tokens: int, max_total_tokens: int | None = None) -> str | None:
        """An empty pool bounds a request by its prompt in every group, a window group's share capped at the
        blocks its window and a step's tokens in flight take (`admission_caps`: prefilled in chunks, a prompt's
        earlier blocks leave the window as later ones come), and at its final length by its whole table in
        full groups and about a window's blocks in window groups (vLLM sizes its pool, and admits, by these).
        The two peaks are apart: by the time the full groups hold the final length, decoding has long shrunk
        a window group to its window."""
        bs, usable = self.block_size, self.num_usable_blocks
        length = cdiv(num_tokens, bs)
        prompt = sum(self._lengths(length, capped=True))
        if prompt > usable:
            return (f"{self.name}: {num_tokens} tokens need {prompt} blocks in {len(self.groups)} KV cache groups "
                    f"but the pool has only {usable} usable")
        final = cdiv(max(num_tokens, final_tokens), bs)
        need = sum((1 if self.align else 0) + self.mamba_state_blocks if m
                   else final if w is None else min(final, cdiv(w, bs) + 1)
                   for m, w in zip(self.mamba, self.windows, strict=True))  # a chunk's blocks, or a window's
        if need > usable:
            return (f"{self.name}: needs {need} blocks of {bs} in {len(self.groups)} KV cache groups at its final "
                    f"length {max(num_tokens, final_tokens)} but the pool has only {usable} usable")
        return None

    # -- accounting ------------------------------------------------------------------------------------
    def breakdown(self, waiting: bool = False) -> MemoryBreakdown:
        bs, free_blocks = self.block_size, self._free.num_free
        used = self.num_usable_blocks - free_blocks
        tokens = sum(self._tok)
        reserved = self._reserved * self.slots_per_token  # a Mamba group's state block reserves nothing
        free = free_blocks * bs
        return MemoryBreakdown(
            capacity=self.capacity, token_states=tokens, reservation=reserved,
            internal_frag=used * bs - tokens - reserved,
            external_frag=self.overhead_slots + (free if waiting else 0), free=0 if waiting else free,
            used_blocks=used, total_blocks=self.num_usable_blocks, shared_saved=self._shared_saved,
            cached=self._pool.num_cached * bs, groups=self.group_shares())

    def group_shares(self) -> tuple[GroupShare, ...]:
        """The used share split by attention group (its KV cache groups summed)."""
        parts = [[name, 0, 0, 0, 0] for name in self.group_names]
        for g, a in enumerate(self._attention_of):
            part = parts[a]
            part[1] += not self.mamba[g]
            part[2] += self._tok[g]
            part[3] += self._used[g]
        bs, res = self.block_size, self._reserved
        return tuple(GroupShare(name, k, tok, res * k, used * bs - tok - res * k, used)
                     for name, k, tok, used, _ in parts)

    def _per_slot(self, per_block: np.ndarray, outside: int) -> np.ndarray:
        """A value per block spread over its slots; ``outside`` for the slots no block covers."""
        out = np.full(self.capacity, outside, dtype=per_block.dtype)
        out[:self.num_blocks * self.block_size] = np.repeat(per_block, self.block_size)
        return out

    def memory_map(self) -> np.ndarray:
        owner = np.full(self.num_blocks, FREE_OWNER, dtype=np.int64)
        owner[0] = OVERHEAD_OWNER
        for seq_id, s in self._seqs.items():
            for table, k in zip(s.tables, s.skipped, strict=True):
                owner[[b for b in table[k:] if b]] = seq_id
        owner[np.asarray(self._ref) > 1] = SHARED_OWNER
        return self._per_slot(owner, OVERHEAD_OWNER)

    def slot_groups(self) -> np.ndarray:
        """The attention group (index into ``group_names``) of every slot's block; -1 for free and overhead."""
        attention = np.asarray([*self._attention_of, -1], dtype=np.int8)  # a group of -1 reads the -1 at the end
        group = attention[np.asarray(self._group_of)]
        group[np.asarray(self._ref) == 0] = -1
        return self._per_slot(group, -1)

    def slot_states(self, pending: Mapping[int, int] | None = None) -> np.ndarray:
        bs, pending = self.block_size, pending or {}
        states = np.full(self.capacity, SLOT_FREE, dtype=np.int8)
        states[:bs] = SLOT_OVERHEAD
        states[self.num_blocks * bs:] = SLOT_OVERHEAD
        offsets = np.arange(bs)
        for seq_id, s in self._seqs.items():
            for table, k, mamba in zip(s.tables, s.skipped, self.mamba, strict=True):
                slots = (np.asarray([b for b in table[k:] if b], np.int64)[:, None] * bs + offsets).ravel()
                if mamba:  # a state block is whole
                    fill_states(states, slots, len(slots), len(slots))
                    continue
                tokens = s.tokens - k * bs
                fill_states(states, slots, min(tokens + pending.get(seq_id, 0), tokens + s.res), tokens + s.res)
        return states

    def check_invariants(self) -> None:
        """Recompute reference counts, groups, window tables, counters and the breakdown from the tables."""
        from allocators.hybrid_audit import audit_hybrid

        audit_hybrid(self)
