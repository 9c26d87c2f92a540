"""Length distributions for the paper's ShareGPT and Alpaca workloads, solved to match its means *after* the cap.

The paper (docs/paper-facts.md section 1) gives only means: ShareGPT input 161.31 / output 337.99, Alpaca 19.31 /
58.45, sequences capped at 2048 tokens. We choose the family and spread (lognormal; the CVs below are our
choice, with ShareGPT's larger, as the paper says it has higher variance) and solve for the pre-cap means so
that rounding, the floor of 1 token and the cap of `apply_cap` leave exactly the paper's means. The capped
means are computed exactly from the rounded lognormal's probability mass, not by sampling, so the solution is
deterministic.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

from workloads.lengths import Lognormal, lognormal_params

PAPER_MAX_TOTAL = 2048
PAPER_TARGETS = {
    # name: (prompt mean, prompt CV, output mean, output CV), means after the cap
    "sharegpt-paper": (161.31, 1.2, 337.99, 1.0),
    "alpaca-paper": (19.31, 0.6, 58.45, 0.8),
}

_erf = np.vectorize(math.erf)


def _survival(mean: float, cv: float, top: int) -> np.ndarray:
    """P(K >= k) for k = 0..top, K the lognormal rounded to the nearest whole token and floored at 1."""
    mu, sigma = lognormal_params(mean, cv)
    k = np.arange(top + 1, dtype=np.float64)
    edges = np.log(np.maximum(k - 0.5, 1e-300))
    cdf = 0.5 * (1.0 + _erf((edges - mu) / (sigma * math.sqrt(2.0))))
    surv = 1.0 - cdf
    surv[:2] = 1.0
    return surv


def capped_prompt_pmf(mean: float, cv: float, top: int) -> np.ndarray:
    """P(prompt = p) for p = 0..top-1 after the cap at top-1 (entry 0 is 0)."""
    surv = _survival(mean, cv, top)
    pmf = np.zeros(top)
    pmf[1:top] = surv[1:top] - surv[2 : top + 1]
    pmf[top - 1] += surv[top]
    return pmf


def capped_means(prompt_mean: float, prompt_cv: float, output_mean: float, output_cv: float,
                 top: int = PAPER_MAX_TOTAL) -> tuple[float, float]:
    """Exact means of (prompt, output) after rounding and the cap at ``top`` total tokens."""
    pmf = capped_prompt_pmf(prompt_mean, prompt_cv, top)
    surv_out = _survival(output_mean, output_cv, top)
    # E[min(K, c)] = sum_{j=1..c} P(K >= j), for each room c = top - p
    min_mean = np.concatenate([[0.0], np.cumsum(surv_out[1:])])
    rooms = top - np.arange(top)
    return float(pmf @ np.arange(top)), float(pmf[1:] @ min_mean[rooms[1:]])


def _bisect(target: float, measure, lo: float, hi: float) -> float:
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        if measure(mid) < target:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


@cache
def paper_lengths(name: str) -> Lognormal:
    """The solved lognormal for ``name`` in `PAPER_TARGETS`, with the paper's 2048 cap."""
    p_target, p_cv, o_target, o_cv = PAPER_TARGETS[name]
    p_mean = _bisect(p_target, lambda m: capped_means(m, p_cv, 1.0, 1.0)[0], 1.0, 1e5)
    o_mean = _bisect(o_target, lambda m: capped_means(p_mean, p_cv, m, o_cv)[1], 1.0, 1e5)
    return Lognormal(p_mean, p_cv, o_mean, o_cv, max_total=PAPER_MAX_TOTAL)
