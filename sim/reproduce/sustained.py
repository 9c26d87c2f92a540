"""The sustained request rate: the highest rate at which a system's normalized latency stays under a bound.

The paper says a system "sustains" a rate while its normalized latency stays low, without a number; kvsim
states one. `LATENCY_BOUND_S_PER_TOKEN` was fixed before any run: about five times OPT-13B's unloaded
normalized latency on an A100, well below the curves' vertical blow-up, so the rate where a curve crosses it
sits at the knee. Between the measured rates the crossing is interpolated linearly; because latency past the knee
grows far faster than linearly, the runs bisect the grid step where a curve crosses the bound
(`sim.reproduce.experiments.latency_curve`), so the bracket is narrow and the straight line no longer biases
the rate low by however much the first point over the bound happens to overshoot.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

LATENCY_BOUND_S_PER_TOKEN = 0.2
"""Normalized latency (s/token) a sustained rate must stay under."""


def sustained_rate(rates: np.ndarray, latencies: np.ndarray, bound: float = LATENCY_BOUND_S_PER_TOKEN) -> float:
    """The rate where normalized latency first crosses ``bound``, interpolated between the measured rates.

    Returns the largest rate if the curve never crosses (a lower bound on the true value: widen the grid),
    and NaN if even the smallest rate is over the bound. Once a curve crosses, later dips back under the bound
    (noise past the knee) do not count.
    """
    order = np.argsort(rates)
    rates = np.asarray(rates, float)[order]
    latencies = np.asarray(latencies, float)[order]
    if len(rates) == 0 or not latencies[0] <= bound:
        return math.nan
    over = np.flatnonzero(~(latencies <= bound))
    if len(over) == 0:
        return float(rates[-1])
    i = over[0]
    r0, r1, l0, l1 = rates[i - 1], rates[i], latencies[i - 1], latencies[i]
    if not math.isfinite(l1):
        return float(r0)
    return float(r0 + (bound - l0) * (r1 - r0) / (l1 - l0))


def sustained_rates(curves: pd.DataFrame, bound: float = LATENCY_BOUND_S_PER_TOKEN, *, x: str = "rate",
                    y: str = "normalized_latency_s_per_tok") -> dict[str, float]:
    """`sustained_rate` of each allocator's curve (rows: ``allocator``, ``x``, ``y``)."""
    return {name: sustained_rate(group[x].to_numpy(), group[y].to_numpy(), bound)
            for name, group in curves.groupby("allocator", sort=False)}
