"""Batch size: how many requests run at once, the figure that turns memory waste into throughput.

The paper's Fig. 13 plots the mean number of batched requests per system; a memory-bound server batches as
many requests as its KV memory holds, so less waste means bigger batches. ``mean_running`` in a run's summary
is that mean (time-weighted over the run).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from sim.plots.data import (
    require_columns,
    require_known,
    step_points,
    summaries_frame,
    tables_by_run,
    time_binned,
)
from sim.plots.style import (
    PAPER_HATCH,
    allocator_color,
    allocator_label,
    allocator_tick_label,
    axis_label,
    figure_and_axes,
    order_allocators,
    run_colors,
)


def plot_batch_sizes(
    summaries: Mapping[str, Mapping] | pd.DataFrame,
    *,
    reference: Mapping[str, float] | None = None,
    ax: Axes | None = None,
    title: str | None = "Mean batch size",
) -> Figure:
    """Bars of each allocator's ``mean_running``, with the reference value (e.g. the paper's) hatched beside.

    ``summaries`` maps run names to summaries or `SimResult` objects (`sim.plots.data.summaries_frame` says what
    else it takes); ``reference`` must name runs drawn."""
    frame = summaries_frame(summaries, "plot_batch_sizes")
    require_columns(frame, ["mean_running"], "summaries")
    names = order_allocators(frame.index)
    reference = reference or {}
    require_known("plot_batch_sizes", "reference", reference, names, "runs plotted")
    fig, ax = figure_and_axes(ax, (1.6 + 1.3 * len(names), 3.6))
    width = 0.38
    for i, name in enumerate(names):
        color = allocator_color(name)
        ours = float(frame.loc[name, "mean_running"])
        x = i - width / 2 - 0.01 if name in reference else i
        ax.bar(x, ours, width, color=color)
        ax.text(x, ours, f"{ours:.2f}", ha="center", va="bottom", fontsize="x-small")
        if name in reference:
            theirs = float(reference[name])
            x = i + width / 2 + 0.01
            ax.bar(x, theirs, width, facecolor="white", edgecolor=color, hatch=PAPER_HATCH, linewidth=1)
            ax.text(x, theirs, f"{theirs:.2f}", ha="center", va="bottom", fontsize="x-small")
    ax.set_xticks(np.arange(len(names)), [allocator_tick_label(n) for n in names])
    ax.set_ylabel("mean running requests")
    ax.margins(y=0.12)
    if title:
        ax.set_title(title)
    if reference:
        ax.legend(handles=[Patch(color="#616161", label="kvsim"),
                           Patch(facecolor="white", edgecolor="#616161", hatch=PAPER_HATCH, label="paper")],
                  loc="upper left", fontsize="small", frameon=False)
    return fig


def plot_batch_over_time(
    steps_by_allocator: Mapping[str, pd.DataFrame],
    *,
    ax: Axes | None = None,
    column: str = "running",
    max_points: int = 400,
    title: str | None = "Batch size over time",
) -> Figure:
    """One line per allocator: the time-averaged number of running requests (or another steps column).
    ``steps_by_allocator`` maps run names to steps tables or `SimResult` objects; one table is one run."""
    steps_by_allocator = tables_by_run(steps_by_allocator, "steps", "plot_batch_over_time", "steps_by_allocator")
    if not steps_by_allocator:
        raise ValueError("no runs to plot")
    fig, ax = figure_and_axes(ax, (8, 3.2))
    names = order_allocators(steps_by_allocator)
    colors = run_colors(names)  # runs named other than allocators (deployments, settings) get distinct colours
    for name in names:
        steps = steps_by_allocator[name]
        binned = step_points(time_binned(steps, [column], max_points=max_points))  # a fleet's: replicas together
        replicas = steps["replica"].nunique() if "replica" in steps.columns else 1
        label = allocator_label(name) + (f" ({replicas} replicas together)" if replicas > 1 else "")
        ax.step(binned["time_s"], binned[column], where="post", color=colors[name], label=label,
                linewidth=1.2)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("running requests" if column == "running" else axis_label(column))
    ax.set_ylim(bottom=0)
    if title:
        ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False)
    return fig
