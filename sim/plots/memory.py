"""Memory over time: where the KV capacity went, as stacked areas of the five shares, for one run or several.

The stacked areas always sum to 100% of capacity (the allocators' accounting guarantees the five shares add
up exactly), so the eye reads each band's height as its share: a tall green band is memory doing useful work,
orange and red are waste, grey is idle.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from sim.plots.data import require_columns, run_table, step_points, tables_by_run, time_binned
from sim.plots.style import (
    SHARE_COLORS,
    SHARE_LABELS,
    SHARES,
    allocator_label,
    figure_and_axes,
    new_figure,
    order_allocators,
    percent_axis,
)


def memory_shares_over_time(steps: pd.DataFrame, max_points: int = 600) -> pd.DataFrame:
    """The five shares as fractions of capacity, time-binned: columns ``time_s`` and one per share."""
    require_columns(steps, ["capacity", *SHARES], "steps table")
    binned = time_binned(steps, list(SHARES) + ["capacity"], max_points=max_points)
    for share in SHARES:
        binned[share] = binned[share] / binned["capacity"]
    return binned.drop(columns=["capacity"])


def plot_memory_over_time(
    steps: pd.DataFrame,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    legend: bool = True,
    max_points: int = 600,
) -> Figure:
    """Stacked areas of token states, reservation, internal and external fragmentation and free, against
    simulated time, as a share of KV capacity. ``steps`` is one run's steps table or its `SimResult`."""
    steps = run_table(steps, "steps", "plot_memory_over_time", "steps", several="plot_memory_comparison")
    shares = step_points(memory_shares_over_time(steps, max_points=max_points))
    fig, ax = figure_and_axes(ax, (8, 3.2))
    ax.stackplot(
        shares["time_s"],
        *(shares[s] for s in SHARES),
        labels=[SHARE_LABELS[s] for s in SHARES],
        colors=[SHARE_COLORS[s] for s in SHARES],
        step="post",
        linewidth=0,
    )
    ax.set_xlim(shares["time_s"].iloc[0], shares["time_s"].iloc[-1])
    ax.set_ylim(0, 1)
    percent_axis(ax)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("share of KV capacity")
    if title:
        ax.set_title(title)
    if legend:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False)
    return fig


def _end_time(steps: pd.DataFrame) -> float:
    """When the last row's state ends (the panels share one time axis, long enough for the longest run)."""
    last = steps["time_s"].to_numpy().argmax()
    return float(steps["time_s"].iloc[last] + steps["duration_s"].iloc[last])


def plot_memory_comparison(steps_by_allocator: Mapping[str, pd.DataFrame], *, max_points: int = 400) -> Figure:
    """Small multiples: one memory-over-time panel per allocator on shared axes, one legend for all.
    ``steps_by_allocator`` maps run names to steps tables or `SimResult` objects; one table is one run."""
    steps_by_allocator = tables_by_run(steps_by_allocator, "steps", "plot_memory_comparison", "steps_by_allocator")
    if not steps_by_allocator:
        raise ValueError("no runs to compare")
    names = order_allocators(steps_by_allocator)
    fig = new_figure((9, 1.2 + 1.7 * len(names)))
    axes = fig.subplots(len(names), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    for ax, name in zip(axes, names, strict=True):
        plot_memory_over_time(steps_by_allocator[name], ax=ax, legend=False, max_points=max_points)
        ax.set_title(allocator_label(name), loc="left", fontsize="medium")
        ax.set_xlabel("")
        ax.set_ylabel("")
    frames = [steps_by_allocator[n] for n in names]
    axes[-1].set_xlim(min(float(f["time_s"].min()) for f in frames), max(_end_time(f) for f in frames))
    axes[-1].set_xlabel("simulated time (s)")
    fig.supylabel("share of KV capacity")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncols=len(SHARES), fontsize="small", frameon=False)
    return fig
