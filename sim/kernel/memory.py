"""`KVMemory`: the kernel's one door to the allocator, and the placement of sequence groups in it.

Every allocator call the simulation makes goes through this module (a test holds that): the scheduler, the
beam search, the decode fast-forward, the engine, the fleet and the runner hold a `KVMemory`, never an
allocator. It picks the sequence ids and knows which group owns each sequence; it places a group whole
(admit, fork, grow: all or nothing) and frees it whole. Capabilities are read from the allocator's plain
attributes once, here (`Allocator.kind`, ``prefix_caching``, ``shares_prefixes``, ``reports_growth``,
``allocates_per_chunk``)::

    scheduler / beam / fast_forward / engine / fleet / runner  -->  KVMemory  -->  Allocator (allocators/)

What an allocator call changed comes back with its result: an `Admission` (prompt tokens found cached,
``host_tokens`` of them loaded from the host tier), copies with their slots, ``grow_due``'s deltas; nobody
reads or rolls back a counter of the allocator.

The host tier (``--cpu-offload-gib``, `allocators.host_tier.HostTier`) is attached here, the allocator's one
holder: `KVMemory` hands it to the allocator (`Allocator.attach_host_tier`) and keeps it as ``host_tier`` for
the swap space (`park` / `unpark`) and the summary's counters. The allocator constructor contract is
unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from allocators.base import (
    NO_COPIES,
    Admission,
    Allocator,
    Copy,
    GroupSwap,
    MemoryBreakdown,
    fork_plan,
    waiting_states,
)
from allocators.host_tier import HostTier
from sim.kernel.sequence_group import SWAPPED, SequenceGroup


class KVMemory:
    """An allocator plus the sequence ids of the groups placed in it."""

    __slots__ = ("_alloc", "owner", "_next_seq", "registered_prefixes", "block_size", "kind", "prefix_caching",
                 "shares_prefixes", "reports_growth", "per_chunk_capable", "parks_own", "knows_own", "grow",
                 "grow_due", "shared_fill", "evicted_blocks", "new_blocks", "hit_layout", "stores",
                 "host_evictions", "headroom", "grow_chunk", "touch_prefixes", "slots_per_token", "group_names",
                 "host_tier", "tell_lag")

    def __init__(self, alloc: Allocator, host_tier: HostTier | None = None, *, host_hits_to_end: bool = False) -> None:
        """``host_tier``: a host-memory KV tier to put behind the allocator's prefix cache (``--cpu-offload-gib``);
        kept only if the allocator can use it (`Allocator.attach_host_tier`, which ``host_hits_to_end`` is
        passed to), else ``host_tier`` is None."""
        self._alloc = alloc
        self.host_tier = host_tier if host_tier is not None and alloc.attach_host_tier(
            host_tier, to_end=host_hits_to_end) else None
        self.owner: dict[int, SequenceGroup] = {}  # seq id -> the group holding it
        self._next_seq = 0
        self.registered_prefixes: set[int] = set()  # prefix groups whose shared prefix is pinned
        self.block_size = alloc.block_size
        self.kind = alloc.kind
        self.prefix_caching = alloc.prefix_caching
        self.shares_prefixes = alloc.shares_prefixes
        self.reports_growth = alloc.reports_growth
        self.per_chunk_capable = alloc.allocates_per_chunk
        self.parks_own = alloc.parks_own_blocks
        self.knows_own = alloc.knows_own_hashes
        self.slots_per_token = alloc.slots_per_token
        self.group_names = alloc.group_names
        # The per-block calls of the decode path are the allocator's own methods, bound once: a wrapper call
        # would cost as much as they do. `grow_due` only where ``reports_growth``.
        self.grow = alloc.grow
        self.grow_due = alloc.grow_due
        self.shared_fill = alloc.shared_fill
        self.evicted_blocks, self.new_blocks, self.hit_layout = alloc.evicted_blocks, alloc.new_blocks, \
            alloc.hit_layout
        self.stores, self.host_evictions = alloc.stores, alloc.host_evictions
        self.headroom = alloc.headroom
        self.grow_chunk = alloc.grow_chunk
        self.touch_prefixes = alloc.touch_prefixes
        # how `free_group` tells a sequence's lagging tokens: as growth, except that a verification's accepted
        # drafts in a pool with windows free no window block (`HybridPagedAllocator.cache_held`, set by the replica)
        self.tell_lag = alloc.grow

    # -- questions -----------------------------------------------------------------------------------------
    @property
    def growth_openings(self) -> int:
        """Changes so far after which decode growth may let a refused request in: blocks a sliding window
        released, and blocks a hybrid pool evicted from or entered in its prefix cache
        (`Allocator.window_released`, `Allocator.hit_changes`)."""
        return self._alloc.window_released + self._alloc.hit_changes

    def never_fits(self, group: SequenceGroup) -> str | None:
        """Why ``group`` could not run even alone, or None. A request sampled ``n`` times as one group (``fork``)
        is also bounded by its samples together: in a block pool (not a hybrid one, whose windows free blocks) they
        share at most the prompt's full blocks, so at their final length they hold those once and each sample's
        own blocks after them (beams may share more, so they are not)."""
        reason = self._alloc.never_fits(group.prompt, final_tokens=group.final_tokens,
                                        max_total_tokens=group.max_total)
        if reason is None and group.num_seqs > 1 and not group.beam and self.kind == "paged" and not self.group_names:
            bs = self.block_size
            shared = group.prompt // bs  # at best the prompt's full blocks, shared copy-on-write
            need = shared + group.num_seqs * -(-(group.final_tokens - shared * bs) // bs)
            if self._alloc.never_fits(1, final_tokens=need * bs, max_total_tokens=need * bs) is not None:
                reason = (f"{self._alloc.name}: its {group.num_seqs} samples together need at least {need} blocks at "
                          f"their final length (the prompt's {shared} full blocks once, each sample's own after "
                          "them), more than the pool has")
        return reason

    def longest_request(self, limit: int) -> int:
        """The most tokens, up to ``limit``, that one request can reach alone in this pool (the allocator's
        `never_fits` for a prompt of that length), by bisection: vLLM refuses to start a server whose KV cache
        cannot hold one request of ``max_model_len`` (`sim.kernel.over_length.vllm_refusals`). A prompt, not
        growth, is the peak vLLM sizes for: prefilled in chunks it holds a window group's admission cap (the
        window plus a step's tokens), where decoding holds about the window alone."""
        def fits(tokens: int) -> bool:
            return self._alloc.never_fits(tokens, final_tokens=tokens, max_total_tokens=tokens) is None

        if fits(limit):
            return limit
        low, high = 0, limit  # fits(low) (nothing), not fits(high)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if fits(mid) else (low, mid)
        return low

    def cached_tokens(self, hashes: Sequence[int], num_tokens: int) -> int:
        """Prompt tokens a new sequence would find cached (no side effects)."""
        return self._alloc.num_cached_tokens(hashes, num_tokens) if hashes else 0

    def gpu_cached_tokens(self, hashes: Sequence[int], num_tokens: int) -> int:
        """Prompt tokens a new sequence would find cached in GPU memory, its host-tier hits left out (no side
        effects): vLLM's ``KVCacheManager.get_num_cached_tokens``."""
        return self._alloc.num_gpu_cached_tokens(hashes, num_tokens) if hashes else 0

    def usage(self) -> float:
        """vLLM's KV cache usage (``BlockPool.get_usage``): the share of the usable blocks that are not free, a
        free block that still holds a cached prefix counting as free."""
        alloc = self._alloc
        return 1.0 - alloc.num_free_blocks / alloc.num_usable_blocks

    def mamba_align(self) -> bool:
        """Whether the pool holds Mamba states in vLLM's ``mamba_cache_mode="align"`` (`allocators.mamba_align`)."""
        return self._alloc.align

    def mamba_checkpoints(self) -> bool:
        """Whether its Mamba states in align mode are exported from inside a prefill (`HybridQueries.checkpoints`)."""
        return self._alloc.checkpoints

    def shared_prefix_boundary(self, group: SequenceGroup) -> int:
        """vLLM's ``shared_prefix_boundary`` of a waiting group looked up now (`HybridQueries.
        shared_prefix_boundary`)."""
        return self._alloc.shared_prefix_boundary(group.hashes, group.prefill_target) if group.hashes else 0

    def new_step(self) -> None:
        """A step is being scheduled (`HybridPagedAllocator.new_step`)."""
        self._alloc.new_step()

    def cached_split(self, hashes: Sequence[int], num_tokens: int) -> tuple[int, int]:
        """`cached_tokens` and the part of it in GPU memory, without the host tier's (``lpm`` sorts by the one
        and its in-batch check reads the other), from one lookup. Allocators that do not lay a hit out
        (``reports_growth`` False: `paged-cow`, the hybrid pool) count their host hits in both."""
        if self.host_tier is None or not self.reports_growth or not hashes:
            cached = self.cached_tokens(hashes, num_tokens)
            return cached, cached
        gpu, host = self.hit_layout(hashes, num_tokens)
        return (len(gpu) + len(host)) * self.block_size, len(gpu) * self.block_size

    def num_tokens(self, seq_id: int) -> int:
        return self._alloc.num_tokens(seq_id)

    def reload_transfers(self, host_blocks: int) -> int:
        return self._alloc.reload_transfers(host_blocks)

    def swap_group(self, group: SequenceGroup, pending: Sequence[int]) -> GroupSwap:
        """What swapping a group's sequences out moves, and the forks that make them again as they share memory
        (`Allocator.swap_group`); ``pending``: the tokens each holds that the allocator was not told. A beam
        group preempted while it re-picks its beams may hold more sequences than its beams (the first are
        kept) or fewer (a missing one is made again as a copy of the first, as a beam continuing another)."""
        n = group.num_seqs
        swap = self._alloc.swap_group(group.seq_ids[:n], pending[:n])
        missing = n - 1 - len(swap.forks)
        return swap._replace(forks=swap.forks + ((0, group.total_tokens),) * missing) if missing > 0 else swap

    def growth_fits(self, growth: Sequence[tuple[int, int]]) -> bool:
        """Whether growing each ``(seq_id, tokens)`` of one group in turn would all succeed now (changes nothing;
        `Allocator.growth_fits`, `sim.kernel.group_growth`)."""
        return self._alloc.growth_fits(growth)

    def breakdown(self, waiting: bool = False) -> MemoryBreakdown:
        return self._alloc.breakdown(waiting)

    def park(self, key: int, slots: int, block_hashes: frozenset[int] = frozenset()) -> int | None:
        """Swap ``slots`` of a preempted request (``key``) out into the host tier's memory, whole blocks,
        ``block_hashes`` the keys of its hashed ones (`free_group`'s ``parked``: not offloaded meanwhile).
        Returns how many of its blocks the host held already (cached, or parked by another swapped request, by
        hash: taken or shared as their parked copies, nothing to copy, `HostTier.swap_out`), or None if it has
        no room (only with a host tier)."""
        tier = self.host_tier
        shared = tier.shared_blocks + tier.joined_blocks
        if not tier.swap_out(key, -(-slots // self.block_size), block_hashes):
            return None
        return tier.shared_blocks + tier.joined_blocks - shared

    @property
    def parks_hashes(self) -> bool:
        """Whether a swap-out tells the host tier the hashes it parks: any tier, which copies none it holds
        already (`HostTier.swap_out`, `RequestTier.swap_out`); a write-back tier's spills skip them meanwhile."""
        return self.host_tier is not None

    def unpark(self, key: int) -> None:
        """The request swapped out under ``key`` is back on the GPU: free its host blocks."""
        self.host_tier.swap_in(key)

    def check_invariants(self) -> None:
        self._alloc.check_invariants()

    def snapshot(self, pending: Mapping[int, int],
                 waiting: bool) -> tuple[np.ndarray, dict[int, int], np.ndarray, np.ndarray | None]:
        """The memory map: every slot's owner, the request of each sequence, every slot's state, and (a hybrid
        pool) every slot's attention group (index into ``group_names``, -1 for free and overhead). ``pending``
        and ``waiting`` as for `breakdown` and the step row taken with it, so that the states count its shares:
        ``waiting``, free slots are external fragmentation (`waiting_states`)."""
        request_of_seq = {seq: group.request_id for seq, group in self.owner.items()}
        groups = self._alloc.slot_groups() if self.group_names else None
        states = self._alloc.slot_states(pending)
        return self._alloc.memory_map(), request_of_seq, waiting_states(states) if waiting else states, groups

    # -- sequences -----------------------------------------------------------------------------------------
    def new_seq(self, group: SequenceGroup) -> int:
        """A new sequence id for ``group``. Ids are handed out in order, and a placement that fails gives its
        ids back, so that the ids, which the memory map shows, do not depend on how often a blocked queue
        head was tried (step by step tries it every step, the fast-forward once a run)."""
        seq_id = self._next_seq
        self._next_seq += 1
        self.owner[seq_id] = group
        group.seq_ids.append(seq_id)
        if self.host_tier is not None and self.host_tier.write_through:  # its record is the request's
            self.host_tier.bind(seq_id, (group.index, len(group.seq_ids) - 1), group.prompt // self.block_size)
        return seq_id

    def fork(self, group: SequenceGroup, parent: int) -> tuple[Copy, ...] | None:
        """A new sequence of ``group`` forked from ``parent``; None (no id taken) if there is no room."""
        made = self._alloc.fork(parent, self._next_seq, final_tokens=group.final_tokens)
        if made is not None:
            self.new_seq(group)
        return made

    @property
    def processed_basis(self) -> bool:
        """Whether the pool frees by the tokens whose output is processed (`Allocator.processed_basis`): only such
        a pool reads `begin_step`'s ``landed``."""
        return self._alloc.processed_basis

    @property
    def step_basis(self) -> bool:
        """Whether the pool is told the steps (`Allocator.step_basis`): `at_step` and `idle` then matter."""
        return self._alloc.step_basis

    def begin_step(self, landed: Mapping[int, int] | None = None, step: int | None = None) -> None:
        """Step ``step`` is being planned under async scheduling: a pool that frees window blocks (and Mamba states)
        by the tokens processed remembers where each sequence stood, or the step (`HybridPagedAllocator.begin_step`;
        ``landed``: sequence -> drafts accepted by the verification whose output this step's planning sees
        processed)."""
        if self._alloc.processed_basis:
            self._alloc.begin_step(landed, step)

    def at_step(self, step: int) -> None:
        """A decode run grows its due decoders at step ``step``: a pool told the steps (`HybridPagedAllocator.
        step_basis`) frees by the tokens processed as of it."""
        if self._alloc.step_basis:
            self._alloc.clock = step

    def idle(self, seq_ids: Sequence[int]) -> None:
        """These sequences compute nothing in the step being planned (deferred decoders): a pool told the steps
        frees by their tokens processed accordingly at the next (`HybridPagedAllocator.idle`)."""
        if self._alloc.step_basis:
            for seq_id in seq_ids:
                self._alloc.idle(seq_id)

    def hide_shared_tails(self, tails: Mapping[int, int]) -> list[int]:
        """Under async scheduling, uncache the shared-hash blocks of each sequence of ``tails`` that its last tokens
        in flight (``tails[seq_id]`` of them) reach into (`PagedAllocator.hide_shared_tail`) while admissions look
        the cache up; returns the sequences hidden, for `show_tails`. Only the paged allocator and the hybrid pool
        share generated blocks (sessions)."""
        if not self.prefix_caching:
            return []
        return [seq_id for seq_id, unknown in tails.items() if self._alloc.hide_shared_tail(seq_id, unknown)]

    def show_tails(self, seq_ids: list[int]) -> None:
        """Cache again the blocks `hide_shared_tails` hid (vLLM hashes them once the output is processed)."""
        for seq_id in seq_ids:
            self._alloc.cache_blocks(seq_id)

    def free(self, seq_id: int, finished: bool = False, tier_told: bool = False) -> None:
        """``finished``: the request is done for good (an allocator that parks own blocks drops them; a
        write-through host tier ranks its blocks anew, unless ``tier_told`` already, `tell_tier_finished`)."""
        if finished and self.parks_own:
            self._alloc.free(seq_id, finished=True)
        else:
            self._alloc.free(seq_id)
        if self.host_tier is not None and self.host_tier.write_through and not tier_told:
            self.host_tier.release(seq_id, finished)
        del self.owner[seq_id]

    def tell_tier_finished(self, group: SequenceGroup) -> None:
        """Tell a write-through host tier that ``group`` finished, before its blocks are freed: vLLM's connector
        hears of a finished request when its output is processed (``request_finished``), though the blocks wait
        for the step in flight (`sim.kernel.async_outputs.InFlight.freeing_late`)."""
        tier = self.host_tier
        if tier is not None and tier.write_through:
            for seq_id in group.seq_ids:
                tier.release(seq_id, True)

    def free_group(self, group: SequenceGroup, lags: Mapping[int, int], finished: bool = False,
                   parked: set[int] | None = None, unknown_tail: int = 0, tier_told: bool = False) -> tuple[Copy, ...]:
        """Free every sequence of a group (``finished``: for good). ``lags``: tokens a sequence computed that the
        allocator was not told (a lazily grown decoder); with prefix caching they are told first, so its full
        blocks get their hashes, as in vLLM. ``parked``: gathers the host-tier keys of the hashed blocks each
        sequence holds when it is freed, those told included (a group being swapped out: `park`). Returns the
        copies that telling them made. ``unknown_tail``: the last told tokens not known yet (async scheduling:
        they are in flight), so the blocks they reach into lose their hashes (`PagedAllocator.forget_tail_hash`;
        more than one token with speculative drafts, `PagedAllocator.forget_hashes_past`). ``tier_told``: the host
        tier heard of the finish already (`tell_tier_finished`)."""
        copies: tuple[Copy, ...] = NO_COPIES
        tier = self.host_tier if finished and self.host_tier is not None and self.host_tier.write_through else None
        for seq_id in group.seq_ids:
            lag = lags.get(seq_id, 0)
            if lag > 0 and self.prefix_caching:
                if tier is not None:  # their blocks are offered when the next step is planned
                    tier.finishing(seq_id)
                copies += self.tell_lag(seq_id, lag) or NO_COPIES
            if unknown_tail == 1 and self.prefix_caching:
                self._alloc.forget_tail_hash(seq_id)
            elif unknown_tail and self.prefix_caching:  # drafts: vLLM's paged manager only (`_check_speculative`)
                self._alloc.forget_hashes_past(seq_id, unknown_tail)
            if parked is not None:
                parked |= self._alloc.swap_hashes(seq_id)
            self.free(seq_id, finished, tier_told)
        group.seq_ids = []
        return copies

    # -- placing a group -----------------------------------------------------------------------------------
    def place(self, group: SequenceGroup, forks: Sequence[tuple[int, int]] = ()) -> \
            tuple[Admission, tuple[Copy, ...]] | None:
        """Put a waiting or swapped group's sequences in memory, all or nothing: the first with the prompt
        (plus, for one sequence being recomputed, its generated tokens); a group that had forked comes back
        as its ``n`` sequences (fork, then grow each to the prompt plus its generated tokens), forked where
        ``forks`` say (`fork_plan`: a swapped group's `GroupSwap.forks`, so its sequences share what they shared
        when it was swapped out), else all from the first at the prompt. A group that forks at its first
        token, or had forked, is placed only if the allocator says all its sequences would fit
        (`Allocator.group_fits`). Returns the admission and the copies made, or None (nothing changed)."""
        alloc = self._alloc
        self.register_prefix(group)
        multi = group.forked and group.num_seqs > 1
        if group.num_seqs > 1:
            # Asked first. A group whose samples or beams fork at the first token would otherwise be prefilled,
            # fail to fork and preempt itself. One that had forked (fork, then grow each by its generated
            # tokens) would, on a failed try, evict cached blocks on its way, and undoing it frees its blocks in
            # another order than they were taken, which moves where later ones land (step by step tries it
            # every step, a fast-forwarded run once: their memory maps would differ).
            tokens, then = (group.prompt, group.generated) if multi else (group.prompt + group.generated, 1)
            if not alloc.group_fits(tokens, group.num_seqs - 1, final_tokens=group.final_tokens,
                                    max_total_tokens=group.max_total, block_hashes=group.hashes, then_tokens=then,
                                    forks=forks):
                return None
        first = self.new_seq(group)
        tokens = group.prompt + (0 if multi else group.generated)
        swapped = self.host_tier is not None and group.state == SWAPPED
        if swapped:  # it comes back from its swap blocks, not from host-cache hits
            alloc.host_tier = None
        try:
            admission = alloc.admit(first, tokens, final_tokens=group.final_tokens,
                                    max_total_tokens=group.max_total, block_hashes=group.hashes, **self._own(group))
        finally:
            if swapped:
                alloc.host_tier = self.host_tier
        copies: tuple[Copy, ...] = NO_COPIES if admission is None else admission.copies  # pages it mapped
        ok = admission is not None
        if ok and multi:
            total = group.prompt + group.generated
            for source, at in fork_plan(forks, group.num_seqs - 1, tokens, total):
                parent = group.seq_ids[source]
                grown = alloc.grow_to(parent, at)
                made = None if grown is None else self.fork(group, parent)
                if made is None:
                    ok = False
                    break
                copies += grown + made
            for seq_id in group.seq_ids if ok else ():
                made = alloc.grow_to(seq_id, total)
                if made is None:
                    ok = False
                    break
                copies += made
        if not ok:  # undone (what it copied is not charged)
            self._unplace(group, admitted=admission is not None)
            return None
        return admission, copies

    def place_first_chunk(self, group: SequenceGroup, chunk_of, *, full_tokens: int | None,
                          apply_watermark: bool, reserved_blocks: int = 0,
                          lookahead_slots: int = 0, remote: bool = False) -> Admission | None:
        """Admit a single sequence about to be prefilled in chunks by a per-chunk allocator (vLLM's paged KV
        cache manager) with slots for its prefix hits and first chunk only; ``chunk_of(remaining)`` sizes the
        chunk, 0 for none: slots for its hits only, looked up over its whole prompt and cached once loaded
        (`cache_loaded`; a request whose host hits load beside the steps), admitted only into the free blocks
        beyond ``reserved_blocks``. ``full_tokens``: admit only if that many tokens would fit
        (``scheduler_reserve_full_isl``). ``lookahead_slots``: slots held after the chunk, not token slots.
        ``remote``: the chunk's slots are for tokens another replica computed (a P/D decode replica's prompt,
        `sim.kernel.disaggregation`), cached once loaded as host hits are."""
        self.register_prefix(group)
        target = group.prefill_target
        cached = self.cached_tokens(group.hashes, target)
        first = self.new_seq(group)
        chunk = chunk_of(target - cached)
        options = self._own(group) if chunk and not remote else {**self._own(group), "lookup_tokens": target,
                                                   "delay_cache_blocks": True, "reserved_blocks": reserved_blocks}
        if lookahead_slots:  # a padded verification's placeholder drafts, a drafter's lookahead (`spec_decode`)
            options["lookahead_slots"] = lookahead_slots
        admission = self._alloc.admit(first, cached + chunk, final_tokens=group.final_tokens,
                                      max_total_tokens=group.max_total, block_hashes=group.hashes,
                                      full_tokens=full_tokens, apply_watermark=apply_watermark, **options)
        if admission is None:
            self._unplace(group, admitted=False)
        return admission

    def grow_with_drafts(self, seq_id: int, num_tokens: int, drafts: int, *, chunk: bool = False):
        """`grow` (``chunk``: `grow_chunk`) plus slots held for ``drafts`` speculative tokens or a drafter's
        lookahead after them (`PagedAllocator.grow_with_drafts`: vLLM's paged KV cache manager only)."""
        return self._alloc.grow_with_drafts(seq_id, num_tokens, drafts, chunk=chunk)

    def never_fits_tokens(self, prompt: int, tokens: int) -> str | None:
        """Why one sequence that must at some point hold ``tokens`` slots could not run even alone, or None."""
        return self._alloc.never_fits(prompt, final_tokens=tokens, max_total_tokens=tokens)

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks that hold ``num_tokens`` tokens of one sequence."""
        return -(-num_tokens // self.block_size)

    def held_blocks(self, seq_id: int) -> int:
        """Blocks sequence ``seq_id`` holds (its block table's length)."""
        return len(self._alloc.block_table(seq_id))

    @property
    def held_stores(self):
        """The write-through host tier, whose stores a step holds back until it is planned (vLLM stores a step's
        blocks after it schedules, so an admission's lookup sees the host as the step found it); None without."""
        tier = self.host_tier
        return tier if tier is not None and tier.write_through else None

    def loaded_fits(self, group: SequenceGroup, full_tokens: int, *, apply_watermark: bool) -> bool:
        """Whether a group whose host hits were loaded into the blocks it holds could hold ``full_tokens``
        (its whole sequence under ``scheduler_reserve_full_isl``, or its first chunk beside the watermark, tested
        when it is scheduled: `PagedAllocator.held_sequence_fits`)."""
        return self._alloc.held_sequence_fits(group.seq_ids[0], full_tokens, apply_watermark=apply_watermark)

    def cache_loaded(self, group: SequenceGroup) -> None:
        """Cache the blocks a group's host hits were loaded into, now that the load is done (vLLM caches them
        then, not when it allocates them: another request must not hit a block before its KV is in)."""
        self._alloc.cache_blocks(group.seq_ids[0])

    def _unplace(self, group: SequenceGroup, *, admitted: bool) -> None:
        """Undo a placement that failed: free its sequences as a preemption frees them (``admitted``: the
        allocator holds them), else forget their ids, and hand the ids out again (`new_seq`)."""
        first = group.seq_ids[0]
        for seq_id in group.seq_ids:
            if admitted:
                self.free(seq_id)
            else:
                del self.owner[seq_id]
        self._next_seq = first
        group.seq_ids = []

    def _own(self, group: SequenceGroup) -> dict[str, int]:
        """``own_from`` for `admit`, where the allocator takes it (``knows_own_hashes``: it parks own blocks, or
        tells a fill of a block others may carry from one of a request's own); ``prompt_tokens`` and
        ``request_tokens`` where it takes them (``knows_prompt``)."""
        if self._alloc.knows_prompt:
            return {"prompt_tokens": group.prompt, "request_tokens": group.prefill_target}
        return {"own_from": group.own_from} if self.knows_own else {}

    def register_prefix(self, group: SequenceGroup) -> None:
        """Shared prefixes (a prefix group) are pinned once with allocators that share them (paged-cow)."""
        if not self.shares_prefixes or not group.prefix_blocks or group.prefix_group is None:
            return
        if group.prefix_group not in self.registered_prefixes and \
                self._alloc.register_prefix(group.hashes[:group.prefix_blocks]) is not None:
            self.registered_prefixes.add(group.prefix_group)
