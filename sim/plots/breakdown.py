"""The waste breakdown as the paper's Fig. 2: one bar per allocator, its KV memory split into shares.

Ours are measured time averages from each run's summary (five shares); the paper's bars, drawn hatched beside
ours, have four (its "external fragmentation and others" is our external share plus free), and vLLM's bar only
says its waste is about 3.7% in all, so that segment is drawn unsplit.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from sim.plots.data import require_columns, require_known, summaries_frame
from sim.plots.style import (
    PAPER_HATCH,
    SHARE_COLORS,
    SHARE_LABELS,
    SHARES,
    allocator_tick_label,
    figure_and_axes,
    order_allocators,
    percent_axis,
)

REFERENCE_SHARES = ("token_states", "reservation", "internal_frag", "external_and_free", "waste_together")
"""Keys a reference (paper) bar may give, bottom to top; missing keys are drawn as nothing."""


def _stack(ax: Axes, x: float, width: float, parts: list[tuple[str, float]], hatch: str | None) -> None:
    bottom = 0.0
    for key, value in parts:
        if value <= 0:
            continue
        ax.bar(x, value, width, bottom=bottom, color=SHARE_COLORS[key], hatch=hatch,
               edgecolor="white" if hatch is None else "#424242", linewidth=0.5)
        if value >= 0.04:
            ax.text(x, bottom + value / 2, f"{value:.0%}", ha="center", va="center", fontsize="x-small",
                    color="white" if key in ("token_states", "internal_frag", "external_frag",
                                             "external_and_free") else "black")
        bottom += value


def plot_breakdown(
    summaries: Mapping[str, Mapping] | pd.DataFrame,
    *,
    reference: Mapping[str, Mapping[str, float]] | None = None,
    ax: Axes | None = None,
    title: str | None = "Average share of KV memory",
) -> Figure:
    """Stacked bars of the time-averaged shares (summary keys ``*_frac``), with reference bars beside.

    ``summaries`` maps run names to summaries or `SimResult` objects (`sim.plots.data.summaries_frame` says
    what else it takes). ``reference`` maps a run drawn to shares keyed by `REFERENCE_SHARES` (e.g. the
    paper's Fig. 2 values); runs it does not name get only our bar. A name not drawn or a share not in
    `REFERENCE_SHARES` is refused: the bar would be missing without a word.
    """
    frame = summaries_frame(summaries, "plot_breakdown")
    require_columns(frame, [f"{s}_frac" for s in SHARES], "summaries")
    names = order_allocators(frame.index)
    reference = reference or {}
    require_known("plot_breakdown", "reference", reference, names, "runs plotted")
    for name, shares in reference.items():
        if not isinstance(shares, Mapping):
            raise ValueError(f"plot_breakdown: `reference` must map a run to its shares "
                             f"({', '.join(REFERENCE_SHARES)}), but {name!r} maps to {shares!r}")
        require_known("plot_breakdown", f"reference[{name!r}]", shares, REFERENCE_SHARES, "shares")
    # the legend takes about 2.4 inches beside the axes: at least 6 inches in all, so that one run's bar
    # still leaves the title room over its axes
    fig, ax = figure_and_axes(ax, (max(6.0, 3.6 + 1.5 * len(names)), 4.2))
    width = 0.38
    for i, name in enumerate(names):
        ours = [(s, float(frame.loc[name, f"{s}_frac"])) for s in SHARES]
        if name in reference:
            _stack(ax, i - width / 2 - 0.01, width, ours, None)
            theirs = [(k, float(reference[name][k])) for k in REFERENCE_SHARES if k in reference[name]]
            _stack(ax, i + width / 2 + 0.01, width, theirs, PAPER_HATCH)
        else:
            _stack(ax, i, width, ours, None)
    ax.set_xticks(np.arange(len(names)), [allocator_tick_label(n) for n in names])
    if reference:
        ax.set_xticks(
            [i + d for i, n in enumerate(names) if n in reference for d in (-width / 2, width / 2)],
            ["kvsim", "paper"] * sum(n in reference for n in names), minor=True)
        ax.tick_params(axis="x", which="minor", labelsize="x-small", length=0, pad=2)
        ax.tick_params(axis="x", which="major", pad=12, length=0)
    ax.set_ylim(0, 1)
    ax.set_xlim(-0.6, len(names) - 0.4)
    percent_axis(ax)
    ax.set_ylabel("share of KV capacity (time average)")
    if title:
        ax.set_title(title)
    handles = [Patch(color=SHARE_COLORS[s], label=SHARE_LABELS[s]) for s in SHARES]
    if reference:
        handles.append(Patch(facecolor=SHARE_COLORS["waste_together"], hatch=PAPER_HATCH, edgecolor="#424242",
                             label="paper: waste not split"))
        handles.append(Patch(facecolor=SHARE_COLORS["external_and_free"], hatch=PAPER_HATCH, edgecolor="#424242",
                             label="paper: external frag. & others\n(our external + free)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False)
    return fig
