"""The SimPy engine: an arrivals process and an engine-loop process, at the grain of steps and arrivals.

The engine loop delivers due arrivals at the start of every step, asks the scheduler for the step, prices
it with the cost model, records a row, lets the step's duration pass, then lets the scheduler apply it. A
row is a step or a run of decode steps advanced in one move by `sim.kernel.fast_forward`, never a token. When
nothing is queued or running it records an idle row and sleeps; the arrivals process wakes it when the next
request is due.

SimPy sees each busy period and each idle gap, not each row: while the engine is busy the arrivals process
is parked (the engine picks arrivals up itself at every step), so nothing else could run between two rows,
and the engine keeps the clock itself (``now += duration``, the same addition a SimPy timeout does). Before
it sleeps it hands SimPy the clock with one timeout that lands exactly on ``now`` (`catch_up`).
"""

from __future__ import annotations

import math
from collections.abc import Generator

import simpy

from sim.kernel.arrivals import ARRIVAL_TIE_S
from sim.kernel.fast_forward import run_decode
from sim.kernel.metrics import STEP_FLOAT, Recorder
from sim.kernel.snapshot_schedule import SnapshotSchedule


class Engine:
    """Wires scheduler, cost model, arrival source and recorder into a SimPy environment."""

    def __init__(self, sched, cost, source, recorder: Recorder, *, start_s: float = 0.0,
                 snapshots: SnapshotSchedule | None = None, check_every: int = 0, progress=None) -> None:
        self.sched, self.cost, self.source, self.rec = sched, cost, source, recorder
        self.env = simpy.Environment(initial_time=start_s)
        self.snapshots = snapshots
        self.check_every = check_every
        self.progress = progress
        self.wake: simpy.Event | None = None
        self.idle = self.env.event()

    def run(self) -> float:
        """Run to the end of the workload; returns the simulated end time."""
        # The arrivals process starts first, so it is already waiting on ``self.idle`` if the engine goes idle
        # in its very first iteration (every request due at the start was rejected on arrival).
        self.env.process(self._arrivals())
        engine = self.env.process(self._engine())
        self.env.run(until=engine)
        return self.env.now

    def _arrivals(self):
        """Times the next arrival while the engine sleeps (a busy engine picks arrivals up at each step)."""
        env = self.env
        while True:
            yield self.idle
            t = self.source.next_time()
            if t is not None and t > env.now:
                yield env.timeout(t - env.now)
            self.wake.succeed()

    def _engine(self):
        env, sched, cost, rec, source = self.env, self.sched, self.cost, self.rec, self.source
        memory = sched.memory
        watch = StepWatch(memory, self.check_every, self.progress)
        now = env.now
        while True:
            source.deliver(now + ARRIVAL_TIE_S, sched)
            arrived = source.cursor
            departed = arrived - len(sched.live)
            snap = self.snapshots is not None and self.snapshots.due(now, arrived, arrived, departed)
            if sched.idle:
                if snap:
                    record_snapshot(sched, rec, now, idle=True)
                t = source.next_time()
                yield from catch_up(self.env, now)
                if t is None:
                    close_last_map(rec, memory.breakdown(False), now)
                    return
                record_idle(rec, memory.breakdown(False), now, t)
                self.wake = env.event()
                idle, self.idle = self.idle, env.event()
                idle.succeed()
                yield self.wake
                now = env.now
                continue
            plan = sched.plan_step(now)
            if not sched.stepping:  # everything queued was rejected, waits for its host hits to load, or was preempted
                if snap:
                    record_snapshot(sched, rec, now)
                now = empty_step(sched, cost, rec, plan, source.next_time(), now)
                continue
            now = take_step(sched, cost, rec, plan, now, lambda: run_until(
                source.next_time() if not sched.waiting or sched.waiting.reorders else None,
                self.snapshots, source.time_of, sched.loads.next_ready() if sched.loads else None), snap)
            watch.after_step(source.cursor - len(sched.live))


def record_snapshot(sched, rec, now: float, idle: bool = False) -> None:
    """Record the memory map at ``now``, as the row starting there counts memory: once its step is planned
    (its admissions, prefill chunks and growth allocated), every slot's state counted as the row's shares
    (`Scheduler.row_pending`; free slots external fragmentation while a request waits that memory cannot
    take). ``idle``: nothing runs or waits, and no step was planned (the pool as an idle row holds it).
    Shared by the single engine and every fleet replica."""
    if idle:
        rec.snapshot(now, *sched.memory.snapshot({}, False))
    else:
        rec.snapshot(now, *sched.memory.snapshot(sched.row_pending(), sched.waiting_flag()))


def run_until(t_arrival: float | None, snapshots: SnapshotSchedule | None, arrival_time,
              t_load: float | None = None) -> float | None:
    """The time before which every step of a decode run must start (None: no bound): that of the next arrival
    that could change the schedule (``t_arrival``, None if none; an arrival within `ARRIVAL_TIE_S` of a
    step's start is that step's), of the next host-tier load to land (``t_load``, `HostLoads`: its request is
    scheduled at the next step) and of the next memory snapshot (`SnapshotSchedule.next_moment`, with
    ``arrival_time`` the source's `time_of`), so that a row starts where each falls due, as step by step."""
    if t_load is not None and (t_arrival is None or t_load < t_arrival):
        t_arrival = t_load
    until = None if t_arrival is None else t_arrival - ARRIVAL_TIE_S
    if snapshots is not None:
        t = snapshots.next_moment(arrival_time)
        if t is not None and (until is None or t < until):
            until = t
    return until


def take_step(sched, cost, rec, plan, now: float, until, snapshot: bool = False,
              duration: float | None = None) -> float:
    """Account and complete the step ``plan`` describes, starting at ``now``, and return when it ends. A step
    that only decodes runs on as a run of identical decode steps, every one starting before the time
    ``until()`` gives (None: no bound, `run_until`). ``snapshot``: record the memory map with the row
    (`record_snapshot`). Shared by the single engine and every fleet replica, so both take the same steps.
    ``duration``: what the step lasts where that is not its own price (`step_seconds`): a data-parallel rank
    stepping in lock-step lasts the slowest rank's step (`sim.kernel.lockstep`), and takes it alone, never a run."""
    waiting = sched.waiting_flag()
    running = len(sched.running)
    b = sched.memory.breakdown(waiting)
    lag = sched.decode.lag(sched.step) - plan.eager_appended + plan.lag_offset
    if snapshot:
        record_snapshot(sched, rec, now)
    if plan.can_run and duration is None:
        t_end = until()
        horizon = math.inf if t_end is None else t_end - now
        num_steps, duration = run_decode(sched, cost, rec.memory, waiting, horizon, b)
    else:
        num_steps = 1
        if duration is None:
            duration = step_seconds(sched, cost, plan, now)
        rec.memory.add(b, lag, duration, 0.0, running)
    rec.row(now, duration, num_steps, running, sched.queued, plan, b, lag)
    now += duration
    sched.complete(num_steps, now)
    return now


def step_seconds(sched, cost, plan, now: float, expert_tokens: int | None = None) -> float:
    """What the step ``plan`` describes (not a decode run) costs on its own: `take_step`'s price, and what a
    rank offers its lock-step (`sim.kernel.lockstep`), there with the tokens every rank sends the routed experts
    (``expert_tokens``, `StepCostModel.step_time`). Host-tier loads (reload_*) are charged as swap-ins are."""
    # verified drafts are query tokens of the step, as prefill tokens are (vLLM runs them through the model
    # as scheduled tokens); ngram drafting itself takes no GPU time
    duration = cost.step_time(plan.prefill_tokens + plan.spec_tokens, plan.decode_seqs, plan.context_tokens,
                              plan.copies, plan.swap_blocks + plan.reload_transfers, plan.attention_pairs,
                              copy_slots=plan.copy_slots, swap_slots=plan.swap_slots + plan.reload_slots,
                              prefill_seqs=len(plan.chunks), page_maps=plan.page_maps,
                              window_context=plan.window_context, window_pairs=plan.window_pairs,
                              expert_tokens=expert_tokens)
    if plan.draft_seqs:  # a model-based drafter's passes after the target's (`sim.kernel.spec_decode`)
        spec = sched.spec
        duration += cost.drafter_time(plan.prefill_tokens + plan.spec_tokens + plan.decode_seqs,
                                      plan.attention_pairs, plan.context_tokens, plan.draft_seqs,
                                      plan.draft_context, spec.k, spec.drafter_layers)
    if duration <= 0:
        if sched.in_flight is None or plan.prefill_tokens or plan.decode_seqs:
            raise RuntimeError(f"step at t={now} does no work (scheduler made no progress)")
        # async scheduling: the engine schedules a step that computes nothing while the outputs of the last
        # still hold their requests' seats and blocks (vLLM returns it without running the model)
        duration = cost.empty_step_s()
    return duration


def empty_step(sched, cost, rec, plan, t_arrival: float | None, now: float) -> float:
    """A step ``plan`` left with nothing to run: returns when the engine plans again. While host-tier loads are in
    flight it waits for them (`wait_for_loads`); a step that preempted everything running still takes the time
    of an empty step (`StepCostModel.empty_step_s`; none for the roofline), as vLLM's does, plus that of the
    swap-outs (and copies) it made (`transfer_time_of`), in a row of no steps carrying its preemptions (of no
    duration where an empty step takes none and nothing moved, so that the steps table still counts every
    preemption the summary does); else (everything queued refused) it plans again at once."""
    seconds = cost.empty_step_s()
    moved = transfer_time_of(cost, plan)
    if sched.loads:
        return wait_for_loads(sched, rec, plan, t_arrival, now, seconds, moved)
    if plan.preempted or moved:
        end = now + (seconds + moved)
        record_idle(rec, sched.memory.breakdown(sched.waiting_flag()), now, end, plan, sched.queued)
        return end
    frees_at = sched.groups.frees_at
    if frees_at is not None and (t := frees_at(now)) is not None:
        # a P/D prefill replica holding blocks until decode replicas pull them: vLLM's engine steps on while it
        # does (`sim.kernel.disaggregation`); nothing runs until the first time they could be freed
        # (`sim.kernel.disaggregation.PDFleet._frees_at`) or an arrival
        if t_arrival is not None and t_arrival < t:
            t = t_arrival
        record_idle(rec, sched.memory.breakdown(sched.waiting_flag()), now, t, plan, sched.queued)
        return t
    return now


def transfer_time_of(cost, plan) -> float:
    """Seconds of the transfers ``plan`` made though it runs nothing: the blocks it swapped out (every running
    group preempted by swap, the last refused or, with loads in flight, swapped too), and any copies, page maps
    and sync loads it owes, charged as `take_step` charges them. vLLM v0's scheduler output is not empty while it
    has blocks to swap out or copy, so its engine runs that step, the worker making the swaps and copies before
    it finds no sequence to run. 0 (the cost model not asked) where it moved nothing."""
    if not (plan.swap_slots or plan.swap_blocks or plan.copy_slots or plan.page_maps or plan.reload_slots):
        return 0.0
    return cost.transfer_time(plan.copy_slots, plan.swap_slots + plan.reload_slots,
                              plan.swap_blocks + plan.reload_transfers, plan.page_maps)


def wait_for_loads(sched, rec, plan, t_arrival: float | None, now: float, step_s: float = 0.0,
                   moved_s: float = 0.0) -> float:
    """Nothing runs while host-tier loads are in flight: a row of no steps until the first lands or the next
    request arrives (``t_arrival``), whichever is first; returns that time. The row carries what ``plan`` (the
    step planned at ``now``, which admitted only loading requests, or preempted everything running) counted:
    their hits and the blocks they load, its preemptions and swaps.
    ``step_s``: the time of an engine step that schedules nothing (`StepCostModel.empty_step_s`); if any,
    the engine takes such steps meanwhile, so the row lasts whole steps, at least one, as vLLM's engine sees a
    load done at the end of the step it lands in. ``moved_s``: the transfers the step planned at ``now`` makes
    (`transfer_time_of`): that step lasts them too, and the engine plans again no sooner than it ends."""
    t = sched.loads.next_ready()
    if t_arrival is not None and t_arrival < t:
        t = t_arrival
    if moved_s > 0:
        first = now + (step_s + moved_s)  # the step that swaps; empty steps of ``step_s`` after it, if any
        t = first if t <= first or step_s <= 0 else first + math.ceil((t - first) / step_s - 1e-9) * step_s
    elif step_s > 0:
        t = now + max(1, math.ceil((t - now) / step_s - 1e-9)) * step_s
    record_idle(rec, sched.memory.breakdown(sched.waiting_flag()), now, t, plan, sched.queued)
    return t


def close_last_map(rec, b, end: float) -> None:
    """Give a map taken at a run's last instant ``end`` the step row every other map has, starting at its time:
    where none starts there (the run ends as the map is taken: its last request refused on arrival, or a fleet
    replica stopping at the fleet's end with a map there, `fleet_summary.idle_until`), an idle row of no
    duration, its memory as ``b`` (the idle pool the map shows) counts it. So a table joining maps to rows by time has no map
    without its row; a row of no duration adds nothing to the summary's shares."""
    if rec.snapshots and rec.snapshots[-1][0] == end and (not rec.floats or rec.floats[-len(STEP_FLOAT)] < end):
        record_idle(rec, b, end, end)


def record_idle(rec, b, now: float, until: float, plan=None, waiting: int = 0) -> None:
    """Record the idle row from ``now`` to ``until``: nothing runs, memory stays as ``b`` says; ``plan``, the
    step planned at ``now`` when it admitted only requests that wait for their host loads (its hits counted
    there), and the requests ``waiting`` meanwhile."""
    rec.memory.add(b, 0, until - now, 0.0, 0)
    rec.row(now, until - now, 0, 0, waiting, plan, b, 0)


class StepWatch:
    """What an engine loop does after each busy row: check the allocator's invariants every ``check_every``
    rows (``--debug-invariants``; 0: never) and tell ``progress`` how many more requests are done."""

    __slots__ = ("memory", "check_every", "progress", "rows", "done")

    def __init__(self, memory, check_every: int, progress) -> None:
        self.memory, self.check_every, self.progress = memory, check_every, progress
        self.rows = self.done = 0

    def after_step(self, done: int) -> None:
        """``done``: requests finished or rejected so far."""
        self.rows += 1
        if self.check_every and self.rows % self.check_every == 0:
            self.memory.check_invariants()
        if self.progress is not None and done > self.done:
            self.progress(done - self.done)
            self.done = done


def catch_up(env: simpy.Environment, now: float) -> Generator[simpy.Event, None, None]:
    """Advance SimPy's clock to an engine's ``now`` with one timeout, nudging the delay by ulps so the sum
    SimPy computes (``env.now + delay``) lands exactly on ``now``."""
    if now == env.now:
        return
    delay = now - env.now
    while env.now + delay < now:
        delay = math.nextafter(delay, math.inf)
    while env.now + delay > now:
        delay = math.nextafter(delay, -math.inf)
    yield env.timeout(delay)
