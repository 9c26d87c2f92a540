"""Memory saved by sharing: parallel sampling and beam search with copy-on-write blocks (the paper's Fig. 15).

Sampled sequences and beams share their prompt's blocks (and beams much of their output) until they diverge;
the saving is the blocks that exist once but are referenced several times, over the blocks that would exist
without sharing. It grows with the number of sequences and with how long the shared prompt is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sim.plots.data import require_columns, require_frame
from sim.plots.style import SERIES_COLORS, new_figure, percent_axis


def plot_sharing_savings(results: pd.DataFrame, *, metric: str = "shared_saved_frac") -> Figure:
    """One panel per sharing ``mode`` (e.g. parallel sampling, beam search): bars of ``metric`` against
    ``width`` (samples or beams), one bar per ``workload``."""
    require_frame(results, "plot_sharing_savings", "results", "rows of mode, width and workload (a "
                  "reproduction's sharing table)")
    require_columns(results, ["mode", "width", "workload", metric], "sharing results")
    repeated = results.duplicated(["mode", "workload", "width"])
    if repeated.any():  # one bar per (mode, workload, width): two rows would have to be drawn as one
        row = results.loc[repeated.idxmax()]
        raise ValueError(f"sharing results have more than one row for mode {row['mode']}, workload "
                         f"{row['workload']}, width {row['width']}")
    modes = list(dict.fromkeys(results["mode"]))
    workloads = list(dict.fromkeys(results["workload"]))
    fig = new_figure((4.2 * len(modes) + 0.8, 3.4))
    axes = fig.subplots(1, len(modes), squeeze=False, sharey=True)[0]
    bar = 0.8 / len(workloads)
    for ax, mode in zip(axes, modes, strict=True):
        rows = results[results["mode"] == mode]
        widths = sorted(rows["width"].unique())
        for j, workload in enumerate(workloads):
            sub = rows[rows["workload"] == workload].set_index("width")
            values = [float(sub.loc[w, metric]) if w in sub.index else np.nan for w in widths]
            x = np.arange(len(widths)) + (j - (len(workloads) - 1) / 2) * bar
            ax.bar(x, values, bar, color=SERIES_COLORS[j % len(SERIES_COLORS)], label=workload)
            for xi, v in zip(x, values, strict=True):
                if np.isfinite(v):
                    ax.text(xi, v, f"{v:.1%}", ha="center", va="bottom", fontsize="x-small")
        ax.set_xticks(np.arange(len(widths)), [str(int(w)) for w in widths])
        ax.set_xlabel("beam width" if "beam" in str(mode) else "parallel samples (n)")
        ax.set_title(str(mode))
        ax.margins(y=0.15)
        percent_axis(ax)
    axes[0].set_ylabel("KV memory saved by sharing")
    axes[-1].legend(fontsize="small", frameon=False, loc="upper left")
    return fig
