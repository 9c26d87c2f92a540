"""The decode fast-forward: a run of pure decode steps advanced in one move, at the grain of real events.

When no prefill is pending, no beam group runs and nothing can be admitted before the next arrival, every
step appends one token to each decoding sequence and nothing else happens, until one of:

- a sequence runs out of headroom (it needs a new block): the allocator is asked *at that step* and the run
  goes on (the memory breakdown is re-read and integrated piecewise), unless there is no room: the run then
  ends before that step, and the scheduler's next step preempts;
- a group produces its last token: the run ends after that step;
- a request arrives while the queue is empty: the run ends before the first step starting at or after it.

Between those sub-events the step durations are linear in the step index, so `StepCostModel.decode_run`
sums them (and their index-weighted sum, which integrates the linearly growing token states exactly) in
O(1). Per sub-event the work is the sequences due there, so a run costs O(events), not O(tokens x batch).
"""

from __future__ import annotations

import math

from sim.cost_model import StepCostModel
from sim.metrics import MemoryIntegral


def run_decode(sched, cost: StepCostModel, integral: MemoryIntegral, waiting: bool, horizon: float) -> tuple[int, float]:
    """Advance the decode run starting at step ``sched.step`` (already planned). Returns (steps, seconds).

    ``horizon``: seconds from the run's start to the next arrival that could change the schedule (inf if
    none). The scheduler's step counter is advanced by `Scheduler.complete`, not here.
    """
    decode, alloc = sched.decode, sched.alloc
    n = decode.n
    running = len(sched.running)
    last = sched.next_completion()
    b = alloc.breakdown(waiting)
    step = sched.step
    total = 0.0
    steps = 0
    copy_time = getattr(cost, "_t_copy_block", 0.0)
    while True:
        deadline = decode.next_deadline()
        end = last + 1 if last is not None else math.inf
        if deadline is not None and deadline < end:
            end = deadline
        k = end - step
        if k == math.inf:
            raise RuntimeError("decode run with no deadline and no completion: the scheduler lost track")
        context = decode.context(step)
        stop = False
        seconds, weighted = cost.decode_run(n, context, k)
        if total + seconds >= horizon:  # the last steps may start at or after the next arrival
            fits = cost.steps_starting_before(n, context, k, horizon - total)
            if fits < k:
                k, stop = fits, True
                seconds, weighted = cost.decode_run(n, context, k)
        integral.add(b, decode.lag(step), seconds, n * weighted, running)
        total += seconds
        step += k
        steps += k
        if stop or (last is not None and step > last) or total >= horizon:
            return steps, total
        due = decode.pop_due(step)
        for i, seq_id in enumerate(due):
            added = decode.pending(seq_id, step) + 1
            copies = alloc.grow(seq_id, added)
            if copies is None:  # out of memory: stop before this step; the scheduler will preempt
                for rest in due[i:]:
                    decode.requeue(rest)
                return steps, total
            if copies:
                extra = len(copies) * copy_time
                integral.add(b, decode.lag(step), extra, 0.0, running)
                total += extra
            decode.resync(seq_id, added, alloc.headroom(seq_id), step + 1)
        b = alloc.breakdown(waiting)
