"""The data-parallel ranks of a mixture of experts, stepping in lock-step (`sim.kernel.data_parallel` says why and
cites vLLM's ``DPEngineCoreProc.run_busy_loop``).

Why a loop of its own: a fleet replica (`sim.kernel.fleet.Fleet._rows`) keeps its own clock and fast-forwards
decode runs; lock-step ranks share one clock, each step lasting the slowest rank's. So one SimPy process plans
every rank's step at the same instant ``t`` (each scheduler as it would alone: the same requests routed the same
way get the same decisions, only their times differ), prices each at its own batch (`sim.kernel.engine.
step_seconds`), takes the longest, records every rank's row with that duration and completes every rank's step
at ``t + duration``. A rank that runs no forward pass (no requests, or nothing it could schedule) runs vLLM's
dummy batch of one decode token (`dummy_step_s`), priced alike: its row is a row of no steps and no running
requests lasting the common step, carrying what its plan counted (hits of loads it started, preemptions), so the
steps table still counts only real steps and real tokens while every rank's rows cover the run without gaps;
the summary counts those dummy batches (``lockstep_dummy_batches``) and the common steps (``lockstep_steps``).

What a rank's part costs: its own batch through its own layers (attention, dense and shared experts, KV), and
the whole common step's tokens through the routed experts (`shared_expert_tokens`: every rank's scheduled tokens,
one a dummy batch, summed). vLLM 0.33 gathers every rank's tokens into each GPU's MoE layers: without
``--enable-expert-parallel`` a DP deployment's MoE falls back to "AllGather+ReduceScatter dispatch/combine"
(``fused_moe/all2all_utils.py``, ``maybe_make_prepare_finalize``; ``runner/moe_runner.py``, ``_maybe_dispatch``:
``dispatch_router_logits``), and with it the default ``all2all_backend`` is ``allgather_reducescatter``
(``config/parallel.py``; ``AgRsAll2AllManager.dispatch_router_logits`` all-gathers ``hidden_states`` with
``sizes`` = each rank's token count, ``DPMetadata.num_tokens_across_dp_cpu``, unpadded without CUDA graphs:
``v1/worker/dp_utils.py``); the shared experts run on the rank's own tokens (``shared_experts_input``). Each GPU
then runs all of them through its slice of every expert, or with expert parallelism the tokens routed to its
whole experts: either way its expert FLOPs and the expert weights it touches follow that sum
(`sim.kernel.roofline_cost.StepCostModel.step_time`'s ``expert_tokens``), the same for every rank.

The wave: ranks step while any has requests, checked at a wave's first step and every `DP_SYNC_INTERVAL`-th, so
ranks run dummy batches past their last request up to such a step; then every rank pauses (idle rows) until
the next arrival anywhere starts a new wave. The run ends where the last request leaves (the dummy batches vLLM
would still run up to its next check move no request's time). Every common step is a row on every rank (no
decode run of several steps: a common step lasts the slowest rank's, which the decode run's closed forms do not
sum) and one SimPy timeout; a rank's quiet steps (only decoders, none due to sync, nothing queued) are planned
from its decode set instead of by its scheduler (`sim.kernel.quiet_step`), to the same bytes as planning every
step (``--step-by-step``, whose decoders are also synced every step). Routers read the ranks at each step's
start, where the arrivals since the last one are routed in arrival order, as a fleet's router sees a replica's
state at the end of its step in flight.
"""

from __future__ import annotations

from sim.kernel.arrivals import ARRIVAL_TIE_S
from sim.kernel.data_parallel import DP_SYNC_INTERVAL
from sim.kernel.engine import (
    StepWatch,
    catch_up,
    record_idle,
    record_snapshot,
    step_seconds,
    take_step,
    transfer_time_of,
)
from sim.kernel.quiet_step import QuietRank, take_quiet_step
from sim.kernel.snapshot_schedule import SnapshotSchedule


def dummy_step_s(cost, expert_tokens: int | None = None) -> float:
    """A dummy batch: a forward pass of one decode token (vLLM's ``_dummy_run(1, uniform_decode=True)``) over a
    context of one token, its MoE layers running ``expert_tokens`` (`shared_expert_tokens`)."""
    return cost.step_time(0, 1, 1, expert_tokens=expert_tokens)


def shared_expert_tokens(scheds, plans) -> int:
    """The tokens every GPU's routed experts run in a common step (the module's docstring says why): each rank's
    scheduled tokens (prefill, verified drafts, decode: what `sim.kernel.engine.step_seconds` prices), one where
    it runs a dummy batch instead (`_own_seconds`)."""
    return sum(plan.prefill_tokens + plan.spec_tokens + plan.decode_seqs
               if plan is not None and sched.running and plan.computes else 1
               for sched, plan in zip(scheds, plans, strict=True))


class Wave:
    """vLLM's ``engines_running`` and ``step_counter`` for the whole fleet (every rank holds the same: they are
    all-reduced)."""

    __slots__ = ("running", "counter", "interval", "steps", "dummies")

    def __init__(self, interval: int = DP_SYNC_INTERVAL) -> None:
        self.running = False
        self.counter = 0
        self.interval = interval
        self.steps = self.dummies = 0  # common steps taken, and dummy batches run in them (over all ranks)

    def stepped(self, unfinished: bool) -> None:
        """A common step ended; ``unfinished``: whether any rank still has requests. The ranks check it at the
        wave's first step and every ``interval``-th, else they step on (``_has_global_unfinished_reqs``)."""
        self.steps += 1
        self.counter += 1
        if self.counter == 1 or self.counter % self.interval == 0:
            self.running = unfinished
            if not unfinished:
                self.counter = 0


def lockstep(fleet):
    """The SimPy process of ``fleet``'s ranks (`sim.kernel.fleet.Fleet`), routing its arrivals too."""
    env, replicas, cost = fleet.env, fleet.replicas, fleet.replicas[0].cost
    snapshots = [SnapshotSchedule.for_workload(fleet.num_snapshots, fleet.workload, fleet.start, fleet.released)
                 for _ in replicas]
    watches = [StepWatch(r.memory, fleet.config.debug_invariants, fleet.progress) for r in replicas]
    wave = fleet.wave = Wave()
    ranks = [QuietRank(r.sched) for r in replicas]  # quiet steps planned from the decode set
    dummies: dict[int, float] = {}  # a dummy batch's time by the common step's expert tokens
    now = env.now
    while True:
        yield from catch_up(env, now)  # a rank's completions release arrivals from env.now (`Fleet._on_done`)
        if fleet.observed:
            fleet._route_due(now + ARRIVAL_TIE_S)
        for r in replicas:  # the ranks' reports after the step that ended, then after taking in requests
            fleet._report(r, now, wave.steps - 1)
        for r in replicas:
            fleet._deliver(r, now + ARRIVAL_TIE_S)
            fleet._report(r, now, wave.steps)
        snaps = [s.due(now, fleet.routed, r.delivered, r.delivered - len(r.sched.live))
                 for s, r in zip(snapshots, replicas, strict=True)]
        if all(r.sched.idle for r in replicas):
            t = _next_arrival(fleet)
            if t is None or not wave.running:
                wave.running, wave.counter = False, 0
                for r, snap in zip(replicas, snaps, strict=True):
                    if snap:
                        record_snapshot(r.sched, r.rec, now, idle=True)
                    r.end_s = now
                if t is None:
                    break
                for r in replicas:
                    record_idle(r.rec, r.memory.breakdown(False), now, t)
                now = t
                continue
        wave.running = True
        for r in replicas:  # vLLM's DP engine core paces prefill by the wave's step counter (`PrefillCadence`)
            if r.sched.cadence is not None:
                r.sched.cadence.engine_step = wave.counter
        plans, quiet = _plan(replicas, now, ranks, snaps)
        shared = shared_expert_tokens([r.sched for r in replicas], plans)
        dummy_s = dummies.get(shared)
        if dummy_s is None:
            dummy_s = dummies[shared] = dummy_step_s(cost, shared)
        duration = max(_own_seconds(r.sched, cost, plan, now, dummy_s, shared)
                       for r, plan in zip(replicas, plans, strict=True))
        for r, plan, snap, watch, q, rank in zip(replicas, plans, snaps, watches, quiet, ranks, strict=True):
            sched = r.sched
            if plan is not None and sched.stepping:
                if q:
                    take_quiet_step(sched, r.rec, plan, rank.breakdown(r), now, duration)
                else:
                    take_step(sched, cost, r.rec, plan, now, None, snap, duration)
                watch.after_step(r.delivered - len(sched.live))
                wave.dummies += not plan.computes
                continue
            wave.dummies += 1
            if snap:
                record_snapshot(sched, r.rec, now, idle=plan is None)
            b = rank.breakdown(r) if q else sched.memory.breakdown(sched.waiting_flag())
            record_idle(r.rec, b, now, now + duration, plan, sched.queued)
        now += duration
        for r in replicas:
            r.end_s = r.busy_until = now
        wave.stepped(any(not r.sched.idle for r in replicas))
    for r, s in zip(replicas, snapshots, strict=True):
        if s.left:
            r.final_map = r.memory.snapshot({}, False)


def _plan(replicas, now: float, ranks: list[QuietRank], snaps: list[bool]):
    """Every rank's step at ``now``: its plan (None: idle), and whether the rank is quiet, or idle, with a
    scheduler `QuietRank` may plan (its memory breakdown is then `QuietRank.breakdown`). A quiet step that takes
    no snapshot is planned from the decode set (`QuietRank.plan`), any other by the scheduler."""
    plans, quiet = [], []
    for r, rank, snap in zip(replicas, ranks, snaps, strict=True):
        sched = r.sched
        if sched.idle:
            plans.append(None)
            quiet.append(rank.may)
            continue
        plan = None if snap else rank.plan(sched, now)
        quiet.append(plan is not None)
        if plan is None:
            plan = sched.plan_step(now)
            rank.forget()
        plans.append(plan)
    return plans, quiet


def _own_seconds(sched, cost, plan, now: float, dummy_s: float, expert_tokens: int) -> float:
    """What a rank's part of the common step costs: its step (`step_seconds`, its routed experts running the
    common step's ``expert_tokens``); where it runs no forward pass (no requests, nothing it could run, or an
    async step that computes nothing), a dummy batch (``dummy_s``) after whatever its engine step did: the swaps
    and copies of a step that preempted everything it ran (`transfer_time_of`), an async step's own time
    (`StepCostModel.empty_step_s`)."""
    if plan is None:
        return dummy_s
    if not sched.stepping:
        return dummy_s + transfer_time_of(cost, plan)
    if not plan.computes:  # its own step's transfers, then the dummy batch's forward pass
        return step_seconds(sched, cost, plan, now) + dummy_s
    return step_seconds(sched, cost, plan, now, expert_tokens)


def _next_arrival(fleet) -> float | None:
    """When the next request reaches a rank (None: none will): the fleet's next arrival, routed at its time,
    or the earliest one routed ahead."""
    if fleet.observed:
        return fleet.source.next_time()
    heads = [float(fleet.source.arrival_s[r.inbox[0]]) for r in fleet.replicas if r.inbox]
    return min(heads) if heads else None
