"""The search `sim.trace_fit` fits with: least squares over log coefficients, every trial point a whole
simulation of the measured run.

Two models of how the residuals move with the coefficients. The schedule-frozen Jacobian (`sim.schedule_jacobian`)
comes free with every simulation and is exact while the schedule stays the same, so Levenberg-Marquardt steps on
it polish a point cheaply. It misses the queue's feedback, though: on a loaded run faster steps also finish
requests sooner, so later steps carry smaller batches, and the whole run's derivatives are two to three times the
frozen ones, and not in proportion (240 requests at 5/s on Llama-2-7B / H100: bandwidth_frac x2.4, flops_frac
x2.0, seq_overhead_s x2.6). From the start, frozen steps then slid along the valley where bandwidth_frac and
seq_overhead_s trade off: a round trip of that run stopped at bandwidth_frac +7% and seq_overhead_s +130%. The
secant model sees the feedback: 2p more simulations, each coefficient `SECANT_STEP` up and down, give whole-run
central differences and, with the centre, the least-squares affine model of the residuals over 2p + 1
schedules, wide enough that arrivals crossing step boundaries average out. Over 5% a weak coefficient's effect
can drown in those crossings, though, where the frozen steps still see it: neither model leads everywhere.

So the search starts twice from the start point. The first start takes frozen steps alone until they shrink to
nothing. The second goes in rounds, a secant step and then frozen steps until they stall, while a round still
finds a better point. The better of the two ends is the fit, never worse than the frozen steps alone. A point is
kept only if it lowers the error, so each end is the best point its start simulated; the search is deterministic
and bounded by a number of simulations (the first start gets half) and a wall-clock limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

MAX_LOG_STEP = 1.0
"""Largest change of a log coefficient in one step of the search (a factor e)."""
SECANT_STEP = 0.05
"""Half-width of the secant model's central differences, in log coefficients (5%): wide enough that arrivals
crossing step boundaries (a few percent of a TTFT group each time) are a part of the change, not all of it, and
narrow enough that the residuals stay near linear across it."""
ALONE_DAMPING = 1e6
"""Levenberg-Marquardt damping past which the frozen steps alone stop: their steps have shrunk to nothing."""
ROUND_DAMPING = 30.0
"""Damping past which a round's frozen steps have stalled (three rejections in a row from the start's damping
of 1): what is left is chasing step boundaries, which the next round's secant step does better."""


@dataclass
class Point:
    """One simulation of the run: log coefficients, residuals, their schedule-frozen Jacobian, requests."""

    x: np.ndarray
    r: np.ndarray
    jac: np.ndarray
    requests: pd.DataFrame

    @property
    def cost(self) -> float:
        return float(self.r @ self.r)


@dataclass
class Search:
    """Least squares over log coefficients between ``lower`` and ``upper``: ``evaluate(x)`` simulates the run and
    returns its residuals, their schedule-frozen Jacobian and its requests. At most ``max_evals`` simulations
    (counting those already made, ``evals``), none started after ``deadline`` (`time.monotonic`)."""

    evaluate: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, pd.DataFrame]]
    lower: np.ndarray
    upper: np.ndarray
    max_evals: int
    deadline: float
    evals: int = 0
    limit: int = field(init=False)
    """The simulations the current start may reach: `fit` gives the first start half of those left."""

    def __post_init__(self) -> None:
        self.limit = self.max_evals

    def fit(self, start: Point) -> Point:
        """The better end of the two starts from ``start`` (already simulated). The second needs room for its
        secant step: without one it would only repeat the first."""
        self.limit = self.evals + (self.max_evals - self.evals + 1) // 2
        frozen_alone = self.polish(start, ALONE_DAMPING)
        self.limit = self.max_evals
        if not self.room(self.secant_runs(start)):
            return frozen_alone
        return min(frozen_alone, self.rounds(start), key=lambda point: point.cost)

    def rounds(self, start: Point) -> Point:
        """The best point the second start finds: rounds of a secant step and frozen steps, until a round finds
        no better point or there is no room for another."""
        best = start
        while True:
            before = best
            trial = self.secant_step(best)
            if trial is not None and trial.cost < best.cost:
                best = trial
            best = self.polish(best, ROUND_DAMPING)
            if not _progress(before, best) or not self.room(self.secant_runs(best)):
                return best

    def simulate(self, x: np.ndarray) -> Point:
        self.evals += 1
        return Point(x, *self.evaluate(x))

    def room(self, runs: int) -> bool:
        return self.evals + runs <= self.limit and time.monotonic() < self.deadline

    @staticmethod
    def secant_runs(point: Point) -> int:
        """Simulations a secant step takes: two for each coefficient, one for the step."""
        return 2 * len(point.x) + 1

    def secant_step(self, centre: Point) -> Point | None:
        """The Gauss-Newton step of the secant model around ``centre``, simulated; None without room for it."""
        if not self.room(self.secant_runs(centre)):
            return None
        shifts = np.eye(len(centre.x)) * SECANT_STEP
        up = [self.simulate(centre.x + s).r for s in shifts]
        down = [self.simulate(centre.x - s).r for s in shifts]
        slopes = np.column_stack([(u - d) / (2 * SECANT_STEP) for u, d in zip(up, down, strict=True)])
        intercept = np.mean([centre.r, *up, *down], axis=0)  # a symmetric design: the least-squares intercept
        dx = np.linalg.lstsq(slopes, -intercept, rcond=None)[0]
        return self.simulate(self._bounded(centre.x, dx))

    def polish(self, point: Point, stall: float) -> Point:
        """Levenberg-Marquardt on the schedule-frozen Jacobian from ``point`` until it converges or its damping
        passes ``stall``."""
        lam = 1.0
        while self.room(1):
            a, g = point.jac.T @ point.jac, point.jac.T @ point.r
            dx = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), -g)
            trial = self.simulate(self._bounded(point.x, dx))
            if np.isfinite(trial.cost) and trial.cost < point.cost:
                point, lam, converged = trial, max(lam / 4, 1e-6), not _progress(point, trial)
                if converged:
                    break
            else:
                lam *= 5
                if lam > stall:
                    break
        return point

    def _bounded(self, x: np.ndarray, dx: np.ndarray) -> np.ndarray:
        """``x + dx`` with no coefficient changed by more than a factor e, inside the bounds."""
        dx = dx * min(1.0, MAX_LOG_STEP / max(np.abs(dx).max(), 1e-300))
        return np.clip(x + dx, self.lower, self.upper)


def _progress(before: Point, after: Point) -> bool:
    """Whether ``after`` moved and lowered the error by more than rounding: the search has converged otherwise."""
    return np.abs(after.x - before.x).max() >= 1e-4 and before.cost - after.cost >= 1e-9 * before.cost
