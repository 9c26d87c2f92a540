"""vLLM v1's asynchronous scheduling (``--async-scheduling``): the outputs a step leaves in flight.

vLLM 0.33's engine with ``async_scheduling`` (``EngineCore.step_with_batch_queue``, a queue of two batches, and
the ``AsyncScheduler``) schedules step t + 1 before it processes step t's output. Read from its source
(``vllm/v1/core/sched/async_scheduler.py``, ``scheduler.py``, ``vllm/v1/engine/core.py``) and checked against it
step for step (``tools/vllm_oracle/async_gap.py --write``, ``tests/sim/test_sim_async_scheduling.py``), what that
changes in what the scheduler decides:

- A request whose last token step t computes is finished (its finish time is still the end of step t: kvsim's clock
  is not changed), but it frees its blocks and its ``max_num_seqs`` seat only when step t's output is processed,
  after step t + 1 was scheduled. Meanwhile it stays in ``running`` (counted there, by the long-prefill threshold's
  request count, and as a preemption victim) and is not scheduled: the ``AsyncScheduler``'s output placeholders
  tell it that step t reached ``max_tokens``. Preempting it counts a preemption and frees its blocks then; its
  in-flight output, delivered as stale, still finishes it.
- A decoder's new token is known only once the output that sampled it is processed, so the block that token's
  KV fills is cached a step later than with the synchronous scheduler: by the next allocation for the request
  (``allocate_slots`` caches up to the tokens known) or once the step that computed it is processed. A victim
  preempted before either keeps that block uncached (its in-flight output is stale): freed, it goes to the front
  of the free queue, and the request recomputes it when it comes back (`tail_unknown`).
- A hybrid pool's window groups free by the tokens processed, a step late, and its whole-sequence admission
  check counts two batches in flight (`sim.kernel.replica.build_replica`, `HybridPagedAllocator.begin_step`); a
  prefill that then needs more than the pool while running alone comes back hitting what it cached
  (`comes_back`).
- A session turn may look up the previous turn's generated blocks while it still decodes: a block whose last token
  is in flight is not hashed yet, so the step's admissions miss it (`unknown_tails`, hidden from them).
- With vLLM's offloading connector (a host tier) a request scheduled in the step in flight cannot be preempted
  (its blocks' free is deferred): the running loop stops at it (`pinned`); and a host load is seen done a step
  later, with the output of the step it landed in (`seen_loads`).
- Fan-out children (``n > 1``, `sim.kernel.parallel_sampling`) are ordinary requests here.
- With speculative drafts (`sim.kernel.spec_decode`; ``spec_cases.py --async-scheduling``,
  ``tests/sim/test_sim_async_spec_parity.py``) step t + 1 is scheduled as if step t's verifications accepted all
  their drafts (`SpecDecode.in_flight_rejected`); a request step t finishes only by accepting drafts is scheduled
  in step t + 1 too (`SpecDecode.unsure`, `Scheduler.verify_finished`); a victim's accepted drafts in flight, and
  with lookahead block hashes the token after a block, are not hashed yet (`tail_unknown`).
- Everything else is as the synchronous scheduler: decodes follow each other without a gap (the placeholders
  count as computed), and a preempted request's stale token is still appended, so it recomputes as many tokens.

`InFlight` holds the finished requests whose output is in flight, and what the last step computed for each running
request (what `tail_unknown` and `pinned` need).
"""

from __future__ import annotations

import math

import numpy as np

from sim.kernel.parallel_sampling import fans_out
from sim.kernel.sequence_group import FINISHED, RUNNING, SequenceGroup
from sim.kernel.spec_decode import final_lag


class InFlight:
    """The outputs a scheduler's last step left in flight (``Scheduler.in_flight`` with async scheduling)."""

    __slots__ = ("s", "releasing", "decoded", "joined", "deferred", "started", "pins", "scheduled", "halted",
                 "last_plan_s", "this_plan_s", "preempted_finished", "untold", "freeing_late")

    def __init__(self, scheduler, pins: bool = False) -> None:
        self.s = scheduler
        # vLLM defers freeing the blocks of a request whose step is in flight when a KV connector may load into
        # them (``Scheduler.defer_block_free``: async scheduling with a consumer connector, the offloading one):
        # such a victim is not preempted, the running loop stops (`pinned`)
        self.pins = pins
        self.scheduled: set[int] = set()  # groups the last step computed tokens for (its output is in flight)
        self.halted = False  # the running loop stopped at a pinned victim this step
        self.last_plan_s = self.this_plan_s = -math.inf  # when the step before this one, and this one, were planned
        self.releasing: dict[int, SequenceGroup] = {}  # index -> a finished group holding its blocks and seat
        self.decoded: set[int] = set()  # groups the last step computed a generated token's KV for
        self.joined: set[int] = set()  # groups whose prefill (or recompute) the last step completed
        self.deferred: set[int] = set()  # decoding groups the step being planned gave no token (the budget)
        self.started: dict[int, int] = {}  # group index -> its prefill progress as it was last admitted
        # held finished groups the step being planned preempted (`preempt_finished`): vLLM 0.33's
        # ``_preempt_request`` puts such a request back in the waiting queue (v1/core/sched/scheduler.py:1842,
        # ``self.waiting.prepend_request``) and only its in-flight output, processed after the step is scheduled,
        # finishes it, so the step's waiting count still holds it (`Scheduler.queued`)
        self.preempted_finished = 0
        self.untold: list[tuple[float, int]] = []  # (finish time, index) of finished groups no client heard of yet
        self.freeing_late: list[SequenceGroup] = []  # finished groups off the running list whose blocks wait (`release`)

    @property
    def holds_blocks(self) -> bool:
        """Whether finished groups still hold blocks (`releasing`, `freeing_late`): no decode run starts."""
        return bool(self.releasing or self.freeing_late)

    def hold(self, group: SequenceGroup, end_s: float) -> None:
        """``group`` produced its last token in the step that ended at ``end_s``: finished (reported now, at that
        time), it keeps its blocks and seat until the next step is planned. Its lazily grown decoders tell the
        allocator what they computed (so memory counts it while they are out of the decode set; with drafts not
        the accepted ones past its end, `final_lag`) and leave the set."""
        s = self.s
        group.generated = group.output
        decode, memory = s.decode, s.memory
        for seq_id in group.seq_ids:
            if seq_id in decode:
                lag = decode.pending(seq_id, s.step)
                if s.spec is not None:
                    lag = final_lag(group, lag, memory.num_tokens(seq_id))
                decode.leave(seq_id)
                if lag > 0 and memory.grow(seq_id, lag) is None:
                    raise RuntimeError(f"sequence {seq_id}: its computed tokens outgrew the blocks it holds")
        group.state = FINISHED
        self.started.pop(group.index, None)
        del s.live[group.index]
        if s.queue_limits is not None:
            s.queue_limits.left(group, end_s)
        s.groups.sink.finish(group, end_s, notify=False)
        self.untold.append((end_s, group.index))
        self.releasing[group.index] = group

    def release(self) -> None:
        """The next step is planned: the held groups' outputs are processed, they free their blocks and seats
        (in the order they finished, vLLM's order of the step's scheduled requests). With `pins`, a group the
        step just run scheduled once more (`SpecDecode.unsure`) gives its seat back but keeps its blocks until
        that step's output is processed, at the next release, first of all (vLLM's ``_free_request_blocks``
        defers them while ``last_sched_seq`` is past ``processed_step_seq``; ``_drain_deferred_frees`` returns them
        as the next output is processed, before its finishes)."""
        self.preempted_finished = 0
        s = self.s
        self.free_late()
        if not self.releasing:
            return
        groups = s.groups
        for group in self.releasing.values():
            late = self.frees_late(group)
            groups.stop_running(group, charge=False, finished=True, keep_blocks=late)
            if late:
                s.memory.tell_tier_finished(group)
                self.freeing_late.append(group)
        self.releasing.clear()

    def frees_late(self, group: SequenceGroup) -> bool:
        """Whether a held finished ``group`` keeps its blocks a step more (`release`): the step just run scheduled
        it once more (`Scheduler.verify_finished`) while vLLM defers freeing blocks (`pins`)."""
        return self.pins and group.index in self.s.step_tokens

    def free_late(self) -> None:
        """Free the blocks of the finished groups that kept them for the step in flight (`release`)."""
        for group in self.freeing_late:
            self.s.memory.free_group(group, {}, True, tier_told=True)
        self.freeing_late = []

    def preempt_finished(self, victim: SequenceGroup) -> bool:
        """Preempt ``victim`` if it is a held finished group (True): its blocks go now, the preemption is counted,
        and its stale output still finishes it."""
        if self.releasing.pop(victim.index, None) is None:
            return False
        s = self.s
        s.groups.stop_running(victim, charge=False, finished=True, unknown_tail=self.tail_unknown(victim, False))
        victim.preemptions += 1
        s.groups.num_preemptions += 1
        s.plan.preempted += 1
        s.groups.sink.preemptions[victim.index] = victim.preemptions  # reported finished already
        self.preempted_finished += 1
        return True

    def tail_unknown(self, victim: SequenceGroup, stepped: bool) -> int:
        """The last tokens a decoding ``victim`` preempted now holds (told the allocator) whose blocks vLLM's async
        scheduling has not cached yet (`tail_block_unknown`: its last one). With speculative drafts
        (`sim.kernel.spec_decode`) the drafts its verification in flight accepts too (vLLM appends them only with
        that output, ``_update_request_with_output``, ``v1/core/sched/scheduler.py:2744-2770``), and with a drafter's
        lookahead block hashes (``num_hash_lookahead_tokens``, ``vllm/config/vllm.py:678``: a block is hashed once
        the token after it is known) one token more where this step's allocation or the completed prefill cached
        up to the tokens known (``allocate_slots``' ``num_tokens_to_cache``, ``v1/core/kv_cache_manager.py:621``)."""
        unknown = int(self.tail_block_unknown(victim, stepped))
        spec = self.s.spec
        if spec is not None:
            index = victim.index
            unknown += spec.in_flight_unknown(victim, (stepped and index in self.decoded) or index in self.joined)
        return unknown

    def tail_block_unknown(self, victim: SequenceGroup, stepped: bool) -> bool:
        """Whether the last block the synchronous scheduler would have cached for a decoding ``victim`` preempted
        now is not cached yet: the last token it holds a slot for was sampled by a step whose output is still in
        flight. ``stepped``: the running loop scheduled it this step before it was preempted (it then holds this
        step's slot, cached by that allocation as far as the tokens known: the previous step's output is in flight
        if that step decoded or completed its prefill); else the block its last decode filled, by the previous
        step, is (a completed prefill's last tokens are prompt or recomputed tokens, known)."""
        if stepped:
            return victim.index in self.decoded or victim.index in self.joined
        return victim.index in self.decoded

    def unknown_tails(self) -> dict[int, int]:
        """The sequences whose last blocks the synchronous scheduler has cached by now but vLLM's async scheduling
        has not, each with the tokens it has not hashed yet (`tail_unknown`: its last token in flight, with drafts
        the accepted ones too): the running decoders (a due decoder is synced by now; one not due is not at a
        block's end), as scheduled this step or not (the budget or a halted loop left it out: `deferred`, then it
        holds no slot of this step's and its last block is the one its last decode filled), and the finished groups
        still held."""
        deferred = self.deferred
        tails = {seq_id: unknown for g in self.s.running if g.state == RUNNING and g.decoding
                 and (unknown := self.tail_unknown(g, g.index not in deferred)) for seq_id in g.seq_ids}
        tails.update((seq_id, unknown) for g in self.releasing.values() if (unknown := self.tail_unknown(g, False))
                     for seq_id in g.seq_ids)
        return tails

    def comes_back(self, victim: SequenceGroup) -> bool:
        """Whether ``victim``, a prefilling group preempted while nothing else runs, makes progress when it is
        admitted again, so that it is requeued rather than refused: on a hybrid pool its window group frees by the
        tokens processed, so the chunk after one still in flight can need more than the pool, while the blocks
        that chunk computed are cached (prompt tokens are known) and the request hits them when vLLM admits it
        again. True when prefix caching keeps at least one full block more than it hit when last admitted."""
        memory = self.s.memory
        if not memory.prefix_caching or victim.decoding:
            return False
        bs = memory.block_size
        return victim.prefill_done // bs > self.started.get(victim.index, 0) // bs

    def step_done(self, joiners: list[SequenceGroup]) -> None:
        """The planned step has run: remember which running groups it computed a generated token for (a decoder
        neither deferred nor joining in it) and which completed their prefill (``joiners``)."""
        self.joined = {g.index for g in joiners}
        deferred = self.deferred
        self.decoded = {g.index for g in self.s.running if g.state == RUNNING and g.decoding
                        and g.index not in deferred and g.index not in self.joined}
        self.deferred = set()
        if self.pins:
            self.scheduled = self.decoded | {g.index for g, _ in self.s.plan.chunks}
        self.halted = False

    def hashed_blocks(self) -> dict[int, int]:
        """As a step is planned, the full blocks vLLM has hashed of each sequence the step before sampled a token
        for: those of its tokens known, every one but that token and the drafts its verification accepted (both
        in the output in flight), and with a drafter's lookahead hashes one token fewer (a block is hashed with the
        token after it). A host tier that stores generated blocks stores the rest once they are hashed,
        a step late or more (`RequestTier.hashed_blocks`; vLLM keys a request's stores by its block hashes,
        ``OffloadingConnectorScheduler._build_store_jobs``, which grow as its outputs are processed)."""
        s = self.s
        spec, step, size = s.spec, s.step, s.memory.block_size
        hashed = {}
        for index in self.decoded | self.joined:
            group = s.live.get(index)  # None: finished (its last offer stores what it computed)
            if group is None:
                continue
            known = group.prompt + step - group.base - 1 - (spec.in_flight_accepted(group) if spec else 0)
            if spec is not None:  # a drafter's lookahead hashes: a block is hashed once the token after it is known
                known -= spec.hash_lookahead()
            for seq_id in group.seq_ids:
                hashed[seq_id] = known // size
        return hashed

    def planned(self, now: float) -> None:
        """A step starting at ``now`` is being planned: the outputs of the step before, processed after it is
        scheduled, reach their clients now (`tell_clients`)."""
        self.last_plan_s, self.this_plan_s = self.this_plan_s, now
        self.halted = False
        self.tell_clients()
        tier, spec = self.s.memory.held_stores, self.s.spec
        # it stores generated blocks, or (a drafter's lookahead hashes) any block, as they are hashed
        if tier is not None and (not tier.prompt_only or (spec is not None and spec.hash_lookahead())):
            tier.hashed_blocks = self.hashed_blocks()

    def tell_clients(self) -> None:
        """What the finished groups' clients send next (a closed-loop user's next request, a session's next turn,
        `ArrivalSource.on_done`) is released now, from their finish times: vLLM's engine hands step t's output
        back only after it scheduled step t + 1, so what a request finishing in step t releases with no think time
        reaches step t + 2 at the soonest, not t + 1 as with the synchronous scheduler (`tools/vllm_oracle/
        releases.py`). Called as the step after the finishing one is planned, once it took in its arrivals."""
        on_done = self.s.groups.sink.on_done
        if on_done is not None:
            for end_s, index in self.untold:
                on_done(end_s, index)
        self.untold.clear()

    def seen_loads(self) -> tuple[float, float]:
        """`HostLoads.done`'s arguments for the step being planned: the loads that landed by the start of the
        step planned before, and were started before it. vLLM's worker reports a load done with the output of the
        step it landed in (or, landing sooner, the step that started it), and under async scheduling that output
        is processed after the next step is scheduled: a load a step starts is seen two steps later, not one. A
        decode run ends at the first step starting once a load landed (`sim.kernel.engine.run_until`), so the
        step planned before starts after it landed exactly when the step before this one does."""
        return self.last_plan_s, self.last_plan_s

    def pinned(self, victim: SequenceGroup) -> bool:
        """Whether ``victim`` may not be preempted now: its blocks are pinned (`pins`) while the step before,
        which computed tokens for it, is in flight (vLLM's ``_request_blocks_can_be_freed``: the request's
        ``last_sched_seq`` is past ``processed_step_seq``). vLLM's running loop then stops (``break``): the
        request that needed the blocks and every one after it compute nothing this step, and the waiting ones are
        still tried. Sets `halted`."""
        if self.pins and victim.index in self.scheduled:
            self.halted = True
        return self.halted


def refuse_unmodelled(config, workload) -> None:
    """A ValueError for a workload ``--async-scheduling`` is not checked on: requests sampled ``n > 1`` times as
    one group or searched with beams (their sequences' outputs are not modelled in flight)."""
    if not config.async_scheduling:
        return
    why = []
    if len(workload) and np.any(np.asarray(workload.n) > 1) and not fans_out(config, workload):
        why.append("requests sampled n > 1 times as one group (--parallel-sampling fork)")
    if len(workload) and np.any(np.asarray(workload.beam_width) > 1):
        why.append("beam search (beam_width > 1)")
    if why:
        raise ValueError("--async-scheduling is not modelled with " + ", ".join(why))
