"""A fleet of replicas behind a router, in one discrete-event simulation.

Each replica has its own scheduler, allocator and cost model (`sim.kernel.replica.build_replica`), its own step rows
and memory integrals, and an inbox of requests routed to it. One SimPy environment runs one engine process
per replica and, when the router reads the replicas' state, an arrival process that routes each request at
its arrival time. A replica's engine loop is the single engine's (`sim.kernel.engine.Engine`): deliver what is due,
plan a step or a fast-forwarded decode run (`sim.kernel.fast_forward`), record a row, let its duration pass.

What the router sees at time ``t``: every replica as it stands at the end of the step (or run) in flight at
``t`` (the scheduler applies a step's results when it is planned, as in the single engine), before anything
planned at ``t``, plus the requests routed to it so far. For that state to be the same with and without the
decode fast-forward, a replica's decode run ends at the first step starting at or after the fleet's next
arrival, wherever that arrival goes: a run cut by every arrival, the price of a router that reads state.
A router that does not (round-robin, random) routes every request before the run (the same choices, in the
same order) and each replica then runs exactly as a single replica on its share of the trace; as nothing
looks at it mid-way, it keeps its own clock through a busy period and SimPy sees only its busy periods and
idle gaps, as with the single engine. A state-reading router needs one SimPy timeout per row. ``dp-lb`` reads
the replicas' queues as vLLM's DP coordinator last published them (`sim.kernel.dp_coordinator`), which each
replica feeds at the top of its loop (`_report`: after its step, then after taking in requests), once per API
server, each request through the one it reached (`sim.kernel.api_servers`). With such
independent replicas, `sim.kernel.fleet_parallel` runs groups of them in worker processes (``--workers``).

Arrivals released by requests leaving (closed-loop users, session turns with a think time) are routed at their
times too, whichever replica the request before them ran on: such a fleet always routes at arrival time, and a
decode run also ends where another replica could release an arrival it does not know yet (`_next_time`).

A mixture of experts' data-parallel ranks (``--data-parallel-size`` > 1) do not keep their own clocks: one
process steps them all together (`sim.kernel.lockstep`), routing the arrivals itself at each common step.

Per-request results share one set of arrays (each request lives on one replica; a fanned-out request's children
are requests here, which ``dp-lb`` may send to different replicas); the summary is built by
`sim.kernel.fleet_summary`.
"""

from __future__ import annotations

import time

import numpy as np
import simpy

from sim.kernel.api_servers import APIServers, front_rng
from sim.kernel.arrivals import ARRIVAL_TIE_S, ArrivalSource, first_arrival_s
from sim.kernel.config import SimConfig
from sim.kernel.data_parallel import steps_in_lockstep
from sim.kernel.dp_coordinator import DPCoordinator
from sim.kernel.engine import (
    StepWatch,
    catch_up,
    empty_step,
    record_idle,
    record_snapshot,
    run_until,
    take_step,
)
from sim.kernel.fleet_replica import Replica
from sim.kernel.lockstep import lockstep
from sim.kernel.metrics import Recorder
from sim.kernel.parallel_sampling import as_run
from sim.kernel.replica import SimResult, resolve_capacity, snapshot_count, summary_extra
from sim.kernel.routers import make_router
from sim.kernel.snapshot_schedule import SnapshotSchedule
from sim.kernel.spec_decode import check_spec_run


class Fleet:
    """N replicas, a router and the arrivals, run in one SimPy environment."""

    def __init__(self, config: SimConfig, workload, *, progress=None) -> None:
        self.config = config
        self.cap = resolve_capacity(config)
        self.model, self.gpu = self.cap.model, self.cap.gpu
        self.size = len(workload)
        self.rec = Recorder(self.size)
        self.replicas = [Replica(r, config, self.model, self.gpu, self.cap.kv_tokens, self.rec)
                         for r in range(config.replicas)]
        self.start = first_arrival_s(workload)
        for replica in self.replicas:
            replica.end_s = replica.busy_until = self.start
        # the latest request rejected on arrival by the router's replica: the run's window reaches it, as the
        # single engine's does (a rejection at routing moves no replica's clock)
        self.rejected_until = self.start
        spec = self.replicas[0].sched.spec
        self.source = ArrivalSource.for_memory(workload, self.replicas[0].memory, start_s=self.start,
                                               lookahead_hashes=spec is not None and spec.hash_lookahead() > 0)
        for replica in self.replicas:
            replica.rec.on_done = self._on_done
        # arrivals released by requests leaving (closed loop, session turns with a think time) come from every
        # replica's completions, so routing follows the fleet's clock whatever the router reads
        self.released = self.source.released_arrivals
        self.think_s = self.source.min_think_s - ARRIVAL_TIE_S  # a release's least delay, less its rounding
        self.release_wake: simpy.Event | None = None  # set while the arrivals process waits for releases
        # a mixture of experts' data-parallel ranks share one clock (`sim.kernel.lockstep`): one process runs them
        self.lockstep = steps_in_lockstep(config, self.model)
        # vLLM's balancer reads its DP coordinator's published counts, which the replicas feed (`_report`)
        self.coordinator = (DPCoordinator(config.replicas, self.start, wave_coordination=self.lockstep,
                                          clients=config.api_servers) if config.router == "dp-lb" else None)
        # its API servers (`sim.kernel.api_servers`), which break ties from a stream of their own
        self.front = (APIServers(config.api_servers, front_rng(config.seed), self.size, self.source.rows)
                      if self.coordinator is not None else None)
        seed_seq = np.random.SeedSequence(config.seed).spawn(1)[0]
        self.router = make_router(config.router, rng=np.random.default_rng(seed_seq),
                                  load_weight=config.router_load_weight,
                                  kv_overlap_score_weight=config.router_kv_overlap_score_weight,
                                  sessions=workload.session_id if getattr(workload, "has_sessions", False) else None,
                                  coordinator=self.coordinator, api_servers=self.front)
        self.routed = 0  # arrivals routed so far (in arrival order; released turns need not be in row order)
        self.replica_of = np.full(self.size, -1, np.int64)
        # routed at arrival time (else all ahead): a router that reads state, or arrivals known only as they come
        self.observed = self.released or (config.replicas > 1 and self.router.needs_state)
        self.coupled = self.observed and config.replicas > 1  # replicas in step with the router's clock
        self.num_snapshots = snapshot_count(config, self.replicas[0].memory.breakdown().capacity, config.replicas)
        self.workload = workload
        self.progress = progress
        self.env = simpy.Environment(initial_time=self.start)
        self.wave = None  # the lock-step ranks' `Wave`, once they run

    def run(self) -> float:
        """Run to the end of the workload; returns the simulated end time."""
        if not self.observed:
            self.route_ahead()
        elif not self.lockstep:  # lock-step ranks route their arrivals themselves, at each common step
            self.env.process(self._arrivals())
        return self.simulate(self.replicas)

    def route_ahead(self) -> None:
        """Route every request now, in arrival order: for a router that reads no state (open loop)."""
        self._route_due(np.inf)

    def simulate(self, replicas: list[Replica]) -> float:
        """Run ``replicas`` (all of them, or the group a worker of `sim.kernel.fleet_parallel` runs, their
        requests already in their inboxes) to the end; returns their latest end time."""
        if self.lockstep:
            engines = [self.env.process(lockstep(self))]
        else:
            engines = [self.env.process(self._engine(r)) for r in replicas]
        if self.size:
            self.env.run(until=simpy.AllOf(self.env, engines))
        return max(max((r.end_s for r in replicas), default=self.start), self.rejected_until)

    # -- routing ----------------------------------------------------------------------------------------
    def _route(self, t: float, i: int) -> None:
        group = self.source.make_group(i, t) if self.observed else None
        # a fanned-out request's children go where its first went (one routing each), unless the router is vLLM's
        # own front end, which routes every child (`sim.kernel.routers`, ``routes_children``)
        rows = self.source.rows
        if rows is not None and i and rows[i] == rows[i - 1] and not self.router.routes_children:
            chosen = int(self.replica_of[i - 1])
        else:
            chosen = self.router.choose(group, self.replicas) if len(self.replicas) > 1 else 0
        if not 0 <= chosen < len(self.replicas):
            raise RuntimeError(f"router {self.config.router} chose replica {chosen} of {len(self.replicas)}")
        self.routed += 1
        self.replica_of[i] = chosen
        replica = self.replicas[chosen]
        if self.front is not None:  # dp-lb's clients count what each routed until its output comes back
            replica.routed(int(self.front.client_of[i]))
        if group is not None and (reason := replica.sched.groups.never_runs(group)) is not None:
            # rejected on arrival, as the single engine does: now, so that what it releases is known now
            replica.sched.groups.reject(group, reason, t)
            replica.delivered += 1
            self.rejected_until = max(self.rejected_until, t)
            return
        replica.inbox.append(i)
        if group is not None:
            replica.groups[i] = group
        if replica.wake is not None and not replica.wake.triggered:
            replica.wake.succeed()
            replica.busy_until = self.env.now  # it plans now, though SimPy may resume other replicas first

    def _route_due(self, now: float) -> None:
        """Route every arrival due at or before ``now``, before any replica plans a step at ``now``."""
        while (due := self.source.pop_due(now)) is not None:
            self._route(*due)

    def _arrivals(self):
        """Route each request at its arrival time (a replica reaching that time first routes it itself). An
        arrival released by a request leaving becomes known when a replica plans that request's last step
        (`_on_done`), which wakes this process if it waits for a later one or for none."""
        env = self.env
        while self.routed < self.size:
            t = self.source.next_time()
            if t is None or t > env.now:
                wait = env.event() if self.released else None
                self.release_wake = wait
                if t is None:
                    yield wait
                else:
                    timeout = env.timeout(t - env.now)
                    yield timeout if wait is None else timeout | wait
                self.release_wake = None
            self._route_due(env.now)
        for replica in self.replicas:  # nothing more will come: idle replicas stop
            if replica.wake is not None and not replica.wake.triggered:
                replica.wake.succeed()

    def _on_done(self, t: float, index: int) -> None:
        """A request left at ``t`` (`Recorder.on_done`): release what waits for it. With other replicas, what
        a request leaving at this instant releases (a rejection, without think time) arrives just after it
        (``2 * ARRIVAL_TIE_S``), once every replica has planned its step at this instant: else which of them
        saw it would depend on the order SimPy resumes them in, which differs between fast-forward and step
        by step."""
        not_before = self.env.now + 2 * ARRIVAL_TIE_S if len(self.replicas) > 1 else -np.inf
        self.source.on_done(t, index, not_before)
        if self.front is not None:  # dp-lb's client counts it in flight until its output comes back at t
            client = int(self.front.client_of[index])
            self.replicas[self.replica_of[index]].leaves_at(t, client)
            self.front.leaves(t, index)  # and its connection closes then (its request's last child's)
        if self.release_wake is not None and not self.release_wake.triggered:
            self.release_wake.succeed()

    def _next_time(self, replica: Replica) -> float | None:
        """The next arrival that could reach ``replica``: its own (choices made ahead) or the fleet's. With
        released arrivals, also the earliest one another replica could still release: a request that
        replica finishes in a step it has not planned yet (after the row it has in flight), plus the
        shortest think time; ``replica``'s own completions end its runs anyway."""
        if not self.observed:
            return float(self.source.arrival_s[replica.inbox[0]]) if replica.inbox else None
        t = self.source.next_time()
        if self.released:
            bound = min((r.busy_until for r in self.replicas if r is not replica), default=np.inf) + self.think_s
            if bound < np.inf and (t is None or bound < t):
                t = bound
        return t

    def _report(self, replica: Replica, now: float, step: int = 0) -> None:
        """``replica``'s counts to the DP coordinator at ``now`` (`sim.kernel.dp_coordinator`), if there is one;
        ``step``: a lock-step rank's step stamp."""
        if self.coordinator is not None:
            replica.report_counts(self.coordinator, now, step)

    def _deliver(self, replica: Replica, now: float) -> None:
        inbox, sched, arrival_s = replica.inbox, replica.sched, self.source.arrival_s
        while inbox and arrival_s[inbox[0]] <= now:
            i = inbox.popleft()
            t = float(arrival_s[i])
            group = replica.groups.pop(i, None) or self.source.make_group(i, t)
            replica.delivered += 1
            sched.add(group, t, self.source.samples_of(i))

    # -- one replica's engine loop (`sim.kernel.engine.Engine._engine`) ----------------------------------------
    def _engine(self, replica: Replica):
        """The replica's rows (`_rows`); then, if moments of its snapshots are still to come, they fall while it
        stays idle to the fleet's end, not known yet: its pool is kept (``final_map``) for
        `fleet_summary.fleet_result` to record with the idle row that holds it to that end, at the row's start
        (`fleet_summary.idle_until`). A replica idle across every moment (its last request done before them, or
        none at all) still has a map, of its idle pool."""
        snapshots = SnapshotSchedule.for_workload(self.num_snapshots, self.workload, self.start, self.released)
        yield from self._rows(replica, snapshots)
        if snapshots.left:
            replica.final_map = replica.memory.snapshot({}, False)

    def _rows(self, replica: Replica, snapshots: SnapshotSchedule):
        env, sched, cost, rec, memory = self.env, replica.sched, replica.cost, replica.rec, replica.memory
        watch = StepWatch(memory, self.config.debug_invariants, self.progress)
        now = env.now
        while True:
            if self.observed:
                self._route_due(now + ARRIVAL_TIE_S)
            self._report(replica, now)  # vLLM's engine reports after its step, then after taking in requests
            self._deliver(replica, now + ARRIVAL_TIE_S)
            self._report(replica, now)
            snap = snapshots.due(now, self.routed, replica.delivered, replica.delivered - len(sched.live))
            if sched.idle:
                if snap:
                    record_snapshot(sched, rec, now, idle=True)
                replica.end_s = now
                yield from catch_up(env, now)
                b = memory.breakdown(False)
                if self.observed:  # sleep until the router sends something (or nothing more comes)
                    if self.routed >= self.size and not replica.inbox:
                        return
                    replica.wake = env.event()
                    replica.busy_until = np.inf
                    yield replica.wake
                    replica.wake = None
                    if not replica.inbox:
                        return
                    t = env.now
                else:
                    t = self._next_time(replica)
                    if t is None:
                        return
                    yield env.timeout(t - env.now)
                record_idle(rec, b, now, t)
                now = env.now
                continue
            plan = sched.plan_step(now)
            if not sched.stepping:  # everything queued was rejected, waits for its host hits to load, or was preempted
                if snap:
                    record_snapshot(sched, rec, now)
                waited = empty_step(sched, cost, rec, plan, self._next_time(replica), now)
                if waited > now:
                    now = replica.busy_until = waited
                    if self.coupled:  # the router may look at this replica before the wait ends
                        yield from catch_up(env, now)
                continue
            now = replica.busy_until = take_step(sched, cost, rec, plan, now, lambda: run_until(
                self._next_time(replica) if self.coupled or not sched.waiting or sched.waiting.reorders
                else None, snapshots, self.source.time_of, sched.loads.next_ready() if sched.loads else None),
                snap)
            watch.after_step(replica.delivered - len(sched.live))
            if self.coupled:  # the router may look at this replica before the row ends
                yield from catch_up(env, now)


def run_fleet(config: SimConfig, workload, *, progress=None) -> SimResult:
    """Simulate ``workload`` on ``config.replicas`` replicas behind ``config.router``."""
    from sim.kernel.fleet_summary import fleet_result

    wall_start = time.perf_counter()
    workload = as_run(config, workload)
    check_spec_run(config, workload)
    fleet = Fleet(config, workload, progress=progress)
    end = fleet.run()
    if config.debug_invariants:
        for replica in fleet.replicas:
            replica.memory.check_invariants()
    extra = summary_extra(config, workload, fleet.cap, fleet.replicas[0].cost, fleet.replicas[0].memory)
    extra["memory_snapshots"] = fleet.num_snapshots
    if fleet.wave is not None:
        extra |= {"lockstep_steps": fleet.wave.steps, "lockstep_dummy_batches": fleet.wave.dummies}
    result = fleet_result(fleet, workload, end, extra)
    result.summary["wall_time_s"] = time.perf_counter() - wall_start
    return result
