"""Fleet figures: each replica's KV memory and queue over time, and prefix hit rate by router.

The first reads a fleet run's steps table (its ``replica`` column tells the replicas apart): a router that
balances badly shows as replicas whose memory fills and whose queue grows while others idle. The second
reads summaries, one row per run (a sweep table over ``router``, or `router_table`'s; the rows of `kvsim plan
--json` nest each summary under ``summary``, so flatten them first).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sim.plots.data import require_columns, require_frame, run_table, step_points, time_binned
from sim.plots.style import SERIES_COLORS, new_figure, percent_axis
from sim.plots.sweep import swept_fields


def plot_replicas_over_time(steps: pd.DataFrame, *, max_points: int = 400, title: str | None = None) -> Figure:
    """Two panels sharing the time axis: used KV blocks (share of each replica's pool) and waiting requests,
    one line per replica, time-weighted over at most ``max_points`` bins. ``steps`` is the fleet run's steps
    table or its `SimResult`."""
    steps = run_table(steps, "steps", "plot_replicas_over_time", "steps")
    require_columns(steps, ["replica", "time_s", "duration_s", "used_blocks", "total_blocks", "waiting"],
                    "steps table")
    replicas = sorted(steps["replica"].unique())
    fig = new_figure((8.0, 5.2))
    mem_ax, queue_ax = fig.subplots(2, 1, sharex=True)
    thin = len(replicas) > 8
    for i, replica in enumerate(replicas):
        rows = steps[steps["replica"] == replica]
        binned = step_points(time_binned(rows, ["used_blocks", "waiting"], max_points))
        total = float(rows["total_blocks"].iloc[0]) or 1.0
        style = dict(color=SERIES_COLORS[i % len(SERIES_COLORS)], linewidth=0.7 if thin else 1.2,
                     alpha=0.6 if thin else 1.0, label=None if thin else f"replica {replica}")
        mem_ax.plot(binned["time_s"], binned["used_blocks"] / total, **style)
        queue_ax.plot(binned["time_s"], binned["waiting"], **style)
    mem_ax.set_ylabel("KV blocks in use")
    percent_axis(mem_ax)
    queue_ax.set_ylabel("waiting requests")
    queue_ax.set_xlabel("simulated time (s)")
    if not thin:
        mem_ax.legend(loc="upper left", fontsize="small", ncols=min(len(replicas), 4))
    mem_ax.set_title(title or f"{len(replicas)} replicas: memory and queue over time")
    return fig


def _refuse_mixed_bars(results: pd.DataFrame, x: str | None) -> None:
    """ValueError when one bar (a router, at one value of ``x``) would average rows of different fleets."""
    keys = ["router", *([x] if x else [])]
    for key, rows in results.groupby(keys, sort=False, dropna=False):
        varied = [f for f in swept_fields(rows) if f not in (*keys, "seed")]
        if varied:
            at = f" at {x}={key[1]!r}" if x else ""
            raise ValueError(f"plot_hit_rate_by_router: router {key[0]!r}{at} has {len(rows)} rows that differ in "
                             f"{', '.join(varied)}, and one bar would average them: pass x={varied[0]!r} "
                             f"(or keep the rows of one {varied[0]} value)")


def plot_hit_rate_by_router(results: pd.DataFrame, *, x: str | None = None,
                            metric: str = "prefix_hit_frac") -> Figure:
    """Bars of ``metric`` (default the prefix hit rate) per ``router``; with ``x`` (e.g. ``replicas``), one
    group of bars per value of that column.

    A bar is the mean of its rows, so rows of one router that differ in a configuration field other than
    ``x`` (`router_table` gives a row per replica count) are refused, naming the field: their mean is a hit
    rate no fleet had. Rows differing only in ``seed`` are replicates and are averaged."""
    require_frame(results, "plot_hit_rate_by_router", "results", "one row per run with a router column "
                  "(router_table's, a sweep table over router)")
    require_columns(results, ["router", metric, *([x] if x else [])], "results table")
    _refuse_mixed_bars(results, x)
    routers = list(dict.fromkeys(results["router"]))
    groups = list(dict.fromkeys(results[x])) if x else [None]
    fig = new_figure((max(4.0, 1.2 * len(groups) * len(routers) / 2 + 2.5), 3.4))
    ax = fig.add_subplot()
    width = 0.8 / len(routers)
    for j, router in enumerate(routers):
        rows = results[results["router"] == router]
        values = [float(rows.loc[rows[x] == g, metric].mean()) if x else float(rows[metric].mean()) for g in groups]
        pos = np.arange(len(groups)) + (j - (len(routers) - 1) / 2) * width
        ax.bar(pos, values, width, color=SERIES_COLORS[j % len(SERIES_COLORS)], label=router)
    ax.set_xticks(np.arange(len(groups)), [str(g) for g in groups] if x else [""])
    if x:
        ax.set_xlabel(x)
    ax.set_ylabel("prefix hit rate" if metric == "prefix_hit_frac" else metric)
    if metric.endswith("_frac"):
        percent_axis(ax)
    ax.legend(fontsize="small")
    return fig
