"""Catching a preemption livelock: steps that run, preempt and recompute, and never produce a token.

vLLM's scheduler can cycle without end. Fan-out children of one request tie on vLLM's priority key (priority,
arrival), so ``max`` picks the first of them running, the one furthest along; in a pool that holds two of
them but not three, each in turn is preempted just before its prefill ends, loses its work and is admitted
again (Jamba with prefix caching on, 16-token chunks, 43 blocks: `tests/sim/test_sim_livelock.py`; vLLM 0.33
loops there too). A simulator that follows vLLM step for step would loop as well; kvsim instead rejects the
request being preempted once the loop is certain enough, with a reason that says so, and runs on.

The bound: a step that produces no token still advances some prefill by at least one token, so, unless
preemptions throw work away, the steps in a row without a token cannot pass the prefill tokens of the
requests present. `StallWatch` counts those steps; a preemption once they pass twice those tokens plus
`SILENT_FLOOR` is taken as the loop's (`stuck`).
"""

from __future__ import annotations

from collections.abc import Iterable

from sim.kernel.sequence_group import SequenceGroup

SILENT_FLOOR = 4096
"""Steps without a token that never count as a livelock, however few prefill tokens are left (margin for
the steps that schedule no prefill: async scheduling's empty steps, host loads)."""


class StallWatch:
    """The steps in a row that produced no token (no first token, no decode), and whether a preemption now
    belongs to a livelock."""

    def __init__(self) -> None:
        self.silent = 0

    def stepped(self, num_steps: int, produced: bool) -> None:
        """A step (or a decode run of ``num_steps``) has run; ``produced``: it gave some request a token."""
        self.silent = 0 if produced else self.silent + num_steps

    def stuck(self, live: Iterable[SequenceGroup]) -> str | None:
        """The rejection reason if a preemption now is a livelock's (`SILENT_FLOOR` and twice the prefill tokens
        of the ``live`` requests passed); None otherwise. Answering resets the count: a further rejection
        needs a further full stretch without a token."""
        if self.silent <= SILENT_FLOOR:
            return None
        work = sum(group.prefill_target for group in live)
        if self.silent <= 2 * work + SILENT_FLOOR:
            return None
        silent, self.silent = self.silent, 0
        return (f"preemption livelock: no request produced a token in {silent} steps, more than twice the {work} "
                f"prefill tokens of the requests present, each preempted before its prefill ended "
                f"(vLLM's scheduler cycles so without end)")
