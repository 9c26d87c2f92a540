"""The closed forms behind a decode run's O(1) sums: a run of pure decode steps has durations linear in the
step index on each side of the roofline's crossover, so its total, index-weighted total and prefix sums come
from the sums of ``j`` and ``j^2`` over each side (`StepCostModel.decode_run`, `decode_prefix`).
"""

from __future__ import annotations

import math


def linear_sums(lo: int, hi: int) -> tuple[int, int, int]:
    """(count, sum j, sum j^2) over integers lo <= j < hi."""
    if hi <= lo:
        return 0, 0, 0

    def s1(n: int) -> int:
        return n * (n - 1) // 2

    def s2(n: int) -> int:
        return (n - 1) * n * (2 * n - 1) // 6

    return hi - lo, s1(hi) - s1(lo), s2(hi) - s2(lo)


NEVER = 1 << 53
"""A step index no run reaches: where the two lines cross further out than this, they never cross in a run
(and the index stays an exact float; an unclamped one can overflow a float when the slopes nearly agree)."""


def first_step_at_or_after(x: float) -> int:
    """ceil(x) clamped to [0, `NEVER`] (x may be huge or infinite)."""
    return 0 if x <= 0 else NEVER if x >= NEVER else math.ceil(x)


def first_step_after(x: float) -> int:
    """floor(x) + 1 clamped to [0, `NEVER`]."""
    return 0 if x < 0 else NEVER if x >= NEVER else math.floor(x) + 1


Line = tuple[float, float]
"""A step time linear in the step index ``j``: ``(a, b)`` is ``a + b j`` (overhead excluded)."""


def crossover(a1: float, b1: float, a2: float, b2: float) -> tuple[int, Line, Line]:
    """Where the decode lines of `StepCostModel._decode_lines` cross: ``(m, head, tail)``, step ``j`` costing
    ``head``'s `Line` for ``j < m`` and ``tail``'s from ``m`` on. Parallel lines never cross: the larger
    wins throughout (``m = 0``)."""
    if b1 == b2:
        line = (a1, b1) if a1 >= a2 else (a2, b2)
        return 0, line, line
    if b1 > b2:  # compute wins from the crossover on
        return first_step_at_or_after((a2 - a1) / (b1 - b2)), (a2, b2), (a1, b1)
    return first_step_after((a2 - a1) / (b1 - b2)), (a1, b1), (a2, b2)  # compute wins up to it
