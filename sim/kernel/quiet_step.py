"""A lock-step rank's quiet step, planned without the scheduler: the data-parallel counterpart of the decode
fast-forward.

Why: lock-step ranks (`sim.kernel.lockstep`) share one clock, each common step lasting the slowest rank's, so a
rank cannot run ahead alone as a single engine's decode run does (`sim.kernel.fast_forward`): every common step is
priced and recorded. But most of a rank's steps are quiet: it decodes the same sequences as in the step before,
one token each, nothing waits, and none of its lazily grown decoders (`sim.kernel.decode_set`) is due to sync (it
has headroom in its last block). `Scheduler.plan_step` would walk its queues only to find that again;
`QuietRank.plan` writes that step's plan from what the decode set holds: ``decode_seqs = n``, and the context
(and attention pairs) ``DecodeSet.context + n``, as `Scheduler.finish_plan` counts them (each decoder reads the
token it feeds). The step is then priced, recorded and completed as a planned one, so a run's tables and summary
are byte for byte those of planning every step (``--step-by-step``, which also turns the lazy decoders off: every
decoder synced every step, as vLLM's scheduler allocates its slot). Rows stay one a common step: a common step's
length is a maximum over the ranks, which the decode run's closed forms (`StepCostModel.decode_run`) do not sum,
and their sums round otherwise than step-by-step additions.

What else a quiet step skips, with the same numbers: `take_quiet_step` records and completes it as
`sim.kernel.engine.take_step` does (no snapshot, no lag offset, nothing queued), and `QuietRank.breakdown` reads a
quiet or idle rank's memory breakdown once while no allocator call can change it (none is made but by a planned
step, a request finishing, or one delivered). What a planned quiet step sets on the scheduler besides its plan is
set here too: `Scheduler.plan` (which `Scheduler.complete` reads), its time, and ``memory_blocked`` (false:
nothing waits). Ranks whose steps plan more than that never take this path (`QuietRank.may`): async scheduling
(outputs in flight), speculative decoding, a host tier (a write-through one holds and flushes stores every
planned step), loads beside the steps, sliding windows and sparse attention (clipped context), hybrid pools
(per-group memory), a P/D prefill replica; nor a step that takes a memory snapshot (its map reads what the
planned step resets, `Scheduler.row_pending`).
"""

from __future__ import annotations

from sim.kernel.step_plan import StepPlan


def plans_quietly(sched) -> bool:
    """Whether ``sched``'s quiet steps may be planned from its decode set (what its configuration adds to
    planning: the module's docstring lists it)."""
    memory = sched.memory
    return (sched.lazy and sched.in_flight is None and sched.spec is None and sched.loads is None
            and sched.decode.windows is None and memory.host_tier is None and not memory.group_names
            and sched.groups.frees_at is None)


class QuietRank:
    """What one lock-step rank keeps between common steps to take its quiet steps: whether it may
    (`plans_quietly`), the plan its quiet steps reuse (only its decode figures are ever set), and its memory
    breakdown with nothing waiting (`KVMemory.breakdown`), read again only where an allocator call may have
    changed it: a planned step (`forget`), a request finishing or delivered (its live and delivered counts move).
    Only quiet and idle steps read it, whose rows count that breakdown."""

    __slots__ = ("may", "quiet", "b", "live", "delivered")

    def __init__(self, sched) -> None:
        self.may = plans_quietly(sched)
        self.quiet = StepPlan()
        self.b = None
        self.live = self.delivered = -1

    def plan(self, sched, now: float) -> StepPlan | None:
        """The plan of ``sched``'s step at ``now`` if the step is quiet (nothing queued, only decoders running,
        beams none, none due to sync), with the scheduler's state set as `Scheduler.plan_step` leaves it; else
        None (the scheduler plans it)."""
        decode = sched.decode
        n = decode.n
        if not self.may or sched.waiting or not n or sched.running_seqs != n or sched.beams.groups:
            return None
        step = sched.step
        deadline = decode.next_deadline()
        if deadline is not None and deadline <= step:
            return None
        plan = sched.plan = self.quiet
        plan.decode_seqs = n
        plan.context_tokens = plan.attention_pairs = decode.context(step) + n
        sched.now = now
        sched.memory_blocked = False
        if sched.cadence is not None:
            sched.cadence.quiet_step()
        return plan

    def breakdown(self, replica):
        """``replica``'s memory breakdown (a `sim.kernel.fleet_replica.Replica`, this rank)."""
        live = len(replica.sched.live)
        if self.b is None or live != self.live or replica.delivered != self.delivered:
            self.b, self.live, self.delivered = replica.memory.breakdown(False), live, replica.delivered
        return self.b

    def forget(self) -> None:
        """A step was planned: its allocator calls may have changed the breakdown."""
        self.b = None


def take_quiet_step(sched, rec, plan: StepPlan, b, now: float, duration: float) -> None:
    """Record and complete the quiet step ``plan`` (`QuietRank.plan`) starting at ``now`` and lasting
    ``duration``, memory as ``b`` (`QuietRank.breakdown`): `sim.kernel.engine.take_step`'s row, integral and
    completion, whose snapshot, lag offset and queue a quiet step has none of."""
    lag = sched.decode.lag(sched.step)
    running = len(sched.running)
    rec.memory.add(b, lag, duration, 0.0, running)
    rec.row(now, duration, 1, running, 0, plan, b, lag)
    sched.complete(1, now + duration)
