"""Sequence-group mechanics under the scheduler: admitting the queue's head, placing a group in memory,
starting, preempting (`sim.kernel.preemption`) and finishing it.

`GroupMechanics` is an object the `Scheduler` owns (``scheduler.groups``), not a base class: it moves groups
between the scheduler's queues and charges the step's plan, and owns what only it changes: the swap space,
the preemption and prefix-hit counters, and the sink that hears of finished and rejected groups.

A group is placed, preempted and freed whole. Placement admits its first sequence with the prompt (plus, for
a single sequence being recomputed, the tokens it had generated); a group that had already forked is
re-placed as its ``n`` sequences (fork, then grow each by its generated tokens). A group that forks at its
first token is placed only if the allocator says all ``n`` sequences would fit (`Allocator.group_fits`):
otherwise it would be prefilled, fail to fork and preempt itself, step after step. When an allocator call
finds no room, `until_fits` preempts the latest admitted group, as vLLM does, until the call succeeds or the
group itself was the victim. Preemption either recomputes (free, requeue at the front, prefill prompt and
generated tokens again) or swaps (free, park the slots in a CPU swap space, copy them back before resuming);
a full swap space falls back to recompute. A group preempted while it was the only one running can never
fit and is rejected, so nothing loops forever.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import nullcontext
from itertools import islice

from allocators.base import NO_COPIES, Admission, GroupSwap, PageMap
from sim.kernel.preemption import Preemption
from sim.kernel.prefix_cache_stats import PrefixCacheStats
from sim.kernel.sequence_group import FINISHED, LOADED, LOADING, REJECTED, RUNNING, SWAPPED, SequenceGroup
from sim.kernel.spec_decode import final_lag


class GroupMechanics(Preemption):
    """Places, starts, preempts, requeues, rejects and finishes whole sequence groups for a `Scheduler`."""

    def __init__(self, scheduler, sink, *, preemption: str = "recompute", swap_slots: int = 0,
                 max_model_len: int = 2048, scheduler_reserve_full_isl: bool = True) -> None:
        self.s = scheduler  # its owner, a `sim.kernel.scheduler.Scheduler` (not imported: no circle)
        self.sink = sink  # receives finish(group, t) and reject(group, reason, t)
        self.swap = preemption == "swap"
        self.swap_slots, self.swap_used = swap_slots, 0
        self.swapped: dict[int, GroupSwap] = {}  # swapped group index -> what its swap-out moved, how it shared
        self.max_model_len = max_model_len
        self.reserve_full_isl = scheduler_reserve_full_isl
        self.num_preemptions = 0
        self.cached_prompt_tokens = 0  # prompt tokens admissions found cached (prefix cache or shared prefix)
        self.cached_by_index: dict[int, int] = {}  # the same per request (workload position), hits only
        self.host_prompt_tokens = 0  # the part of cached_prompt_tokens loaded from the host tier
        self.preempted_prompt_tokens = 0  # the part found by requests preempted before (vLLM's preempted_hits)
        self.host_by_index: dict[int, int] = {}  # the same per request
        self.prefix_cache = PrefixCacheStats()  # vLLM's counters of the GPU prefix cache's lookups
        self.external_prefix_cache = PrefixCacheStats()  # and of the host tier's (vLLM's connector's)
        # a P/D fleet's decode replica (`sim.kernel.disaggregation`): the requests whose prompt KV it pulls from a
        # prefill replica at admission (vLLM's NixlConnector, do_remote_prefill)
        self.remote: set[int] = set()
        # a P/D fleet's prefill replica: told of a finished group instead of its blocks being freed (vLLM's
        # request_finished returning delay_free_blocks: they are freed once the decode side has read them)
        self.delay_free = None
        # and when its held blocks could next be freed, given the time now (None: it holds none)
        self.frees_at = None
        self._admitted_from = 0  # with loads beside the steps: where this step's admissions start in `running`
        self._loaded_now: set[int] = set()  # and the groups among them whose hits were loaded (`_admit_loaded`)

    # -- admission ---------------------------------------------------------------------------------------
    def never_runs(self, group: SequenceGroup) -> str | None:
        """Why a request can never run under this configuration, or None."""
        s = self.s
        if group.prompt >= self.max_model_len:  # not one output token fits: vLLM refuses it too
            return (f"prompt of {group.prompt} tokens leaves no room for an output token within max_model_len "
                    f"{self.max_model_len}")
        if group.total_tokens > self.max_model_len:  # only under --over-length reject (cap cuts the output)
            return f"prompt + output = {group.total_tokens} tokens exceeds max_model_len {self.max_model_len}"
        if group.num_seqs > s.max_num_seqs:
            return f"needs {group.num_seqs} sequences but {s.seat_limit} is {s.max_num_seqs}"
        if not s.chunked and s.continuous and group.prompt > s.max_num_batched_tokens:
            return (f"prompt of {group.prompt} tokens exceeds max_num_batched_tokens {s.max_num_batched_tokens} "
                    "with chunked prefill off")
        reason = s.memory.never_fits(group)
        if reason is None and s.spec is not None:  # its last verification holds slots for drafts past its end
            need = s.spec.reach(group.final_tokens)
            reason = s.memory.never_fits_tokens(group.prompt, need)
            if reason is not None:
                reason += (f" (with {s.spec.k} speculative tokens and {s.spec.lookahead} drafter lookahead slots "
                           "past its last output token)")
        return reason

    def prefill_need(self, group: SequenceGroup) -> int:
        """Prefill tokens the group would compute if admitted now (prefix-cache hits excluded)."""
        s = self.s
        if group.state == SWAPPED:
            return group.prefill_remaining
        cached = s.memory.cached_tokens(group.hashes, group.prompt)
        return group.prefill_target - min(cached, group.prefill_target - 1)

    def _spec_padding(self, group: SequenceGroup) -> int:
        """Placeholder drafts a waiting request is padded with (vLLM's ``pad_spec_decode``,
        `sim.kernel.spec_decode`): ``num_speculative_tokens`` where it has one token left to compute after its
        hits, no running prefill was scheduled this step, and a running request was or it has hits; else 0."""
        s = self.s
        if s.spec is None or group.state == SWAPPED:
            return 0
        # a hit of all its tokens but the last: loaded from the host, or looked up as admission will look it up
        computed = group.prefill_target - 1
        if group.state == LOADED:
            if group.prefill_done != computed:
                return 0
        elif min(s.memory.cached_tokens(group.hashes, group.prefill_target), computed) != computed:
            return 0
        elif self._loads_first(group):
            return 0  # its hits load first: vLLM's async-load branch schedules no token, so pads none
        if any(g.index in s.step_tokens for g in s.prefilling) or not (s.step_tokens or computed > 0):
            return 0
        return s.spec.k if s.spec.pads(computed) else 0

    def place_group(self, group: SequenceGroup, budget: int = 1 << 62, padded: int = 0) -> bool:
        """Put a waiting or swapped group's sequences in memory (`KVMemory.place`); False (nothing changed) if
        they do not fit.

        A single sequence about to be prefilled in chunks by a per-chunk allocator (vLLM's paged KV cache
        manager) gets slots only for its prefix hits and first chunk (``budget`` and the long-prefill
        threshold bound it); with ``scheduler_reserve_full_isl`` it is admitted only if its whole current
        sequence (prompt plus any generated tokens) would fit."""
        s = self.s
        plan = s.plan
        if s.per_chunk and group.num_seqs == 1 and group.state != SWAPPED:
            # with loads beside the steps, a request with host hits gets blocks for its hits only, nothing to
            # compute (vLLM's allocate_slots with no new tokens while the load runs)
            remote = group.index in self.remote  # its whole prompt's blocks, filled by a pull from a prefill replica
            start, stop = (0, 0) if remote or not self._loads_apply(group) else self._host_span(group)
            loads = remote or stop > start
            chunk_of = ((lambda remaining: remaining) if remote else (lambda remaining: 0) if loads
                        else (lambda remaining: s.first_chunk(group, remaining, budget)))
            with s.loads.pinning(group.hashes[start:stop]) if stop > start else nullcontext():
                admission = s.memory.place_first_chunk(
                    group, chunk_of, full_tokens=group.prefill_target if self.reserve_full_isl else None,
                    apply_watermark=bool(s.running), reserved_blocks=self._load_reserve() if loads else 0,
                    # none while its hits load: vLLM allocates a drafter's lookahead with the first chunk
                    # (``limit_lookahead_tokens``, `_admit_loaded`)
                    lookahead_slots=0 if loads else padded + (s.spec.lookahead if s.spec is not None else 0),
                    remote=remote)
            if admission is None:
                return False
            if remote:
                self._start_pulling(group, admission)
                return True
            # a hit of the whole prompt (from the host, `Allocator.host_hits_to_end`) recomputes its last token
            group.prefill_done = min(admission.cached_tokens, group.prefill_target - 1)
            self._count_cached(group, group.prefill_done, admission)
            if loads:
                stop = admission.cached_tokens // s.memory.block_size
                self._start_loading(group, group.hashes[stop - admission.host_blocks:stop])
            else:
                self._start_running(group)
            return True
        swap = self.swapped.get(group.index)
        placed = s.memory.place(group, swap.forks if swap is not None else ())
        if placed is None:
            return False
        admission, copies = placed
        if swap is not None:  # copied back in as it went out: what rebuilding its sequences copied came from host
            plan.add_copies(tuple(c for c in copies if type(c) is PageMap))  # (the pages mapped for it, charged)
            plan.swap_blocks += swap.transfers
            plan.swap_slots += swap.slots
            self._release_swap(group)
        else:
            plan.add_copies(copies)
            group.prefill_done = min(admission.cached_tokens, group.prefill_target - 1)
            self._count_cached(group, group.prefill_done, admission)
        self._start_running(group)
        return True

    def _count_cached(self, group: SequenceGroup, cached: int, admission: Admission) -> None:
        """Count an admission's ``cached`` hit tokens, those it loaded from the host tier among them: in the
        totals, per request and in the step being planned; the host loads are charged to the step. ``cached``
        may be a token short of the admission's hit (a whole prompt hit, its last token recomputed): that token
        lies in the last block, which the host gave (vLLM's connector counts it among its hits all the same).
        Records the lookup in vLLM's counters (`sim.kernel.prefix_cache_stats`): with prefix caching, every
        admission looks its tokens up."""
        host = max(0, admission.host_tokens - (admission.cached_tokens - cached))
        gpu = cached - host
        if self.s.memory.prefix_caching:
            preempted = group.preemptions > 0
            self.prefix_cache.record(group.prefill_target, gpu, preempted, self.s.step)
            if self.s.memory.host_tier is not None:
                self.external_prefix_cache.record(group.prefill_target - gpu, admission.host_tokens, preempted,
                                                  self.s.step)
        if cached:
            self.cached_prompt_tokens += cached
            if group.preemptions:
                self.preempted_prompt_tokens += cached
            self.cached_by_index[group.index] = self.cached_by_index.get(group.index, 0) + cached
            plan = self.s.plan
            plan.gpu_hit_tokens += gpu
            if host:
                self.host_prompt_tokens += host
                self.host_by_index[group.index] = self.host_by_index.get(group.index, 0) + host
                plan.host_hit_tokens += host
                blocks = admission.host_blocks
                plan.reload_blocks += blocks
                if self.s.loads is None:  # charged to this step; else loaded beside the steps (`HostLoads`)
                    plan.reload_slots += blocks * self.s.memory.block_size
                    plan.reload_transfers += self.s.memory.reload_transfers(blocks)

    def _loads_apply(self, group: SequenceGroup) -> bool:
        """Whether the group's host hits would load beside the steps: a fresh single sequence, placed a chunk at
        a time (`place_group`), with ``--offload-loads async``."""
        s = self.s
        return s.loads is not None and s.per_chunk and group.num_seqs == 1 and group.state != SWAPPED

    def _loads_first(self, group: SequenceGroup) -> bool:
        """Whether a fresh group would load host hits beside the steps before computing anything (vLLM's async
        load branch: admitted with no token scheduled)."""
        return self._loads_apply(group) and len(range(*self._host_span(group))) > 0

    def _load_reserve(self) -> int:
        """The blocks a request that loads its hits must leave free: those the prefills in flight (loading,
        loaded, or running with prompt left) still need to hold their whole sequences, and with speculative
        decoding each a verification step's more (``1 + num_speculative_tokens + num_lookahead_tokens`` slots),
        plus one such step's blocks for the request itself. vLLM 0.33 admits it only into the free blocks beyond
        them (``_inflight_prefill_reserved_blocks`` + ``_spec_decode_step_blocks``, ``_request_remaining_blocks``),
        as it holds its blocks through the load and cannot be preempted meanwhile."""
        s = self.s
        memory, waiting = s.memory, s.waiting
        step = 1 + s.spec.k + s.spec.lookahead if s.spec is not None else 0
        need = memory.blocks_for(step)
        for g in (*s.loads.groups(), *islice(waiting, waiting.held), *self._running_prefills()):
            need += max(0, memory.blocks_for(g.prefill_target + step) - memory.held_blocks(g.seq_ids[0]))
        return need

    def _running_prefills(self) -> Iterator[SequenceGroup]:
        """The running single sequences vLLM counts as prefills in flight (``_inflight_prefills``): those
        running before this step with prompt left, those admitted this step after a load (added when the load
        started), and the others admitted this step whose first chunk leaves some (it adds only those; a request
        its chunk this step completes leaves the set once the step is scheduled, ``_update_after_schedule``)."""
        s = self.s
        chunks = None
        for i, g in enumerate(s.running):
            if g.num_seqs != 1 or not g.prefilling:
                continue
            if i >= self._admitted_from and g.index not in self._loaded_now:
                if chunks is None:
                    chunks = {group.index: chunk for group, chunk in s.plan.chunks}
                if g.prefill_done + chunks.get(g.index, 0) >= g.prefill_target:
                    continue
            yield g

    def _host_span(self, group: SequenceGroup) -> tuple[int, int]:
        """The blocks of a fresh group's prefix it would find in the host tier now, ``(start, stop)`` (after its
        GPU hits; empty if none)."""
        if not group.hashes:
            return 0, 0
        cached, gpu = self.s.memory.cached_split(group.hashes, group.prefill_target)
        size = self.s.memory.block_size
        return gpu // size, cached // size

    def _load_in_flight(self, group: SequenceGroup) -> bool:
        """Whether a fresh group's host hits include a block another request's load is bringing in, or one the
        host is still writing (`RequestTier.not_ready`): it then waits for that load or write (vLLM's
        offloading connector delays it rather than load a block twice or before it is written)."""
        s = self.s
        stores = s.memory.held_stores
        if not s.loads.being_loaded and (stores is None or not stores.write_lag):
            return False
        start, stop = self._host_span(group)
        if stop <= start:
            return False
        # vLLM defers the request if any block it looked up is not written yet (``HIT_PENDING``)
        return (bool(s.loads.being_loaded) and s.loads.overlaps(group.hashes[start:stop])) or \
            (stores is not None and stores.not_ready(group.hashes[start:stop]))

    def _start_loading(self, group: SequenceGroup, hashes, blocks: int | None = None) -> None:
        """The group holds its hits' blocks and waits, off the queue, for the blocks hashed ``hashes`` (or
        ``blocks`` blocks pulled from another replica) to be loaded."""
        s = self.s
        if group.admitted_s < 0:
            group.admitted_s = s.now
        group.state = LOADING
        group.epoch += 1
        s.deferred.add(group)
        s.loads.start(group, hashes, s.now, blocks)

    def _start_pulling(self, group: SequenceGroup, admission: Admission) -> None:
        """A decode replica's request holds its whole prompt's blocks and waits (WAITING_FOR_REMOTE_KVS) for the
        blocks its local prefix cache does not hold to be pulled from the prefill replica (vLLM's NixlConnector
        ``get_num_new_matched_tokens``: the prompt less the local hit). Once they are in, the scheduler sets
        ``num_computed_tokens`` to the prompt less one token, which it recomputes to sample the first output
        token (``Scheduler._update_waiting_for_remote_kv``). Pulled once: a later preemption recomputes here."""
        s = self.s
        size = s.memory.block_size
        # its local hits (whole blocks, the last token left out) shorten the pull; they save no computing, so
        # cached_prompt_tokens leaves them out, but vLLM's counters record the lookup, as for any admission
        # (`Scheduler.schedule`: record_prefix_cache_stats with the local hit)
        cached = min(admission.cached_tokens, group.prefill_target - 1) // size * size
        if s.memory.prefix_caching:
            self.prefix_cache.record(group.prefill_target, cached, group.preemptions > 0, s.step)
        blocks = -(-group.prefill_target // size) - cached // size
        self.remote.discard(group.index)
        group.prefill_done = group.prefill_target - 1
        self._start_loading(group, (), blocks)

    def _admit_loaded(self, group: SequenceGroup, budget: int) -> tuple[int, int] | None:
        """Schedule a group whose host hits are loaded: cache the blocks they were loaded into, then its first
        chunk, padded as any waiting request with one token left (`_spec_padding`), if memory has room and the
        budget the padding (no preemption, as for any admission); returns the chunk and the placeholder drafts,
        or None (nothing changed but the caching)."""
        s = self.s
        # vLLM caches the loaded blocks only when its waiting loop reaches the request
        # (``_handle_blocked_waiting_request`` -> ``_update_waiting_for_remote_kv``: ``cache_blocks``), after the
        # running loop has cached what this step's chunks compute: a hash both hold is found first in the
        # running request's block (``BlockHashToBlockMap.get_one_block``: the first inserted)
        s.memory.cache_loaded(group)
        padded = self._spec_padding(group)
        if padded and 1 + padded > budget:  # vLLM: rather not schedule it than schedule it unpadded
            return None
        # vLLM schedules it through allocate_slots with full_sequence_must_fit, as any waiting request: with
        # scheduler_reserve_full_isl its whole sequence must fit, not only the first chunk (which a long-prefill
        # threshold or a small budget makes smaller); the chunk's blocks must leave the watermark free, as any
        # waiting or preempted request's while others run
        watermark = bool(s.running)
        if self.reserve_full_isl and not s.memory.loaded_fits(group, group.prefill_target, apply_watermark=watermark):
            return None
        chunk = s.chunk(group.prefill_remaining, budget)
        # a padded verification's placeholders and a drafter's lookahead slots, which vLLM holds back while the
        # load runs (``limit_lookahead_tokens``) and allocates with the first chunk (`place_group`)
        held = padded + (s.spec.lookahead if s.spec is not None else 0)
        if watermark and not s.memory.loaded_fits(group, group.prefill_done + chunk + held, apply_watermark=True):
            return None
        seq_id = group.seq_ids[0]
        more = group.prefill_done + chunk - s.memory.num_tokens(seq_id)  # none when recomputing a held last token
        if held:
            copies = s.memory.grow_with_drafts(seq_id, max(more, 0), held)
        else:
            copies = s.memory.grow_chunk(seq_id, more) if more > 0 else NO_COPIES
        if copies is None:
            return None
        s.plan.add_copies(copies)
        s.waiting.popleft()
        self._start_running(group)
        self._loaded_now.add(group.index)
        return chunk, padded

    def _start_running(self, group: SequenceGroup) -> None:
        s = self.s
        if s.loads is not None:
            s.deferred.discard(group)
        if group.admitted_s < 0:
            group.admitted_s = s.now
        group.state = RUNNING
        group.epoch += 1
        if s.in_flight is not None:
            s.in_flight.started[group.index] = group.prefill_done
        s.running.append(group)
        s.running_seqs += group.num_seqs
        s.beams.groups += group.beam

    def admit_waiting(self, budget: int) -> bool:
        """FCFS (or priority order, or longest cached prefix first), head of line. Returns whether anything
        was admitted; sets `memory_blocked`."""
        s = self.s
        s.memory_blocked = bool(s.waiting)
        if not s.continuous and s.running:
            return False
        if s.waiting.lpm:
            s.waiting.order_by_prefix(s.memory.cached_split, s.memory.block_size, s.memory.touch_prefixes)
        elif s.waiting.cache_aware_window and not (s.cadence is not None and s.cadence.deferring):
            gpu_cached = s.memory.gpu_cached_tokens
            s.waiting.order_cache_aware(s.memory.usage(), lambda g: gpu_cached(g.hashes, g.prefill_target))
        if s.loads is None:
            return self._admit_in_order(budget, None)
        self._admitted_from = len(s.running)  # the running groups admitted this step follow
        self._loaded_now.clear()
        skipped: list[SequenceGroup] = []
        admitted = self._admit_in_order(budget, skipped)
        for group in reversed(skipped):  # back where they were (vLLM's skipped waiting requests)
            s.waiting.requeue(group)
        s.skipped_for_loads = bool(skipped)
        return admitted

    def _admit_in_order(self, budget: int, skipped: list[SequenceGroup] | None) -> bool:
        """`admit_waiting`'s loop; ``skipped`` (with loads beside the steps) collects the groups taken off the
        queue to wait for a load in flight, for the caller to put back."""
        s = self.s
        admitted = False
        while s.waiting and (budget > 0 or not s.continuous):
            group = s.waiting[0]
            if s.running_seqs + group.num_seqs > s.max_num_seqs:
                s.memory_blocked = False
                return admitted
            if group.state == LOADED:  # its host hits are in: its first chunk, into the blocks it holds
                if self._held_by_cadence(group):  # vLLM caches the loaded blocks as its loop reaches them
                    s.memory.cache_loaded(group)
                    return admitted
                scheduled = self._admit_loaded(group, budget)
                if scheduled is None:
                    if s.stepping or s.loads:  # memory frees as they finish, or their loads land
                        return admitted
                    s.waiting.popleft()
                    s.memory.free_group(group, {}, False)
                    self.reject(group, "its loaded prefix and first chunk do not fit beside the blocks the other "
                                       "loaded requests hold, with nothing running", s.now)
                    continue
                admitted = True
                self._note_prefill(group)
                chunk, padded = scheduled
                budget -= chunk + padded
                if padded:
                    s.spec.schedule(group, padded, group.prefill_target, padded=True)
                self.schedule_chunk(group, chunk)
                s.hide_admitted_tail(group)
                continue
            if group.state != SWAPPED:  # tried: its lookup may count as use (SGLang's, before its budget test)
                s.memory.touch_prefixes(((group.hashes, group.prefill_target),))
                if skipped is not None and self._loads_apply(group) and self._load_in_flight(group):
                    skipped.append(s.waiting.popleft())
                    s.deferred.add(group)
                    continue
            if self._held_by_cadence(group):
                return admitted
            if not s.chunked and self.prefill_need(group) > budget:
                s.memory_blocked = False
                return admitted
            if s.mamba is not None and group.state != SWAPPED:  # vLLM: no block-aligned chunk fits, stop admitting
                cached = s.mamba.look_up(group)
                if not s.first_chunk(group, group.prefill_target - cached, budget):
                    s.memory_blocked = False
                    return admitted
            padded = self._spec_padding(group)
            if padded and 1 + padded > budget:  # vLLM: rather not schedule it than schedule it unpadded
                s.memory_blocked = False
                return admitted
            if not self.place_group(group, budget, padded):
                # memory frees as they finish, as loads land, or as the blocks held for pulls are read
                if s.stepping or s.loads or (self.frees_at is not None and self.frees_at(s.now) is not None):
                    return admitted
                s.waiting.popleft()
                self.reject(group, "does not fit in an empty KV pool (its sequences together need more memory "
                                   "than the whole pool has)", s.now)
                continue
            s.waiting.popleft()
            if group.state == LOADING:  # placed; scheduled once its host hits are loaded
                continue
            admitted = True
            self._note_prefill(group)
            chunk = s.first_chunk(group, group.prefill_remaining, budget)  # placing it may have found prefix hits
            budget -= chunk + padded
            if padded:
                s.spec.schedule(group, padded, group.prefill_target, padded=True)
            if group.prefilling:
                self.schedule_chunk(group, chunk)
            else:
                self.start_decode(group, from_prefill=False)
            s.hide_admitted_tail(group)
            if s.plan.preempted:  # starting it preempted someone: memory is short, stop admitting
                s.memory_blocked = bool(s.waiting)
                return admitted
        s.memory_blocked = False
        return admitted

    def _held_by_cadence(self, group: SequenceGroup) -> bool:
        """Whether the prefill cadence holds ``group`` back this step (`sim.kernel.prefill_cadence`), stopping
        admission: a deferring step admits only requests with at most their last token to compute after their
        hits, and starts host-tier loads (vLLM tests ``num_computed_tokens < num_tokens - 1`` after the lookup,
        past the async-load branch)."""
        s = self.s
        if s.cadence is None or not s.cadence.deferring:
            return False
        if group.state in (LOADED, SWAPPED):
            computed = group.prefill_done
        elif group.index in self.remote or self._loads_first(group):
            return False
        else:
            computed = s.memory.cached_tokens(group.hashes, group.prefill_target)
        if computed < group.prefill_target - 1:
            s.cadence.held = True
            return True
        return False

    def _note_prefill(self, group: SequenceGroup) -> None:
        """An admitted ``group`` with prompt to compute restarts the prefill cadence's interval (vLLM's
        ``prefill_admitted``: more than its last token left after its hits)."""
        if self.s.cadence is not None and group.prefill_done < group.prefill_target - 1:
            self.s.cadence.prefilled = True

    # -- running -------------------------------------------------------------------------------------------
    def schedule_chunk(self, group: SequenceGroup, chunk: int) -> None:
        s = self.s
        s.plan.chunks.append((group, chunk))
        if chunk >= group.prefill_remaining:
            self.start_decode(group, from_prefill=True)

    def start_decode(self, group: SequenceGroup, *, from_prefill: bool) -> None:
        """The group produces a token this step: fork its samples or beams if new. As in vLLM v1 the sampled
        token gets no slot now: the next step, which computes it, allocates one. Joins the decode set (or,
        for beams, the eager per-step path)."""
        s = self.s
        memory, plan, step = s.memory, s.plan, s.step
        if not group.forked and group.num_seqs > 1:
            first = group.seq_ids[0]
            for _ in range(group.num_seqs - 1):
                made = self.until_fits(group, lambda: memory.fork(group, first))
                if made is None:
                    return
                plan.add_copies(made)
            group.forked = True
        group.base = step - group.generated
        if from_prefill:
            s.joiners.append(group)
        if not group.beam:
            for seq_id in group.seq_ids:
                s.decode.join(seq_id, memory.num_tokens(seq_id), memory.headroom(seq_id), step + 1)
        s.completions.push(group)

    def stop_running(self, group: SequenceGroup, *, charge: bool = True, finished: bool = False,
                     stepped: Collection[int] = (), parked: set[int] | None = None,
                     unknown_tail: int = 0, keep_blocks: bool = False) -> None:
        """Free every sequence of a running group and take it off the running list (``finished``, or
        preempted): the reverse of the end of `place_group`. ``charge``: the step being planned pays the slots
        a last sync copies (a preemption; a group finishing after its step has run pays nothing).
        ``stepped``: decoders the running loop passed this step (`Scheduler.walked`), told this step's slot
        too where they lag, as step by step they hold it (a block it fills is cached, as in vLLM, whose
        scheduler caches the blocks it allocates before it preempts). ``parked``: gathers the hashes of the
        blocks it held (`KVMemory.free_group`). ``unknown_tail``: with async scheduling, the last tokens it holds
        not known yet, whose blocks are not cached (`sim.kernel.async_outputs.InFlight.tail_unknown`).
        ``keep_blocks``: a finished group keeps its blocks for the caller to free later (`InFlight.release`)."""
        s = self.s
        decode, lags = s.decode, {}
        for seq_id in group.seq_ids:
            if seq_id in decode:
                lag = decode.pending(seq_id, s.step)
                if finished and s.spec is not None:
                    lag = final_lag(group, lag, s.memory.num_tokens(seq_id))
                lags[seq_id] = lag + 1 if lag >= 0 and seq_id in stepped else lag
                decode.leave(seq_id)
        if finished and self.delay_free is not None:  # held until the decode side has read them
            self.delay_free(group, lags)
            copies = ()
        elif keep_blocks:
            copies = ()
        else:
            copies = s.memory.free_group(group, lags, finished, parked, unknown_tail)
        if charge and copies:
            s.plan.add_copies(copies)
        s.running.remove(group)
        s.running_seqs -= group.num_seqs
        if s.spec is not None:
            s.spec.stop(group)
        s.beams.groups -= group.beam

    def reject(self, group: SequenceGroup, reason: str, now: float) -> None:
        s = self.s
        if group.state == SWAPPED:
            self._release_swap(group)
        group.state = REJECTED
        s.deferred.discard(group)
        s.live.pop(group.index, None)
        if s.queue_limits is not None:
            s.queue_limits.left(group, now)
        self.sink.reject(group, reason, now)

    def finish(self, group: SequenceGroup, end_s: float) -> None:
        """A running group produced its last token: free it and report it."""
        group.generated = group.output
        self.stop_running(group, charge=False, finished=True)
        group.state = FINISHED
        del self.s.live[group.index]
        if self.s.queue_limits is not None:
            self.s.queue_limits.left(group, end_s)
        self.sink.finish(group, end_s)
