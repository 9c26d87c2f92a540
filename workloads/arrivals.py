"""Arrival processes: when requests arrive. Each takes an explicit ``numpy.random.Generator``.

Spec grammar (``--arrivals``):

- ``poisson:rate=R``: exponential gaps, R requests per second; the first request arrives at t=0.
- ``gamma:rate=R,cv=C``: gamma-distributed gaps with mean 1/R and coefficient of variation C (C=1 is
  Poisson; C>1 is burstier, as Azure code's CV of 13).
- ``constant:rate=R``: one request every 1/R seconds.
- ``trace[:rate=R][,path=FILE]``: a trace's own timestamps (the file read or resampled, or FILE, which may be a
  preset name: `workloads.named` resolves it into the `TraceTimes.source` workload), optionally time-scaled
  so the average rate is R; each used once, so at most as many requests as the trace has rows that arrive on
  their own (a file without timestamps of its own has none to lend).
- ``closed:users=N[,think_s=T]``: a closed loop of N users, each sending its next request T seconds after
  its previous one finishes. Arrival times are all 0 and the workload carries a `ClosedLoop` marker that the
  simulator must honour; a simulator that ignores it sees every request arrive at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from workloads.errors import TraceError
from workloads.sessions import closed_loop_turns
from workloads.specs import check_cv, check_positive
from workloads.validation import MAX_ARRIVAL_S
from workloads.workload import ClosedLoop, Workload


def _within_clock(times_of: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """An arrival process's ``times``, refused with one `TraceError` naming the process where the last arrival
    passes `MAX_ARRIVAL_S` or is no number (a rate below about 1e-308 makes 1/rate infinite); numpy's overflow
    warnings on the way there are left unsaid, as the error says it."""

    @functools.wraps(times_of)
    def times(process, rng: np.random.Generator, count: int, source: Workload | None = None) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            drawn = times_of(process, rng, count, source)
        if len(drawn) and not drawn[-1] <= MAX_ARRIVAL_S:
            last = f"{drawn[-1]:.3g} s" if np.isfinite(drawn[-1]) else "no finite time"
            raise TraceError(f"arrivals {process}: the last of {len(drawn)} requests arrives at {last}, past the "
                             f"{MAX_ARRIVAL_S:g} s (about 32 years) within which kvsim's clock resolves a step; "
                             "raise the rate or ask for fewer requests")
        return drawn

    return times


@dataclass(frozen=True)
class Poisson:
    rate: float

    def __post_init__(self) -> None:
        check_positive(rate=self.rate)

    @_within_clock
    def times(self, rng: np.random.Generator, count: int, source: Workload | None = None) -> np.ndarray:
        gaps = rng.exponential(1.0 / self.rate, count)
        return _from_gaps(gaps)


@dataclass(frozen=True)
class Gamma:
    rate: float
    cv: float

    def __post_init__(self) -> None:
        check_positive(rate=self.rate)
        check_cv(cv=self.cv)

    @_within_clock
    def times(self, rng: np.random.Generator, count: int, source: Workload | None = None) -> np.ndarray:
        shape = 1.0 / self.cv**2
        scale = 1.0 / (self.rate * shape) if self.rate * shape > 0 else np.inf  # (the product may underflow)
        return _from_gaps(rng.gamma(shape, scale, count))


@dataclass(frozen=True)
class Constant:
    rate: float

    def __post_init__(self) -> None:
        check_positive(rate=self.rate)

    @_within_clock
    def times(self, rng: np.random.Generator, count: int, source: Workload | None = None) -> np.ndarray:
        return np.arange(count, dtype=np.float64) / self.rate


@dataclass(frozen=True)
class TraceTimes:
    """A trace's own arrival times, optionally scaled so that the requests drawn average ``rate``
    (requests / duration, as the traces' README measures a rate). ``source`` is the trace whose times are
    used (data, not a name); without it, the workload being re-timed lends its own."""

    rate: float | None = None
    source: Workload | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.rate is not None:
            check_positive(rate=self.rate)

    @_within_clock
    def times(self, rng: np.random.Generator, count: int, source: Workload | None = None) -> np.ndarray:
        if self.source is not None:
            source = self.source
        if source is None:
            raise TraceError("trace arrivals need a source trace with timestamps (path=FILE_OR_PRESET)")
        if source.closed_loop is not None:
            raise TraceError(f"trace arrivals: the source trace {source.name!r} is a closed loop, whose requests "
                             "have no timestamps of their own to keep")
        _, released = closed_loop_turns(source)
        if released.any():  # a session trace: a released turn's time is a placeholder (its previous turn's end
            source = source.select(np.flatnonzero(~released))  # and think time release it), not an arrival
        if len(source) < 2:
            raise TraceError(f"trace arrivals: the source trace {source.name!r} has {len(source)} row(s) that "
                             "arrive on their own; they need at least 2 timestamped rows")
        base = source.arrival_time_s - source.arrival_time_s[0]
        if base[-1] <= 0:
            raise TraceError(f"trace arrivals: the source trace {source.name!r} spans no time (its timestamps are "
                             "all equal, or it has none of its own)")
        if count > len(base):  # repeating them would invent a pattern (and a gap between repeats) it does not have
            raise TraceError(f"trace arrivals: {count} requests need {count} timestamps, and the source trace "
                             f"{source.name!r} has {len(base)} (rows that arrive on their own; each is used once)")
        times = base[:count].copy()
        if self.rate is not None and count > 1:
            if times[-1] <= 0:
                raise TraceError(f"trace arrivals: the first {count} timestamps of {source.name!r} are all equal, so "
                                 f"no rate can be set from them (rate={self.rate:g})")
            times *= (count / times[-1]) / self.rate  # the requests used, not the whole trace, get the rate
        return times


@dataclass(frozen=True)
class Closed:
    users: int
    think_s: float = 0.0

    def __post_init__(self) -> None:
        # a finite think time past the clock in the spec's words; anything else wrong is `ClosedLoop`'s error
        if MAX_ARRIVAL_S < self.think_s < np.inf:
            raise ValueError(f"think_s must be <= {MAX_ARRIVAL_S:g} s, got {self.think_s:g}")
        ClosedLoop(self.users, self.think_s)

    @property
    def closed_loop(self) -> ClosedLoop:
        return ClosedLoop(self.users, self.think_s)

    def times(self, rng: np.random.Generator, count: int, source: Workload | None = None) -> np.ndarray:
        return np.zeros(count, dtype=np.float64)


ArrivalProcess = Poisson | Gamma | Constant | TraceTimes | Closed

KINDS = {"poisson": Poisson, "gamma": Gamma, "constant": Constant, "trace": TraceTimes, "closed": Closed}
TYPES = {"rate": float, "cv": float, "path": str, "users": int, "think_s": float}


def _from_gaps(gaps: np.ndarray) -> np.ndarray:
    """Arrival times with the first request at t=0 and the given gaps after it."""
    times = np.zeros(len(gaps), dtype=np.float64)
    np.cumsum(gaps[:-1], out=times[1:])
    return times


def closed_loop_of(process: ArrivalProcess) -> ClosedLoop | None:
    return process.closed_loop if isinstance(process, Closed) else None


def retime(workload: Workload, process: ArrivalProcess, seed: int, label: str | None = None) -> Workload:
    """``workload`` with arrival times drawn from ``process`` (seeded by ``seed``); ``label`` (the spec) is
    added to its source.

    In a session trace only the rows that arrive on their own (a session's first turn, or a turn without a
    think time) take a drawn time: the rest are released by their previous turn's end (the simulator ignores
    their times), so a rate of R is R sessions' first turns a second, as ``kvsim trace generate`` and ``trace
    stats`` count it (drawing a time per row made the sessions' rate R x sessions / rows). A released turn keeps
    its offset from the turn before it, so the rows stay in arrival order."""
    closed = closed_loop_of(process)
    next_turn, released = closed_loop_turns(workload)
    if closed is not None or not released.any():
        times = process.times(np.random.default_rng(seed), len(workload), workload)
        timed = workload.with_arrivals(times, closed_loop=closed)
    else:
        own = np.flatnonzero(~released)
        old = workload.arrival_time_s
        times = np.empty(len(workload))
        times[own] = process.times(np.random.default_rng(seed), len(own), workload)  # (`TraceTimes` takes `own`)
        frontier = own
        while len(frontier):  # down each session's chain of released turns, a turn at a time
            then = next_turn[frontier]
            frontier, then = frontier[then >= 0], then[then >= 0]
            times[then] = times[frontier] + np.maximum(old[then] - old[frontier], 0.0)
            frontier = then
        order = np.argsort(times, kind="stable")
        timed = workload.select(order, arrival_time_s=times[order])
    if label is not None:
        timed.source += f"; arrivals {label} (seed {seed})"
    return timed
