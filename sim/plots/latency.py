"""Latency figures: normalized latency against request rate (the paper's Fig. 12) and latency CDFs.

Normalized latency (mean over requests of end-to-end latency / output tokens) stays flat while a server keeps
up and shoots up once the arrival rate passes what it sustains; the curve's knee is where memory runs out, so
allocators that waste less move it right. The sustained rate is marked where a curve crosses the bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from sim.plots.data import SINGLE_RUN, require_columns, require_frame, require_names, tables_by_run
from sim.plots.style import (
    allocator_color,
    allocator_label,
    axis_label,
    figure_and_axes,
    new_figure,
    order_allocators,
)

METRIC_LABELS = {
    "ttft_s": "time to first token (s)",
    "tpot_s": "time per output token (s)",
    "e2e_s": "end-to-end latency (s)",
    "normalized_latency_s_per_tok": "normalized latency (s/token)",
}


def plot_latency_vs_rate(
    curves: pd.DataFrame,
    *,
    x: str = "rate",
    y: str = "normalized_latency_s_per_tok",
    bound: float | None = None,
    sustained: Mapping[str, float] | None = None,
    ax: Axes | None = None,
    ylim: tuple[float, float] | None = None,
    title: str | None = "Normalized latency vs request rate",
) -> Figure:
    """One line per allocator (rows: ``allocator``, ``x``, ``y``). ``bound`` draws the latency bound that
    defines the sustained rate; ``sustained`` (allocator -> rate) marks each allocator's rate on it.

    The y axis is cut at 3x the bound (or ``ylim``) as in the paper: past the knee latency grows without limit
    and would flatten everything else."""
    require_frame(curves, "plot_latency_vs_rate", "curves", "rows of allocator, rate and latency (a sweep table "
                  "over rate, or a reproduction's curves)")
    require_columns(curves, ["allocator", x, y], "latency curves")
    for column in (x, y):  # a sweep of traces replayed at their own timestamps has no `rate`: say so
        if curves[column].isna().all():
            raise ValueError(f"latency curves: column {column!r} has no values to plot (every row is empty); "
                             f"pass x= or y= naming a column that has them")
    fig, ax = figure_and_axes(ax, (6, 3.8))
    for name in order_allocators(curves["allocator"]):
        curve = curves[curves["allocator"] == name].sort_values(x)
        color = allocator_color(name)
        ax.plot(curve[x], curve[y], marker="o", markersize=3.5, color=color, label=allocator_label(name))
        if sustained is not None and bound is not None and name in sustained and np.isfinite(sustained[name]):
            ax.plot([sustained[name]], [bound], marker="v", markersize=9, color=color, markeredgecolor="black",
                    linestyle="none", zorder=5)
            # on a white box: the curve is near vertical where it crosses the bound, right through the label
            ax.annotate(f"{sustained[name]:.2f}", (sustained[name], bound), textcoords="offset points",
                        xytext=(0, 8), ha="center", fontsize="x-small", color=color, zorder=6,
                        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"})
    if bound is not None:
        ax.axhline(bound, color="#616161", linestyle="--", linewidth=0.8,
                   label=f"bound {bound:g} s/token" + (" (▼ sustained rate)" if sustained else ""))
    if ylim is not None:
        ax.set_ylim(*ylim)
    elif bound is not None:
        ax.set_ylim(0, 3 * bound)
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel("request rate (req/s)" if x == "rate" else axis_label(x))
    ax.set_ylabel(METRIC_LABELS.get(y, axis_label(y)))
    if title:
        ax.set_title(title)
    ax.legend(loc="upper left", fontsize="small", frameon=False)
    return fig


def values_for(requests: pd.DataFrame, metric: str, name: str = SINGLE_RUN) -> np.ndarray:
    """A metric's values over requests that were served and have one (rejected and missing left out)."""
    require_columns(requests, [metric], f"requests table of {name}")
    values = requests[metric]
    if "rejected" in requests.columns:
        values = values[~requests["rejected"].astype(bool)]
    return values.dropna().to_numpy(dtype=float)


def plot_latency_cdf(
    requests_by_allocator: Mapping[str, pd.DataFrame],
    *,
    metrics: Sequence[str] = ("ttft_s", "tpot_s"),
    log_x: bool = True,
) -> Figure:
    """Empirical CDFs of per-request latencies, one panel per metric, one line per allocator.

    Rejected requests and requests without a value (a one-token output has no TPOT) are left out; each line's
    label says how many requests it covers. ``log_x`` draws a log axis when the values span over 20x.
    ``requests_by_allocator`` maps run names to requests tables or `SimResult` objects; one table is one run."""
    requests_by_allocator = tables_by_run(requests_by_allocator, "requests", "plot_latency_cdf",
                                          "requests_by_allocator")
    if not requests_by_allocator:
        raise ValueError("no runs to plot")
    metrics = require_names("plot_latency_cdf", "metrics", metrics)
    names = order_allocators(requests_by_allocator)
    fig = new_figure((4.2 * len(metrics) + 1.5, 3.4))
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        by_name = {name: np.sort(values_for(requests_by_allocator[name], metric, name)) for name in names}
        positive = np.concatenate(list(by_name.values()))
        positive = positive[positive > 0]
        # A log axis only helps across decades; within one it would show no labelled tick at all.
        log_axis = log_x and len(positive) > 0 and positive.max() > 20 * positive.min()
        for name, values in by_name.items():
            if log_axis:
                values = values[values > 0]
            if len(values) == 0:
                continue
            share = np.arange(1, len(values) + 1) / len(values)
            ax.step(values, share, where="post", color=allocator_color(name),
                    label=f"{allocator_label(name)} (n={len(values)})")
        if log_axis:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
        if not ax.lines:  # every request rejected (or no value of this metric): say so, not a blank frame
            ax.text(0.5, 0.5, "no completed request", transform=ax.transAxes, ha="center", va="center",
                    color="0.4")
        ax.set_ylim(0, 1)
        ax.set_xlabel(METRIC_LABELS.get(metric, axis_label(metric)))
        ax.set_ylabel("share of requests")
        ax.grid(alpha=0.3)
    if axes[-1].get_legend_handles_labels()[0]:  # no line without a completed request (all rejected)
        axes[-1].legend(loc="lower right", fontsize="x-small", frameon=False)
    return fig
