"""Summary statistics of a workload, computed as the shared traces' README computes them.

p99 is ``numpy.percentile(x, 99)`` with linear interpolation; the rate is rows / (last arrival - first
arrival); the inter-arrival CV is the population standard deviation of the gaps over their mean. Session turns
released by a think time (closed loop per session) arrive when their previous turn ends, in the simulation, so
duration, rate and CV are of the rows that arrive on their own (``timed_rows``); a closed loop of users has
none (its arrival times are only an order).
Prefix reuse is the ceiling an unbounded cache could reach: with ``prefix_hashes``, the share of hash-block
references that repeat an id seen earlier; with ``prefix_group``, the share of prompt tokens inside a shared
prefix that an earlier request of the same group already carried; with sessions, also the share of prompt
tokens a turn repeats from its session's previous turn (its prompt and output).
"""

from __future__ import annotations

import numpy as np

from workloads.sessions import closed_loop_turns, session_reuse
from workloads.workload import NONE, Workload


def _summary(values: np.ndarray) -> dict[str, float]:
    return {"mean": float(values.mean()), "p50": float(np.median(values)),
            "p99": float(np.percentile(values, 99)), "max": float(values.max()), "min": float(values.min())}


def prefix_reuse(workload: Workload) -> tuple[float | None, str | None]:
    """(share, basis) of prefix reuse, or (None, None) when the workload carries no prefix identity."""
    if workload.has_prefix_hashes:
        refs = len(workload.hash_values)
        return 1.0 - len(np.unique(workload.hash_values)) / refs, "hash-block references"
    sessions = workload.has_sessions
    grouped = (workload.prefix_group != NONE) & (workload.turn == 0)  # a later turn repeats its whole past
    if not grouped.any() and not sessions:
        return None, None
    import pandas as pd

    groups = workload.prefix_group[grouped]
    lengths = pd.Series(workload.prefix_len[grouped])
    # a row repeats as much of its group's prefix as some earlier row of the group carried (lengths may differ)
    carried = lengths.groupby(groups).cummax().groupby(groups).shift(1).fillna(0).to_numpy()
    reused = int(np.minimum(lengths.to_numpy(), carried).sum()) + (session_reuse(workload) if sessions else 0)
    return float(reused / workload.prompt_tokens.sum()), "prompt tokens"


def offered_arrivals(workload: Workload) -> tuple[np.ndarray, float, float | None]:
    """The arrival times of the rows that arrive on their own (``timed_rows``: not a session turn released by
    its previous one's end, none in a closed loop of users), their span in seconds and the offered rate, rows /
    span (None when the span is 0): what ``kvsim trace stats`` prints as ``duration_s`` / ``rate_rps`` and a run's
    summary as ``arrival_span_s`` / ``offered_rate_req_s``, so that a trace read in the wrong unit shows in
    either (`workloads.readers.seconds_check`)."""
    _, released = closed_loop_turns(workload)
    times = workload.arrival_time_s[~released] if workload.closed_loop is None else workload.arrival_time_s[:0]
    span = float(times[-1] - times[0]) if len(times) else 0.0
    return times, span, (len(times) / span if span > 0 else None)


def trace_stats(workload: Workload) -> dict:
    """The numbers ``kvsim trace stats`` prints (``--json`` prints this dict). A workload without requests
    has no token statistics (no mean, no p99): one error says so, not numpy's IndexError and warnings."""
    if not isinstance(workload, Workload):
        raise TypeError(f"trace_stats: workload must be a workloads.Workload, got {type(workload).__name__} "
                        "(a frame: workloads.workload_from_frame(df); a file: workloads.load_trace(path))")
    if len(workload) == 0:
        raise ValueError(f"trace_stats: workload {workload.name!r} has no requests")
    _, released = closed_loop_turns(workload)
    closed = workload.closed_loop
    times, duration, rate = offered_arrivals(workload)
    gaps = np.diff(times)
    cv = float(gaps.std() / gaps.mean()) if len(gaps) and gaps.mean() > 0 else None
    share, basis = prefix_reuse(workload)
    sessions = workload.session_id[workload.session_id != NONE]
    return {
        "name": workload.name,
        "source": workload.source,
        "rows": len(workload),
        "skipped_rows": workload.skipped_rows,
        "skipped_reasons": dict(sorted(workload.skipped_reasons.items())),
        "duration_s": duration,
        "rate_rps": rate,
        "timed_rows": len(times),
        "interarrival_cv": cv,
        "prompt_tokens": _summary(workload.prompt_tokens),
        "output_tokens": _summary(workload.output_tokens),
        "total_tokens": _summary(workload.prompt_tokens + workload.output_tokens),
        "num_seqs_mean": float(np.maximum(workload.n, workload.beam_width).mean()),
        "prefix_reuse_share": share,
        "prefix_reuse_basis": basis,
        "closed_loop_users": closed.users if closed else None,
        "sessions": len(np.unique(sessions)),
        "session_turns": len(sessions),  # rows in a session: a trace may mix them with single requests
        "released_turns": int(released.sum()),
        "think_time_mean_s": (closed.think_time_s if closed else
                              float(workload.think_time_s[released].mean()) if released.any() else None),
    }
