"""A warning when a trace read in seconds looks as if its arrival times were milliseconds.

kvsim's canonical ``arrival_time_s`` is in seconds, and its name says so, so `formats.check_time_unit` (which
refuses a column whose *name* states another unit) lets it through; a file whose values are really milliseconds
then reads without a word as a trace 1,000 times slower (300 requests at 4 req/s ran as 0.004 req/s: an idle
server, every latency figure plausible-looking). The unit cannot be known from the numbers, so kvsim does not
convert: it warns, and the run's summary states ``arrival_span_s`` and ``offered_rate_req_s`` for anyone to see.

The rule is deliberately conservative, so that it does not cry wolf on a real slow trace: at least
`MIN_TIMED_ROWS` requests arriving on their own (a handful far apart is a test, not a trace), every arrival
time a whole number (milliseconds are written as integers; seconds from a clock or a generator carry
fractions), and a mean gap over `MAX_MEAN_GAP_S` (fewer than one request a minute). The public traces kvsim
reads have mean gaps of 0.18 s (Azure conv) to 1.0 s (the ShareGPT timings); a trace offered at 1 req/s
written in milliseconds has a mean gap of 1,000 "s". A trace in milliseconds offered at over 1,000 / 60 =
16.7 req/s is not caught; its ``offered_rate_req_s`` still shows it.
"""

from __future__ import annotations

import warnings

import numpy as np

from workloads.errors import TraceWarning
from workloads.stats import offered_arrivals
from workloads.workload import Workload

MIN_TIMED_ROWS = 100
"""Fewest requests arriving on their own for the rule to apply."""

MAX_MEAN_GAP_S = 60.0
"""Mean gap between arrivals above which a trace of whole-number times is suspected of being in milliseconds."""


REPLAY_ADVICE = ", or keep its pattern at a rate you name with --arrivals trace:rate=R"
"""What a trace read for a run may do instead of dividing: keep the pattern, at a rate named."""


def seconds_doubt(workload: Workload) -> str | None:
    """Why ``workload``'s arrival times (read as seconds) may be milliseconds, or None (`MIN_TIMED_ROWS`,
    `MAX_MEAN_GAP_S`; whole numbers only)."""
    return times_doubt(offered_arrivals(workload)[0], REPLAY_ADVICE)


def times_doubt(times: np.ndarray, advice: str) -> str | None:
    """`seconds_doubt` of sorted arrival times read as seconds (the rule, shared with a measured run's
    ``arrival_time_s``, `sim.measured`); ``advice``: what else the reader may do than divide by 1000."""
    span = float(times[-1] - times[0]) if len(times) else 0.0
    if len(times) < MIN_TIMED_ROWS or span <= 0 or not np.all(times == np.floor(times)):
        return None
    gap = span / (len(times) - 1)
    if gap <= MAX_MEAN_GAP_S:
        return None
    rate = len(times) / span
    return (f"{len(times):,} requests over {span:,.0f} s, one every {gap:,.0f} s on average ({rate:.3g} req/s), "
            f"all at whole seconds: if these are milliseconds, the trace runs 1,000 times slower than it was "
            f"recorded ({rate * 1000:.3g} req/s). kvsim reads arrival_time_s in seconds: divide the column by "
            f"1000{advice}")


def warn_if_milliseconds(path: object, workload: Workload) -> None:
    """A `TraceWarning` (the command line's ``Warning:`` line) when `seconds_doubt` has a reason."""
    if (why := seconds_doubt(workload)) is not None:
        warnings.warn(f"{path}: arrival_time_s: {why}", TraceWarning, stacklevel=3)
