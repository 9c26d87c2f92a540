"""Which of a summary's latency figures rest on too few requests to mean what their names say.

Why: ``ttft_p99_s`` of a 3-request run printed like any other figure, and read as a tail latency; it is the
slowest request's TTFT, or a point between the slowest two. A q-quantile of n values tells something about
the tail beyond it only when that tail holds at least one value, n (1 - q) >= 1: a p99 needs 100 requests, a
median 2. Under that, numpy's linear interpolation puts it between the largest two values (or, of one value,
on it). That is arithmetic, not a tuned threshold. A figure with no values at all (``None`` in JSON, ``-`` in
the table) says why too: no request completed, or none completed with a second output token to time a TPOT by.

The summary carries the notes as ``latency_notes`` (figure -> why, only when there is something to say) and
``kvsim run``/``compare`` print each as a note, as they print ``memory_omits``.
"""

from __future__ import annotations

LATENCY_QUANTILES = {"ttft_p50_s": 0.5, "ttft_p99_s": 0.99, "tpot_p50_s": 0.5, "e2e_p50_s": 0.5}
"""The summary's latency percentiles and the quantile each is."""

LATENCY_FIGURES = ("normalized_latency_s_per_tok", *LATENCY_QUANTILES)
"""Every latency figure of the summary: over completed requests only (rejected ones have no latency)."""


def _requests(n: int) -> str:
    return f"{n:,} request" + ("" if n == 1 else "s")


def min_requests(quantile: float) -> int:
    """The fewest values whose top ``1 - quantile`` holds at least one value (p99: 100, p50: 2)."""
    return round(1 / (1 - quantile))


def latency_notes(samples: dict[str, int]) -> dict[str, str]:
    """Notes for the figures of ``samples`` (figure -> how many requests it is over) that cannot mean what
    their names say: none at all, or a percentile of fewer requests than its tail needs (`min_requests`)."""
    notes: dict[str, str] = {}
    for figure in LATENCY_FIGURES:
        n = samples.get(figure, 0)
        if n == 0:
            notes[figure] = ("empty: no completed request generated a second output token, the first a TPOT is "
                             "timed by" if figure == "tpot_p50_s" and samples.get("e2e_p50_s")
                             else "empty: no request completed")
            continue
        quantile = LATENCY_QUANTILES.get(figure)
        if quantile is None or n >= min_requests(quantile):
            continue
        need = min_requests(quantile)
        where = ("that request's own value" if n == 1
                 else "between the slowest two of them (numpy's interpolation), not a measured tail")
        notes[figure] = (f"a {round(quantile * 100)}th percentile of only {_requests(n)}: its top "
                         f"{1 - quantile:.0%} needs at least {need}, so it is {where}")
    return notes
