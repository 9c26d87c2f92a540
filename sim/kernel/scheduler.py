"""The serving scheduler: which requests run in the next step, and what the allocator must do for it.

``continuous`` is iteration-level batching as in vLLM v1 (``anchors.md`` section 5): running requests first
(each decoding sequence needs a slot; one that cannot get it preempts the latest admitted group, possibly
itself), then, only if nothing was preempted, admissions in FCFS order while ``max_num_seqs`` sequences and
``max_num_batched_tokens`` last; the first request that cannot be admitted stops admission (head of line). With
``prefill_schedule_interval`` a step may hold every prefill back (`sim.kernel.prefill_cadence`).
``static`` is request-level batching as in FasterTransformer: a batch is admitted only when the previous one
has finished, and its prompts are prefilled in one step.

The scheduler is plain synchronous Python: `plan_step` does the allocator work at the start of a step and
returns a `StepPlan` for the cost model; `complete` applies the step's results once it has run. Decoding
sequences are grown lazily through a `DecodeSet` (see there). Admitting, placing, preempting and finishing
whole groups is the job of a `GroupMechanics` (``sim.kernel.admission``) the scheduler owns as ``groups``; the
scheduler owns the queues (``waiting`` a `WaitingQueue`), the decode set, the beams and the step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from sim.kernel.admission import GroupMechanics
from sim.kernel.async_outputs import InFlight
from sim.kernel.beam import BeamSearch
from sim.kernel.completions import Completions
from sim.kernel.decode_set import DecodeSet
from sim.kernel.group_growth import by_group
from sim.kernel.host_loads import HostLoads
from sim.kernel.livelock import StallWatch
from sim.kernel.mamba_split import MambaSplit
from sim.kernel.memory import KVMemory
from sim.kernel.prefill_cadence import PrefillCadence
from sim.kernel.queue_limits import QueueLimits
from sim.kernel.sequence_group import LOADED, RUNNING, SequenceGroup
from sim.kernel.spec_decode import SpecDecode
from sim.kernel.step_plan import StepPlan
from sim.kernel.waiting_queue import LPM_SORT_LIMIT, WaitingQueue
from sim.kernel.window_context import chunked_sum, clipped_sum


class Scheduler:
    """Queues, the step counter and the step plan; ``groups`` admits, places, preempts and finishes groups."""

    def __init__(self, memory: KVMemory, sink, *, continuous: bool = True, max_num_seqs: int = 256,
                 max_num_active_seqs: int | None = None,
                 max_num_batched_tokens: int = 2048, chunked_prefill: bool = True, preemption: str = "recompute",
                 swap_slots: int = 0, max_model_len: int = 2048, lazy: bool = True,
                 rng: np.random.Generator | None = None, beam_keep_prob: float = 0.8,
                 long_prefill_token_threshold: int = 0, scheduler_reserve_full_isl: bool = True,
                 scheduling_policy: str = "fcfs", lpm_max_queue: int = LPM_SORT_LIMIT,
                 cache_aware_admission_window: int = 0, cache_aware_admission_threshold: float = 0.5,
                 sliding_window: int = 0, load_seconds: Callable[[int], float] | None = None,
                 attention_topk: int = 0, async_scheduling: bool = False, spec: SpecDecode | None = None,
                 attention_chunk_size: int = 0, long_prefill_token_threshold_adaptive: bool = False,
                 prefill_schedule_interval: int = 1, engine_paced_prefill: bool = False,
                 queue_limits: QueueLimits | None = None) -> None:
        self.memory = memory
        self.continuous = continuous
        # the sequences admitted to run at once: vLLM's max_num_active_seqs where given (the runner's max_num_seqs
        # sizes buffers and CUDA graphs, which the clock does not model), named so in a request's rejection
        self.max_num_seqs = max_num_active_seqs or max_num_seqs
        self.seat_limit = "max_num_active_seqs" if max_num_active_seqs else "max_num_seqs"
        self.budget = max_num_batched_tokens if continuous else 1 << 62
        self.chunked = chunked_prefill and continuous
        self.max_num_batched_tokens = max_num_batched_tokens
        self.long_prefill_token_threshold = long_prefill_token_threshold
        self.threshold = 0  # the threshold in force this step (vLLM lifts it when only one request is in)
        self.adaptive_threshold = long_prefill_token_threshold_adaptive  # floored at a fair share of the budget
        # vLLM's --prefill-schedule-interval (`sim.kernel.prefill_cadence`): prefill held to one step in N
        self.cadence = (PrefillCadence(prefill_schedule_interval, engine_paced=engine_paced_prefill)
                        if prefill_schedule_interval > 1 and continuous else None)
        self.queue_limits = queue_limits  # vLLM's API server in front (`sim.kernel.queue_limits`)
        self.priority = scheduling_policy == "priority"
        self.per_chunk = self.chunked and memory.per_chunk_capable
        self.step_tokens: dict[int, int] = {}  # group index -> tokens it was scheduled this step
        self.returned = 0  # budget given back by groups preempted after being scheduled this step
        self.deferred_decoders: list[int] = []  # decoders the budget did not reach this step
        self.deferred_context = 0  # their context
        self.prefilling: list[SequenceGroup] = []  # the running groups this step found prefilling
        self.deferred_window = 0  # their context clipped to the sliding window (a model with windows)
        self.lazy = lazy
        self.beams = BeamSearch(rng if rng is not None else np.random.default_rng(0), beam_keep_prob)
        self.waiting = WaitingQueue(scheduling_policy == "priority", lpm=scheduling_policy == "lpm",
                                    lpm_max_queue=lpm_max_queue, cache_aware_window=cache_aware_admission_window,
                                    cache_aware_threshold=cache_aware_admission_threshold)
        self.running: list[SequenceGroup] = []
        self.running_seqs = 0
        self.live: dict[int, SequenceGroup] = {}
        # the clock's clipped figures: a sliding window's, or a sparse model's top-k keys a query (each bounds
        # the keys a query attends to in the same way: `min(c, W)`), or a chunked-local model's chunk
        self.attention_topk = attention_topk
        self.decode = DecodeSet(lazy, sliding_window or attention_topk or attention_chunk_size,
                                chunked=bool(attention_chunk_size))
        self.completions = Completions()
        self.joiners: list[SequenceGroup] = []
        # sequences whose just-filled last block admissions this step must miss (`plan_step`, `hide_admitted_tail`)
        self.hidden: list[int] = []
        self.step = 0
        self.stall = StallWatch()  # steps without a token, to catch a preemption livelock (`sim.kernel.livelock`)
        self.now = 0.0
        self.memory_blocked = False
        self.plan: StepPlan | None = None
        self.carry: StepPlan | None = None  # the copies and page maps a stopped decode run left unpaid
        self.syncing: tuple[SequenceGroup, int] | None = None  # the group and decoder whose sync is running
        self.seq_id_order = False  # the running loop goes through decoders in seq-id order (decoders-only step)
        # host-tier loads beside the steps (offload_loads async): ``load_seconds(blocks)`` prices one
        self.loads = HostLoads(load_seconds) if load_seconds is not None else None
        if self.loads is not None and memory.host_tier is not None:  # blocks being loaded are pinned (vLLM, SGLang)
            memory.host_tier.pinned = self.loads.being_loaded
        self.skipped_for_loads = False  # the last admission round left a group waiting for a load in flight
        self.deferred: set[SequenceGroup] = set()  # groups deferred for a host load until scheduled (`queued`)
        # vLLM's async scheduling: the outputs the last step left in flight (`sim.kernel.async_outputs`)
        self.in_flight = InFlight(self, pins=memory.host_tier is not None) if async_scheduling else None
        if async_scheduling and memory.held_stores is not None:  # a step's stores are seen written a step late
            memory.held_stores.write_lag = 1
        # vLLM's speculative decoding (ngram drafts; `sim.kernel.spec_decode`): every decoder is synced every step
        self.spec = spec
        # vLLM's block-aligned prefill split for Mamba states (prefix caching on a hybrid Mamba pool)
        self.mamba = (MambaSplit(memory, max_num_batched_tokens, long_prefill_token_threshold)
                      if self.chunked and memory.mamba_align() else None)
        self.groups = GroupMechanics(self, sink, preemption=preemption, swap_slots=swap_slots,
                                     max_model_len=max_model_len,
                                     scheduler_reserve_full_isl=scheduler_reserve_full_isl)

    def add(self, group: SequenceGroup, now: float, samples: int | None = None) -> None:
        """A request arrives: rejected at once if it can never run or its API server turns it away (``samples``:
        the sequences its request occupies, its fanned-out children's too; `QueueLimits.refuses`), else queued."""
        reason = self.groups.never_runs(group)
        if reason is None and self.queue_limits is not None:
            reason = self.queue_limits.refuses(group, now, samples or group.num_seqs)
        if reason is not None:
            self.groups.reject(group, reason, now)
            return
        self.live[group.index] = group
        self.waiting.enqueue(group)

    @property
    def idle(self) -> bool:
        """Nothing to run, load, or (a P/D prefill replica, `sim.kernel.disaggregation`) hold for a pull. Under async
        scheduling, finished requests' blocks that wait for the step in flight (`InFlight.freeing_late`) are freed
        then: with nothing to schedule vLLM's engine processes that step's output at once. A write-through host
        tier then makes the pass of the step vLLM still schedules to report the requests just finished
        (`RequestTier.settle`)."""
        if self.running or self.waiting or self.loads:
            return False
        if self.in_flight is not None:
            self.in_flight.free_late()
        frees_at = self.groups.frees_at
        if frees_at is not None and frees_at(self.now) is not None:
            return False
        if (stores := self.memory.held_stores) is not None:  # the step vLLM still schedules to report them
            stores.settle()
        return True

    @property
    def stepping(self) -> bool:
        """Whether the step planned is taken as a step, whose end processes outputs: something runs, or under async
        scheduling a finished request's blocks wait for the step in flight (`InFlight.freeing_late`)."""
        return bool(self.running) or (self.in_flight is not None and bool(self.in_flight.freeing_late))

    @property
    def queued(self) -> int:
        """A step row's ``waiting``, as vLLM counts ``num_requests_waiting``: the queue, less the groups deferred
        for a host load (loading, loaded but not yet scheduled, or skipped for another's load: vLLM counts them
        apart, ``num_skipped_waiting_reqs``, until they are scheduled), and, under async scheduling, the finished
        groups this step preempted (`InFlight.preempted_finished`)."""
        return len(self.waiting) + (len(self.loads) - len(self.deferred) if self.loads is not None else 0) + (
            self.in_flight.preempted_finished if self.in_flight is not None else 0)

    @property
    def load(self) -> int:
        """Groups running or queued here (loading their host hits included)."""
        return len(self.running) + len(self.waiting) + (len(self.loads) if self.loads else 0)

    @property
    def decoders_only(self) -> bool:
        """Whether every running sequence is a lazily grown decoder: no group is prefilling, no beam search
        steps (the running loop then touches only the due decoders)."""
        return self.running_seqs == self.decode.n and not self.beams.groups

    def pending_prefill(self) -> int:
        """Prompt tokens still to be prefilled by the queued groups and the rest of the running prefills."""
        tokens = sum(g.prefill_remaining for g in self.waiting)
        if not self.decoders_only:  # some running group is prefilling
            tokens += sum(g.prefill_remaining for g in self.running if g.prefilling)
        return tokens

    def row_pending(self) -> dict[int, int]:
        """For a memory map taken with the row of the step just planned: the tokens each sequence holds as that
        row counts them beyond those the allocator was told, its ``lag`` (`sim.kernel.engine.take_step`) per
        sequence, so that the map's states count the row's shares. A lazily grown decoder's since its last sync
        (-1 where synced for this step's token: the row holds the step's slot, not yet its token; likewise a
        decoding beam, which appends it eagerly); none for a joiner or a deferred decoder, which feed no token
        this step (`finish_plan`'s ``lag_offset``); a prompt held whole that no step has computed, negative
        (`unfilled_prompt`)."""
        pending = self.decode.all_pending(self.step)
        for group in self.joiners:
            if not group.beam:
                for seq_id in group.seq_ids:
                    pending[seq_id] += 1
        for seq_id in self.deferred_decoders:
            pending[seq_id] += 1
        for group in self.eager_beams():
            for seq_id in group.seq_ids:
                pending[seq_id] = -1
        for seq_id, tokens in self.unfilled(self.plan).items():
            pending[seq_id] = -tokens
        return pending

    def eager_beams(self) -> list[SequenceGroup]:
        """The decoding beam groups that joined before this step: they append the step's token as it is
        planned (`BeamSearch.step`), outside the decode set."""
        return [g for g in self.running if g.beam and g.decoding and g not in self.joiners]

    def unfilled(self, plan: StepPlan) -> dict[int, int]:
        """`unfilled_prompt` of the running prefills once ``plan``'s chunks are computed (with chunked prefill;
        else every prompt is computed by the step that admits it)."""
        if not self.chunked:
            return {}
        return self.unfilled_prompt(self.prefilling + [g for g, _ in plan.chunks],
                                    {g.index: c for g, c in plan.chunks})

    def unfilled_prompt(self, groups: Iterable[SequenceGroup], chunks: dict[int, int]) -> dict[int, int]:
        """Prompt tokens the memory of each prefilling sequence among ``groups`` holds that no step has
        computed, once the ``chunks`` (group index -> tokens) of the step being planned are. An allocator that
        places a prompt whole (a contiguous slab, vAttention's pages, a group that will fork) holds it from
        admission, while chunked prefill computes it over several steps: those slots are reservation (held, to
        be filled), not token states. vLLM's paged manager allocates chunk by chunk, so holds none (left out)."""
        unfilled: dict[int, int] = {}
        memory = self.memory
        for group in groups:
            if group.prefill_done < group.prefill_target and len(group.seq_ids) == 1:
                seq_id = group.seq_ids[0]
                held = memory.num_tokens(seq_id) - group.prefill_done - chunks.get(group.index, 0)
                if held > 0:
                    unfilled[seq_id] = held
        return unfilled

    def plan_step(self, now: float) -> StepPlan:
        """Do the allocator work of the next step (index ``self.step``) and say what the step computes.

        As vLLM v1: running groups in admission order (each decoder one token, each prefill a chunk of what
        is left of the budget, capped by ``long_prefill_token_threshold``), allocating what each computes and
        preempting when that fails; then admissions into what is left, unless something was preempted. A
        step in which every running sequence is a lazily grown decoder touches only the due ones."""
        # a stopped decode run's syncs (their copies and page maps) are this step's to pay
        plan = self.plan = StepPlan() if self.carry is None else self.carry
        self.carry = None
        if self.in_flight is not None:
            memory = self.memory
            memory.begin_step(self.spec.landed(self) if self.spec is not None and memory.processed_basis else None,
                              self.step)
            self.in_flight.planned(now)
        stores = self.memory.held_stores  # a write-through tier stores the step's blocks once it is planned
        looped = None
        if stores is not None:
            stores.hold_stores(self.step)
            if stores.retries_due:  # failed stores are made again by the step's sequences, in vLLM's order
                looped = list(self.running)
        if self.loads:
            landed = self.loads.done(now) if self.in_flight is None else self.loads.done(*self.in_flight.seen_loads())
            for group in landed:  # back at the head, behind the groups loaded before; cached once admission
                group.state = LOADED  # reaches it (`GroupMechanics._admit_loaded`)
                self.waiting.hold(group)
        if self.mamba is not None:
            self.mamba.begin()
        self.now = now
        # vLLM lifts the threshold when one request is in, counting those holding KV for a host load
        # (``get_request_counts``: ``len(self.waiting) + len(self.kv_holding_waiting)``)
        load = self.load
        self.threshold = self.long_prefill_token_threshold if load > 1 else 0
        if self.threshold and self.adaptive_threshold:  # never below max_num_batched_tokens / requests in
            self.threshold = max(self.threshold, self.max_num_batched_tokens // load)
        self.step_tokens.clear()
        self.returned = 0
        self.deferred_decoders.clear()
        self.deferred_context = self.deferred_window = 0
        self.prefilling = []
        if self.cadence is not None:
            self.cadence.begin(self.running)
        # beam groups re-pick parents and append a token, every step
        beams = self.beams
        if beams.groups:
            for group in [g for g in self.running if g.beam and g.decoding]:
                if group.state == RUNNING:
                    beams.step(group, self.memory, plan, self.groups)
        budget = self.budget - beams.decoders(self.running, self.joiners, self.step)[0]
        # drafts: decoders differ in tokens and budget; a running loop that may stop at a pinned victim
        # (`InFlight.pinned`) walks every group
        decoders_only = (self.decoders_only and self.spec is None
                         and not (self.in_flight is not None and self.in_flight.pins))
        if decoders_only:
            # only decoders, in seq-id order = running order; the budget (>= max_num_seqs) reaches them all
            self.seq_id_order = True
            due = self.decode.pop_due(self.step)
            if self.running_seqs == len(self.running):  # single sequences: each grows alone
                for seq_id in due:
                    self.sync_decoder(seq_id)
            else:
                for group, seq_ids in self.due_groups(due):
                    self.sync_group(group, seq_ids)
            self.seq_id_order = False
            budget -= self.decode.n
        else:
            budget = self.walk_running(budget)
        self.hidden = self.memory.hide_shared_tails(
            self.in_flight.unknown_tails() if self.in_flight else
            dict.fromkeys(self.spec.unhashed_tails(self), 1) if self.spec is not None else {})
        admitted = False
        if not plan.preempted:
            admitted = self.groups.admit_waiting(budget)
            if self.cadence is not None:
                self.cadence.admitted(self.queued)
        if self.hidden:
            self.memory.show_tails(self.hidden)
        if stores is not None:
            if self.spec is not None and self.spec.hash_lookahead():
                stores.hashed_blocks = self.hashed_for_stores(plan, stores.hashed_blocks)
            stores.flush_stores(() if looped is None else self.scheduled_seqs(looped, decoders_only))
        self.finish_plan(plan, admitted)
        return plan

    def hashed_for_stores(self, plan: StepPlan, hashed: dict[int, int]) -> dict[int, int]:
        """With a drafter's lookahead block hashes, the full blocks of each sequence this step offers a host tier
        that have a hash by its stores (vLLM 0.34 keys them by ``block_hashes``, `_calc_num_offloadable_tokens`):
        a block is hashed once the token after it is known, so a prefill chunk reaching the last token its
        request knows, or a decoder's allocation reaching its last sampled token (`SpecDecode.unhashed_tails`),
        leaves its last block for a later offer. Under async scheduling ``hashed`` (`InFlight.hashed_blocks`,
        the decoders' tokens in flight left out) is the start."""
        bs = self.memory.block_size
        if self.in_flight is None:
            hashed = {q: (self.memory.num_tokens(q) - 1) // bs for q in self.spec.unhashed_tails(self)}
        else:  # a decoder the step before did not schedule has no output in flight: it knows every token it feeds
            hashed = dict(hashed)
            for group in self.running:
                if group.index in self.step_tokens and group.decoding:
                    for seq_id in group.seq_ids:
                        hashed.setdefault(seq_id, (self.memory.num_tokens(seq_id) - 1) // bs)
        for group, _ in plan.chunks:  # the tokens a prefill knows are those it computes: the last one's block waits
            for seq_id in group.seq_ids:
                hashed[seq_id] = min(hashed.get(seq_id, 1 << 62), (group.prefill_target - 1) // bs)
        return hashed

    def hide_admitted_tail(self, group: SequenceGroup) -> None:
        """Hide from the admissions after it the block an admitted ``group`` just filled that has no hash yet (a
        drafter's lookahead block hashes: `SpecDecode.admitted_tail`); shown again with the rest (`plan_step`)."""
        if self.spec is not None:
            self.hidden += self.memory.hide_shared_tails(dict.fromkeys(self.spec.admitted_tail(self, group), 1))

    def scheduled_seqs(self, looped: list[SequenceGroup], decoders_only: bool) -> list[int]:
        """The sequences the step planned computes, in vLLM's order (``num_scheduled_tokens``): the running loop's
        (``looped``, the running groups as the step began; all of them in a decoders-only step, else those it
        gave tokens), then the admitted ones."""
        tokens = self.step_tokens
        seqs = [seq_id for g in looped if g.state == RUNNING and (decoders_only or g.index in tokens)
                for seq_id in g.seq_ids]
        before = set(map(id, looped))
        seqs += [seq_id for g in self.running if id(g) not in before for seq_id in g.seq_ids]
        return seqs

    def chunk(self, remaining: int, budget: int) -> int:
        """Prefill tokens a group with ``remaining`` to compute gets this step: with chunked prefill, capped by
        the budget left and by the long-prefill threshold in force."""
        if not self.chunked:
            return remaining
        return min(remaining, budget, self.threshold or remaining)

    def first_chunk(self, group: SequenceGroup, remaining: int, budget: int) -> int:
        """`chunk` for a group being admitted with ``remaining`` tokens to compute, block-aligned for Mamba
        states (`MambaSplit`)."""
        chunk = self.chunk(remaining, budget)
        return chunk if self.mamba is None else self.mamba.split(group, group.prefill_target - remaining, chunk)

    def due_groups(self, due: list[int]) -> list[tuple[SequenceGroup, list[int]]]:
        """A decoders-only step's due decoders by group (`group_growth.by_group`), a group that a decode run
        stopped at this step has synced some of first: the run synced, in this order, the groups before it,
        and step by step its other decoders grow before the groups after it."""
        groups = by_group(due, self.memory.owner)
        decode, step = self.decode, self.step
        for i, (group, _) in enumerate(groups):
            if i and group.num_seqs > 1 and any(decode.pending(s, step) < 0 for s in group.seq_ids):
                groups.insert(0, groups.pop(i))
                break
        return groups

    def sync_group(self, group: SequenceGroup, seq_ids: list[int]) -> None:
        """Sync the due decoders ``seq_ids`` of ``group`` (`sync_decoder`), its growth checked whole first where
        there are several (`Preemption.until_grows`, `sim.kernel.group_growth`): a group preempted for want of
        room grows, copies and swaps out nothing of this step's. The caller reads the group's state after (a
        growth that met a victim vLLM may not preempt leaves it running: `InFlight.pinned`)."""
        if group.state != RUNNING:
            return
        if len(seq_ids) > 1:
            decode, step = self.decode, self.step
            self.syncing = (group, -1)  # none of its decoders grown yet
            grows = self.groups.until_grows(group, [(s, decode.pending(s, step) + 1) for s in seq_ids])
            self.syncing = None
            if not grows:
                return
        for seq_id in seq_ids:
            if not self.sync_decoder(seq_id):
                return

    def sync_decoder(self, seq_id: int, drafts: int = 0) -> bool:
        """Give a due decoder slots for the tokens it computed since its last sync and this step's (and for
        ``drafts`` speculative tokens after them); False if its group was preempted instead (or left running
        ungrown, its growth having met a victim vLLM may not preempt: `InFlight.pinned`)."""
        group = self.memory.owner.get(seq_id)
        if group is None or group.state != RUNNING:
            return False
        decode, step = self.decode, self.step
        added = decode.pending(seq_id, step) + 1
        memory = self.memory
        grow = memory.grow if not drafts else (lambda s, a: memory.grow_with_drafts(s, a, drafts))
        copies = grow(seq_id, added)
        if copies is None:
            self.syncing = (group, seq_id)
            copies = self.groups.until_fits(group, lambda s=seq_id, a=added: grow(s, a))
            self.syncing = None
            if copies is None:
                return False
        self.plan.add_copies(copies)
        decode.resync(seq_id, added, memory.headroom(seq_id), step + 1)
        return True

    def walked(self, group: SequenceGroup, seq_id: int) -> bool:
        """Whether the running loop has passed decoder ``seq_id`` of ``group`` this step, so that step by step
        (where it grows every decoder it passes) it holds this step's slot already: a group it scheduled, and
        while a sync preempts, the decoders before the one syncing in its group, or in seq-id order in a
        decoders-only step. A lazily grown decoder it passed without a sync is told that slot if preempted.
        That loop grows a group's due decoders together (`sync_group`), at its first one (step by step, its
        first sequence), so it has passed another group whose first sequence comes before the syncing one's."""
        if group.index in self.step_tokens:
            return True
        if self.syncing is None:
            return False
        current, at = self.syncing
        if current is group:
            return seq_id < at
        return self.seq_id_order and min(group.seq_ids) < min(current.seq_ids)

    def walk_running(self, budget: int) -> int:
        """vLLM's running loop, in running order; returns the budget left. Decoders the budget cannot reach
        skip the step (`defer`)."""
        due = set(self.decode.pop_due(self.step))
        step_tokens = self.step_tokens
        in_flight = self.in_flight
        for group in list(self.running):
            if group.state != RUNNING or (group.beam and group.decoding):
                if self.spec is not None and in_flight is not None and group.index in self.spec.unsure \
                        and group.index in in_flight.releasing and not in_flight.halted:  # held, not preempted
                    budget -= self.verify_finished(group, budget)  # this step (nor past where vLLM's loop stopped)
                continue
            if in_flight is not None and in_flight.halted:  # vLLM's loop stopped: nothing for the rest
                if group.prefill_done < group.prefill_target:
                    self.prefilling.append(group)
                else:
                    self.defer(group, due)
                continue
            if self.returned:
                budget += self.returned
                self.returned = 0
            if group.prefill_done < group.prefill_target:  # prefilling
                self.prefilling.append(group)
                if budget <= 0:
                    continue
                if self.cadence is not None and self.cadence.deferring:  # held to a step the cadence allows
                    self.cadence.held = True
                    continue
                chunk = self.chunk(group.prefill_target - group.prefill_done, budget)
                if self.mamba is not None:
                    chunk = self.mamba.split(group, group.prefill_done, chunk)
                    if not chunk:  # too little budget for a block-aligned chunk: the loop goes on
                        continue
                if self.per_chunk and group.num_seqs == 1:
                    seq_id = group.seq_ids[0]
                    copies = self.groups.until_fits(group, lambda s=seq_id, c=chunk: self.grow_chunk(s, c))
                    if copies is None:
                        continue
                    self.plan.add_copies(copies)
                budget -= chunk
                step_tokens[group.index] = chunk
                self.groups.schedule_chunk(group, chunk)
                if self.cadence is not None:
                    self.cadence.prefilled = True
                continue
            num_seqs = group.num_seqs
            if budget < num_seqs:
                self.defer(group, due)
                continue
            if self.spec is not None:  # one sequence: its sampled token and its drafts, as the budget reaches
                if self.spec.reaches_model_len(group, self.step):
                    self.defer(group, due)
                else:
                    budget -= self.verify(group, budget, due)
                continue
            if not due.isdisjoint(group.seq_ids):  # most decoders are not due: no sync, no state change
                self.sync_group(group, [seq_id for seq_id in group.seq_ids if seq_id in due])
                if group.state != RUNNING:  # preempted
                    continue
                if in_flight is not None and in_flight.halted:  # its growth met a pinned victim: not preempted
                    self.defer(group, due)
                    continue
            budget -= num_seqs
            step_tokens[group.index] = num_seqs
        return budget + self.returned

    def grow_chunk(self, seq_id: int, chunk: int):
        """Slots for a running prefill's chunk, and a model-based drafter's lookahead slots after it (vLLM's
        ``allocate_slots`` with ``num_lookahead_tokens``, `sim.kernel.spec_decode`)."""
        if self.spec is not None and self.spec.lookahead:
            return self.memory.grow_with_drafts(seq_id, chunk, self.spec.lookahead, chunk=True)
        return self.memory.grow_chunk(seq_id, chunk)

    def verify(self, group: SequenceGroup, budget: int, due: set[int]) -> int:
        """Schedule a decoder with its speculative drafts (`sim.kernel.spec_decode`): slots for its sampled
        token and the drafts the budget, the long-prefill threshold in force and ``max_model_len`` leave; returns
        the budget it took (0 if its group was preempted instead). vLLM's running loop caps every request's
        ``num_new_tokens``, a verification's sampled token and drafts included, by the threshold
        (``if 0 < long_prefill_token_threshold < num_new_tokens``, ``v1/core/sched/scheduler.py``) and schedules
        only the drafts that leaves (``num_scheduled_spec_tokens``)."""
        spec, seq_id = self.spec, group.seq_ids[0]
        drafts = spec.drafts_for(group, self.step, self.room(budget))
        due.discard(seq_id)
        if not self.sync_decoder(seq_id, spec.held(drafts, group)):
            if group.state == RUNNING:  # its growth met a pinned victim (`InFlight.pinned`): not preempted
                self.defer(group, due)
            return 0
        self.step_tokens[group.index] = 1 + drafts
        spec.schedule(group, drafts, group.prompt + self.step - group.base, padded=False)
        return 1 + drafts

    def room(self, budget: int) -> int:
        """Drafts a verification may feed after its sampled token: the budget left, capped by the long-prefill
        threshold in force (`verify`)."""
        return (min(budget, self.threshold) if self.threshold else budget) - 1

    def verify_finished(self, group: SequenceGroup, budget: int) -> int:
        """Under async scheduling, schedule a held finished ``group`` whose step in flight finishes it only by
        accepting drafts (`SpecDecode.unsure`): vLLM's running loop cannot tell that step reached ``max_tokens``
        (``v1/core/sched/scheduler.py:799-813``), so it schedules the request's sampled token and drafts again, and
        ``allocate_slots`` gives them slots past every in-flight draft (``scheduler.py:912-918``; may preempt,
        the request itself included); the step's output is dropped, the request finished
        (``scheduler.py:2327``). Returns the budget it took (0 if not scheduled)."""
        spec, seq_id = self.spec, group.seq_ids[0]
        if budget <= 0 or spec.reaches_model_len(group, self.step):  # vLLM's loop: no budget; no position left
            return 0
        drafts = spec.drafts_for(group, self.step, self.room(budget))
        slots = spec.computed(group, self.step) + 1 + spec.held(drafts) - self.memory.num_tokens(seq_id)
        if self.groups.until_fits(group, lambda: self.memory.grow_with_drafts(seq_id, 0, slots)) is None:
            return 0
        self.step_tokens[group.index] = 1 + drafts
        spec.schedule(group, drafts, group.prompt + self.step - group.base, padded=False)
        return 1 + drafts

    def defer(self, group: SequenceGroup, due: set[int]) -> None:
        """A decoding group the step's budget did not reach computes nothing this step: its decode clock
        and its completion move one step later."""
        decode, step = self.decode, self.step
        # a pool told the steps frees by the tokens processed, which the step after this one sees one more of than
        # a lazily grown decoder's deadline counts (`HybridPagedAllocator._processed`): due then
        due_by = step + 1 if self.memory.step_basis else None
        self.memory.idle(group.seq_ids)
        for seq_id in group.seq_ids:
            self.deferred_context += decode.context_of(seq_id, step)
            decode.defer(seq_id, due_by)
            if decode.windows is not None:
                self.deferred_window += decode.window_of(seq_id, step)
            due.discard(seq_id)
        self.deferred_decoders += group.seq_ids
        if self.in_flight is not None:
            self.in_flight.deferred.add(group.index)
        group.base += 1
        group.epoch += 1
        self.completions.push(group)

    def finish_plan(self, plan: StepPlan, admitted: bool) -> None:
        step, decode = self.step, self.decode
        if plan.chunks:
            plan.chunks = [(g, c) for g, c in plan.chunks if g.state == RUNNING]
        joining = self.joiners
        if joining:
            joining = self.joiners = [g for g in joining if g.state == RUNNING]
        join_seqs = join_context = 0
        for group in joining:
            if not group.beam:
                join_seqs += len(group.seq_ids)
                join_context += len(group.seq_ids) * (group.prompt + step - group.base)
        beam_seqs, beam_context = self.beams.decoders(self.running, self.joiners, step)
        if self.beams.groups:
            # beams that joined this step (their prefill ended in it) append their first token next step
            plan.eager_appended = sum(g.num_seqs for g in self.eager_beams())
        deferred_seqs = len(self.deferred_decoders)
        plan.lag_offset = join_seqs + deferred_seqs - sum(self.unfilled(plan).values())
        plan.decode_seqs = decode.n - join_seqs - deferred_seqs + beam_seqs
        # a decoder attends to the token it feeds this step too (its slot is part of the step's growth)
        decode_context = decode.context(step) + decode.n - join_context - self.deferred_context + beam_context
        prefill_context = prefill_pairs = 0
        for group, chunk in plan.chunks:
            plan.prefill_tokens += chunk
            prefill_context += group.prefill_done + chunk
            prefill_pairs += chunk * group.prefill_done + chunk * (chunk + 1) // 2
        plan.context_tokens = decode_context + prefill_context
        plan.attention_pairs = decode_context + prefill_pairs
        if self.spec is not None:  # the drafts verified: query tokens of the step, each reading its prefix
            plan.spec_tokens, pairs = self.spec.step_figures()
            plan.attention_pairs += pairs
            if self.spec.drafter_layers:
                plan.draft_seqs, plan.draft_context = self.spec.drafter_figures()
        if decode.windows is not None:
            self.window_figures(plan, joining)
        cadence = self.cadence
        if cadence is not None:
            cadence.planned(plan.computes)
        in_flight = self.in_flight  # a running loop that stopped at a pinned victim tries again next step
        plan.can_run = (self.lazy and (in_flight is None or not (in_flight.holds_blocks or in_flight.halted)) and not plan.chunks and not joining and not plan.preempted and not admitted
                        and not plan.swap_blocks and not plan.copies and not plan.copy_slots and not plan.page_maps
                        and not self.beams.groups and not self.skipped_for_loads
                        and not self.waiting.may_reorder_by_cache
                        and not (cadence is not None and cadence.deferring)  # a step that may prefill follows
                        and decode.n > 0 and (not self.waiting or self.memory_blocked
                                              or self.running_seqs >= self.max_num_seqs))

    def window_figures(self, plan: StepPlan, joining: list[SequenceGroup]) -> None:
        """The step's context and attention pairs with every sequence's keys clipped to the model's sliding
        window (what its window layers read), each decoder counted exactly as `finish_plan` counts it; for a
        sparse model, to its top-k keys a query. A prefill chunk's queries then read any of their keys (each
        picks its own top k from its whole prefix), so the chunk reads each key once, at most k a query. On a
        chunked-local model each query reads its own attention chunk's keys so far: the prefill chunk reads
        those from the attention chunk its first query is in."""
        step, decode = self.step, self.decode
        window = decode.windows.window
        chunked = decode.chunked
        context = decode.window_context(step) - self.deferred_window
        for group in joining:
            if not group.beam:
                context -= sum(decode.window_of(seq_id, step) for seq_id in group.seq_ids)
        context += self.beams.window_context(self.running, self.joiners, step, window, chunked)
        pairs = context
        for group, chunk in plan.chunks:
            done = group.prefill_done
            if chunked:
                context += done + chunk - done // window * window
                pairs += chunked_sum(done + 1, done + chunk, window)
                continue
            context += (min(done + chunk, chunk * window) if self.attention_topk
                        else min(done + chunk, window + chunk - 1))
            pairs += clipped_sum(done + 1, done + chunk, window)
        plan.window_context, plan.window_pairs = context, pairs

    def queued_hashes(self) -> set[int]:
        """Every hash a queued request carries: indexing one can lengthen its hit in GPU memory (past the end
        of its hit, or in place of a host hit, which needs a new block), and a block a running sequence holds
        takes no free one, so the request may fit."""
        return {h for group in self.waiting for h in group.hashes}

    def waiting_flag(self) -> bool:
        """Whether queued requests are being refused memory (free slots then count as external fragmentation)."""
        return bool(self.waiting) and (self.memory_blocked or (not self.continuous and bool(self.running)))

    def next_completion(self) -> int | None:
        """The earliest step index at which a running group produces its last token."""
        return self.completions.next_due(self.live)

    def complete(self, num_steps: int, end_s: float) -> None:
        """The planned step (or a run of ``num_steps`` decode steps) has run and ended at ``end_s``. With async
        scheduling the groups the step before finished free their blocks and seats now (the step was planned
        without them), and those this step finishes hold theirs until the next step is planned."""
        plan, in_flight = self.plan, self.in_flight
        if in_flight is not None:
            in_flight.release()
            in_flight.step_done(self.joiners)
        for group, chunk in plan.chunks:
            group.prefill_done += chunk
        for group in self.joiners:
            if group.first_token_s < 0:
                group.first_token_s = end_s
                if self.queue_limits is not None:
                    self.queue_limits.first_token(group, end_s)
        if self.spec is not None:  # drafts accepted (groups move ahead), and the next drafts proposed
            self.spec.step_done(self, self.joiners)
        self.stall.stepped(num_steps, bool(plan.decode_seqs or self.joiners))
        self.joiners = []
        self.step += num_steps
        if self.cadence is not None and num_steps > 1:
            self.cadence.ran_on(num_steps - 1)
        finish = self.groups.finish if in_flight is None else in_flight.hold
        for group in self.completions.pop_before(self.step, self.live, self.running, self.step - num_steps):
            finish(group, end_s)
