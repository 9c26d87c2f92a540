"""The highest request rate a configuration sustains under a service-level target.

Search: bracket by geometric growth from ``rate_min`` (x ``growth`` per step) until the target fails, then
bisect the bracket geometrically (rates are a ratio scale) until ``high / low - 1 <= tolerance``. Every probe
of one configuration keeps its seed, so each rate replays the same random numbers (common random numbers):
with a generator that draws standard exponential gaps and divides by the rate, the same requests arrive in
the same order, only closer together, and the comparison between two rates is not drowned in sampling noise.

The search assumes the target's metrics grow with the rate (more load, more queueing); that holds for
latency percentiles in the mean, and common random numbers make it hold run by run far more often.

Failing the target: any bounded metric above its bound, or missing (NaN: e.g. no request finished), **or any
rejected request, or any request left unfinished** at the end of the run. A rate at which the system turns
requests away or falls behind for good does not sustain that rate, however good the latency of the rest.

A probe is a fixed number of requests; at the rate found, `steady_state_warning` checks it lasted long enough
to mean something, and the row's ``warning`` says when it did not.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from dataclasses import dataclass
from typing import Any

from sim.kernel.ignored_settings import SettingWarning
from sim.sweep.hashing import config_values
from sim.sweep.point import STATUS_FAILED, STATUS_OK, PointFn, describe_error

SLO_METRICS = {
    "ttft_p99": "ttft_p99_s",
    "tpot_p50": "tpot_p50_s",
    "e2e_p50": "e2e_p50_s",
    "normalized_latency": "normalized_latency_s_per_tok",
}
"""Option name (``--ttft-p99``) -> the summary key it bounds."""

MILLISECONDS_SUSPECTED = {
    "ttft_p99_s": 100.0,
    "tpot_p50_s": 5.0,
    "e2e_p50_s": 1000.0,
    "normalized_latency_s_per_tok": 5.0,
}
"""Summary key -> the bound (s) from which it is suspected of having been written in milliseconds. Latency
targets are usually quoted in ms (TTFT 200-2,000 ms, TPOT 20-200 ms), and kvsim's bounds are seconds, so
``--tpot-p50 50`` bounds TPOT at 50 s: every rate passes on latency, and the search reports the rate at which
requests start to be rejected or left unfinished, without a word. The unit cannot be known from the number, so
kvsim does not convert; it warns from values no interactive target takes in seconds: a per-token time of 5 s
(the paper's normalized-latency plots end at 1 s per token), a first token after 100 s, a median request over
1,000 s. A millisecond bound below these (TTFT under 100 ms, TPOT under 5 ms) is not caught; the target line
every command prints (`SloTarget.describe`) still shows it."""

STEADY_LATENCIES = 5.0
"""A probe reaches steady state only if its arrivals last at least this many median end-to-end latencies."""
KEEP_UP = 0.9
"""...and if it completes requests at no less than this share of the arrival rate (else its queue grew)."""

MAX_PROBES = 200
"""Most simulations one rate search may take (`SearchSettings.most_probes`); the defaults take at most 16. A
--growth of 1.0000000000001 asked for 7.6e13 to bracket 0.5 .. 1000 req/s: a search that never ends."""
MIN_TOLERANCE = 1e-9
"""Tightest --tolerance: below a few float steps (about 4e-16) the bracket's geometric midpoint is one of its
ends, and the bisection never ended."""

STATUS_BELOW_MIN = "below-min"
STATUS_ABOVE_MAX = "above-max"
"""Besides a sweep point's ``ok`` and ``failed``: the target failed at ``rate_min``, or held up to ``rate_max``."""


def milliseconds_doubts(bounds: dict[str, float]) -> list[str]:
    """Why each of ``bounds`` (summary key -> seconds) may have been meant as milliseconds
    (`MILLISECONDS_SUSPECTED`), naming the flag that set it."""
    flags = {key: name for name, key in SLO_METRICS.items()}
    return [f"--{flags.get(key, key).replace('_', '-')} {bound:g} bounds {key} at {bound:g} s; the bounds are in "
            f"seconds: if you meant {bound:g} ms, give {bound / 1000:g}"
            for key, bound in bounds.items() if bound >= MILLISECONDS_SUSPECTED.get(key, math.inf)]


@dataclass(frozen=True)
class SloTarget:
    """Upper bounds on summary keys; a run meets the target when it stays within all of them."""

    bounds: dict[str, float]

    def __post_init__(self) -> None:
        if not self.bounds:
            raise ValueError("give at least one target: --ttft-p99, --tpot-p50, --e2e-p50 or "
                             "--normalized-latency")
        for key, bound in self.bounds.items():
            if not bound > 0:
                raise ValueError(f"target {key} must be positive, got {bound}")
        for doubt in milliseconds_doubts(self.bounds):
            warnings.warn(doubt, SettingWarning, stacklevel=3)

    def describe(self) -> str:
        return ", ".join(f"{key}<={bound:g}" for key, bound in self.bounds.items())

    def check(self, summary: dict[str, Any]) -> str | None:
        """None when the run meets the target, else the first reason it does not."""
        rejected = summary.get("rejected", 0) or 0
        if rejected > 0:  # with the commonest reason: one no rate or replica count changes reads as such
            reasons = summary.get("rejected_reasons") or {}
            top = max(reasons.items(), key=lambda item: item[1], default=None)
            return f"{rejected} rejected" + (f" ({top[1]}: {top[0]})" if top else "")
        requests, completed = summary.get("requests"), summary.get("completed")
        if requests is not None and completed is not None and completed < requests:
            return f"{requests - completed} unfinished"
        for key, bound in self.bounds.items():
            value = summary.get(key)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                return f"{key} missing"
            if value > bound:
                return f"{key}={value:.4g}>{bound:g}"
        return None


@dataclass(frozen=True)
class SearchSettings:
    """Where the rate search starts, how far it may go, and when the bracket is tight enough. Errors name
    `kvsim slo`'s flags, which set these."""

    rate_min: float = 0.5
    rate_max: float = 1000.0
    growth: float = 2.0
    tolerance: float = 0.05

    def __post_init__(self) -> None:
        if not 0 < self.rate_min <= self.rate_max < math.inf:
            raise ValueError(f"need 0 < --rate-min <= --rate-max < inf, got {self.rate_min:g} and {self.rate_max:g}")
        if not 1 < self.growth < math.inf:
            raise ValueError(f"--growth must be above 1 and finite, got {self.growth:g}")
        if not MIN_TOLERANCE <= self.tolerance < math.inf:
            raise ValueError(f"--tolerance must be at least {MIN_TOLERANCE:g} and finite, got {self.tolerance:g}")
        bracket, bisect = self.most_probes()
        if bracket + bisect > MAX_PROBES:
            raise ValueError(f"the search could take {bracket + bisect:.3g} simulations, over the {MAX_PROBES} one "
                             f"may: {bracket:.3g} to bracket --rate-min {self.rate_min} .. --rate-max {self.rate_max} "
                             f"by --growth {self.growth}, {bisect} to bisect to --tolerance {self.tolerance}; raise "
                             "--growth or --tolerance, or narrow the rates")

    def most_probes(self) -> tuple[float, int]:
        """The most simulations the search can take to bracket (``rate_min`` times ``growth`` until past
        ``rate_max``) and then to bisect (halving the log of a bracket of at most ``growth`` to ``tolerance``).
        The first is a float: infinite where the rates are too far apart for one."""
        span = self.rate_max / self.rate_min
        if span == 1:
            return 1, 0
        bracket = 1 + math.log(span) / math.log(self.growth)
        bisect = max(0, math.ceil(math.log2(math.log(min(self.growth, span)) / math.log1p(self.tolerance))))
        return (math.ceil(bracket) if bracket < math.inf else bracket), bisect


def steady_state_warning(summary: dict[str, Any], rate: float) -> str | None:
    """Why a probe at ``rate`` was too short to show the rate's steady state, or None.

    A probe replays a fixed number of requests. When they all arrive within a few request latencies, or the
    server completes them more slowly than they arrive (its queue still growing when arrivals stop), the
    latencies measured are those of a transient, and an overloaded rate can pass: the answer then depends on
    --num-requests (300 requests sustained 362 req/s where 3,000 sustained 87)."""
    requests = summary.get("requests") or 0
    e2e, throughput = summary.get("e2e_p50_s"), summary.get("throughput_req_s")
    if not requests or not rate > 0:
        return None
    span = requests / rate
    if e2e is not None and math.isfinite(e2e) and span < STEADY_LATENCIES * e2e:
        return (f"probe too short for steady state: {requests} requests arrive in {span:.3g} s at {rate:.4g} "
                f"req/s, under {STEADY_LATENCIES:g} median latencies ({e2e:.3g} s); raise --num-requests")
    if throughput is not None and throughput < KEEP_UP * rate:
        return (f"probe too short for steady state: completions ({throughput:.4g} req/s) fell behind arrivals "
                f"({rate:.4g} req/s), the queue still growing; raise --num-requests")
    return None


class Probes:
    """The simulations a search has run: one configuration field (``rate``, ``replicas``) set to each value
    tried, the summary there, and why the target failed there (None: met). Shared by the rate and replica
    searches, so both report their probes alike."""

    def __init__(self, point_fn: PointFn, config: Any, target: SloTarget, field: str) -> None:
        self.point_fn, self.config, self.target, self.field = point_fn, config, target, field
        self.tried: list[tuple[float, str | None]] = []
        self.summaries: dict[float, dict[str, Any]] = {}

    def meets(self, value: float) -> bool:
        """Simulate at ``value``; True when the target holds there."""
        summary = self.point_fn(dataclasses.replace(self.config, **{self.field: value}))
        self.summaries[value] = summary
        reason = self.target.check(summary)
        self.tried.append((value, reason))
        return reason is None

    def reason_at(self, value: float | None) -> str | None:
        """Why the target failed at ``value`` (None when it held, or was never tried there)."""
        return next((reason for tried, reason in self.tried if tried == value), None)

    def outcomes(self) -> list[list]:
        """``[value, met]`` for each probe, in the order run."""
        return [[value, reason is None] for value, reason in self.tried]


def search_rate(point_fn: PointFn, config: Any, target: SloTarget, settings: SearchSettings,
                point_id: str = "") -> dict[str, Any]:
    """Bracket and bisect one configuration's rate; one result row (never raises for a simulation error)."""
    probes = Probes(point_fn, config, target, "rate")
    meets = probes.meets

    low: float | None = None
    high: float | None = None
    error = None
    try:
        rate = settings.rate_min
        while True:
            if not meets(rate):
                high = rate
                break
            low = rate
            if rate >= settings.rate_max:
                break
            rate = min(rate * settings.growth, settings.rate_max)
        if low is not None and high is not None:
            while high / low - 1 > settings.tolerance:
                mid = math.sqrt(low * high)
                if meets(mid):
                    low = mid
                else:
                    high = mid
    except Exception as exc:  # the search stops; what it learned so far is still reported
        error = describe_error(exc)
    if error is not None:
        status = STATUS_FAILED
    elif low is None:
        status = STATUS_BELOW_MIN
    elif high is None:
        status = STATUS_ABOVE_MAX
    else:
        status = STATUS_OK
    row: dict[str, Any] = {"point_id": point_id, "status": status, "error": error}
    row.update({k: v for k, v in config_values(config).items() if k != "rate"})
    row.update({
        "target": target.describe(),
        "sustained_rate": low if low is not None and status != STATUS_FAILED else math.nan,
        "rate_ok": low if low is not None else math.nan,
        "rate_fail": high if high is not None else math.nan,
        "fail_reason": probes.reason_at(high),
        "simulations": len(probes.tried),
    })
    at_ok = probes.summaries.get(low, {}) if low is not None else {}
    for key in (*target.bounds, "throughput_req_s", "throughput_tok_s", "mean_running"):
        value = at_ok.get(key)
        row[f"{key}_at_ok"] = math.nan if value is None else value
    row["warning"] = steady_state_warning(at_ok, low) if at_ok else None
    # rows of the trace --skip-bad-rows dropped: the same at every rate (one trace), so any probe tells them;
    # JSON text for the reasons, as a sweep table keeps a summary's dict
    first = next(iter(probes.summaries.values()), {})
    if "skipped_rows" in first:
        row["skipped_rows"] = first["skipped_rows"]
        row["skipped_reasons"] = json.dumps(first.get("skipped_reasons", {}), sort_keys=True)
    row["probes"] = json.dumps(probes.outcomes())
    return row
