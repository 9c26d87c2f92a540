"""vLLM's prefill cadence (``--prefill-schedule-interval N``): prefill admitted only every N engine steps, the steps
between left to decode alone.

Why: a step that carries a prefill chunk lasts longer than a decode step, so every admission lengthens the
inter-token gap of every running request. Holding prefill to one step in N lets decodes run in longer
uninterrupted stretches (steadier TPOT) at the cost of TTFT; when the engine is backed up the hold would cap
prefill at about one budget per interval and grow the queue without bound, so vLLM lifts it then. The rule, as
vLLM 0.33 and 0.34 schedule (``v1/core/sched/scheduler.py``, ``Scheduler.schedule``):

- A step *defers prefill* when the last admission round that ran was not *capacity-bound*, fewer than N executed
  steps (steps that scheduled a token) separate this one from the last step that carried prefill, counting this
  one (``(num_executed_steps + 1) - last_prefill_step < N``), and some running request decodes (its last
  scheduled tokens ended its prefill: ``is_prefill_chunk`` false). The first step is never held.
- A deferred step's running loop skips the running prefills (decodes still run); its admission loop stops at the
  first request with more than its last token to compute (``num_computed_tokens < num_tokens - 1``, after its
  prefix lookup), so whole-prefix hits and loaded requests with one token left are still admitted and host-tier
  loads still start; it does not reorder the queue by cached prefix (``cache_aware_admission_window``).
- A step that did not defer and ran its admission loop marks the engine capacity-bound when that loop left a
  request waiting that is not blocked (``num_waiting > len(deferred_waiting)``; kvsim's `Scheduler.queued`): the
  next steps do not defer.
- A step that scheduled a running prefill chunk, or admitted a request with prompt to compute (not one whose hits
  load beside the steps), restarts the interval: ``last_prefill_step`` becomes its executed-step count.

The ranks of a mixture of experts stepping in lock-step (`sim.kernel.lockstep`) are paced by vLLM's DP engine core
instead (``DPEngineCoreProc._should_throttle_prefills``): a step is held when the wave's step counter, which every
rank shares, is not a multiple of N, with the same capacity escape and decoder test; the scheduler's own interval
is then 1 (``local_prefill_interval``: only an engine that is not DP-coordinated applies it).
"""

from __future__ import annotations

from collections.abc import Iterable


class PrefillCadence:
    """One engine's cadence state: the executed steps, the last that carried prefill, whether the last admission
    round was capacity-bound, and this step's decision (``deferring``) and what it held back (``held``)."""

    __slots__ = ("interval", "engine_paced", "engine_step", "executed", "last_prefill", "capacity_bound",
                 "deferring", "held", "prefilled")

    def __init__(self, interval: int, *, engine_paced: bool = False) -> None:
        self.interval = interval
        self.engine_paced = engine_paced  # lock-step ranks: the wave's step counter paces (`engine_step`)
        self.engine_step = 0  # that counter at the step being planned, set by `sim.kernel.lockstep`
        self.executed = 0
        self.last_prefill = -interval  # a whole interval back: the first step is never held
        self.capacity_bound = False
        self.deferring = False
        self.held = False
        self.prefilled = False

    def begin(self, running: Iterable) -> None:
        """A step is being planned with ``running`` (the running groups as it starts): decide whether it defers
        prefill."""
        self.held = self.prefilled = False
        if self.capacity_bound:
            self.deferring = False
        elif self.engine_paced:
            self.deferring = self.engine_step % self.interval != 0
        else:
            self.deferring = self.executed + 1 - self.last_prefill < self.interval
        if self.deferring:
            self.deferring = any(not g.prefilling for g in running)

    def admitted(self, queued: int) -> None:
        """The step's admission loop ran and left ``queued`` requests waiting that are not blocked."""
        if not self.deferring:
            self.capacity_bound = queued > 0

    def planned(self, computes: bool) -> None:
        """The step is planned; ``computes``: it scheduled a token (vLLM counts it among the executed steps)."""
        if computes:
            self.executed += 1
        if self.prefilled and not self.engine_paced:
            self.last_prefill = self.executed

    def ran_on(self, steps: int) -> None:
        """A decode run went ``steps`` steps past the one planned: each scheduled its decoders' tokens, none a
        prefill, and each admission round met what the planned step's did (so the capacity bound stands)."""
        self.executed += steps

    def quiet_step(self) -> None:
        """A lock-step rank's quiet step (`sim.kernel.quiet_step`): decoders only, nothing waiting, so an admission
        round leaves nothing queued (a held one changes nothing either: it holds only when not bound)."""
        self.executed += 1
        self.capacity_bound = False
