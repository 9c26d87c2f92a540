"""Block-size sweep: waste and throughput against the paged allocator's block size.

Small blocks waste little of a sequence's last block but mean more blocks to manage and a slower paged kernel;
large blocks waste up to a block per sequence, which hurts most when sequences are short (Alpaca). The paper
finds 16-128 best on ShareGPT and 16-32 on Alpaca.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from sim.plots.data import require_columns, require_frame, require_names
from sim.plots.latency import METRIC_LABELS
from sim.plots.style import SERIES_COLORS, axis_label, new_figure, percent_axis

PANEL_LABELS = {
    "waste_frac": "waste: internal + external frag.",
    "internal_frag_frac": "internal fragmentation",
    "throughput_tok_s": "throughput (tokens/s)",
    "throughput_req_s": "throughput (requests/s)",
    "mean_running": "mean running requests",
    **METRIC_LABELS,
}


def plot_block_size_sweep(
    results: pd.DataFrame,
    *,
    panels: Sequence[str] = ("waste_frac", "throughput_tok_s"),
    hue: str | None = "workload",
    x: str = "block_size",
    log_panels: Sequence[str] = ("normalized_latency_s_per_tok",),
) -> Figure:
    """One panel per metric against block size (log2 axis), one line per ``hue`` value (e.g. workload).

    ``waste_frac`` is derived as ``internal_frag_frac + external_frag_frac`` when the table lacks it; columns
    ending in ``_frac`` are drawn as percentages. ``log_panels`` get a log y axis (latency past a knee grows by
    orders of magnitude and would flatten the other lines)."""
    results = require_frame(results, "plot_block_size_sweep", "results",
                            "one row per run with a block_size column (a sweep table over block_size)").copy()
    panels = require_names("plot_block_size_sweep", "panels", panels)
    if "waste_frac" in panels and "waste_frac" not in results.columns:
        require_columns(results, ["internal_frag_frac", "external_frag_frac"], "block-size results")
        results["waste_frac"] = results["internal_frag_frac"] + results["external_frag_frac"]
    if hue is not None and hue not in results.columns:
        hue = None
    require_columns(results, [x, *panels], "block-size results")
    groups = [(None, results)] if hue is None else list(results.groupby(hue, sort=False))
    sizes = sorted(results[x].unique())
    fig = new_figure((4.0 * len(panels) + 1.0, 3.4))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels, strict=True):
        for i, (key, group) in enumerate(groups):
            group = group.sort_values(x)
            ax.plot(group[x], group[panel], marker="o", color=SERIES_COLORS[i % len(SERIES_COLORS)],
                    label=str(key) if key is not None else None)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(int(s)) for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel(axis_label(x))
        ax.set_ylabel(PANEL_LABELS.get(panel, axis_label(panel)))
        if panel.endswith("_frac"):
            percent_axis(ax)
        if panel in log_panels:
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
        else:
            ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    if hue is not None:
        axes[0].legend(title=hue, fontsize="small", frameon=False)
    return fig
