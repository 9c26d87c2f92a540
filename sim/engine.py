"""The SimPy engine: an arrivals process and an engine-loop process, at the grain of steps and arrivals.

SimPy sees one event per engine row (a step, or a run of decode steps advanced in one move by
`sim.fast_forward`) and one per idle gap, never one per token. The engine loop delivers due arrivals at the
start of every step, asks the scheduler for the step, prices it with the cost model, records a row, waits
the step's duration, then lets the scheduler apply it. When nothing is queued or running it records an idle
row and sleeps; the arrivals process wakes it when the next request is due.
"""

from __future__ import annotations

import math

import simpy

from sim.fast_forward import run_decode
from sim.metrics import Recorder


class Engine:
    """Wires scheduler, cost model, arrival source and recorder into a SimPy environment."""

    def __init__(self, sched, cost, source, recorder: Recorder, *, start_s: float = 0.0,
                 snapshot_times: tuple[float, ...] = (), check_every: int = 0, progress=None) -> None:
        self.sched, self.cost, self.source, self.rec = sched, cost, source, recorder
        self.env = simpy.Environment(initial_time=start_s)
        self.snapshot_times = sorted(snapshot_times)
        self.check_every = check_every
        self.progress = progress
        self.wake: simpy.Event | None = None
        self.idle = self.env.event()
        self.rows = 0

    def run(self) -> float:
        """Run to the end of the workload; returns the simulated end time."""
        engine = self.env.process(self._engine())
        self.env.process(self._arrivals())
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
        alloc = sched.alloc
        done_before = 0
        while True:
            now = env.now
            source.deliver(now, sched)
            if self.snapshot_times and now >= self.snapshot_times[0]:
                self._snapshot(now)
            if sched.idle:
                t = source.next_time()
                if t is None:
                    return
                b = alloc.breakdown(False)
                rec.memory.add(b, 0, t - now, 0.0, 0)
                rec.row(now, t - now, 0, 0, 0, None, b, 0)
                self.wake = env.event()
                idle, self.idle = self.idle, env.event()
                idle.succeed()
                yield self.wake
                continue
            plan = sched.plan_step(now)
            if not sched.running:  # everything queued was rejected
                continue
            waiting = sched.waiting_flag()
            running = len(sched.running)
            b = alloc.breakdown(waiting)
            lag = sched.decode.lag(sched.step) - plan.eager_appended
            if plan.can_run:
                t_next = source.next_time() if not sched.waiting else None
                horizon = math.inf if t_next is None else t_next - now
                num_steps, duration = run_decode(sched, cost, rec.memory, waiting, horizon)
            else:
                num_steps = 1
                duration = cost.step_time(plan.prefill_tokens, plan.decode_seqs, plan.context_tokens,
                                          plan.copies, plan.swap_blocks, plan.attention_pairs)
                if duration <= 0:
                    raise RuntimeError(f"step at t={now} does no work (scheduler made no progress)")
                rec.memory.add(b, lag, duration, 0.0, running)
            rec.row(now, duration, num_steps, running, len(sched.waiting), plan, b, lag)
            yield env.timeout(duration)
            sched.complete(num_steps, env.now)
            self.rows += 1
            if self.check_every and self.rows % self.check_every == 0:
                alloc.check_invariants()
            if self.progress is not None:
                done = source.cursor - len(sched.live)
                if done > done_before:
                    self.progress(done - done_before)
                    done_before = done

    def _snapshot(self, now: float) -> None:
        while self.snapshot_times and now >= self.snapshot_times[0]:
            self.snapshot_times.pop(0)
        owners = self.sched.alloc.memory_map()
        request_of_seq = {seq: group.request_id for seq, group in self.sched.owner.items()}
        self.rec.snapshot(now, owners, request_of_seq)
