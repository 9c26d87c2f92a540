"""Which deployment holds the most KV: one bar per deployment of `sim.deployment_memory.capacity_table`, labelled
with its figure and, where the table has it, the requests of the table's length that fit at once."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import StrMethodFormatter

from sim.plots.data import require_columns, require_frame
from sim.plots.style import SERIES_COLORS, axis_label, figure_and_axes

CAPACITY_LABELS = {"kv_capacity_tokens_total": "KV token slots, all GPUs of the deployment",
                   "kv_capacity_tokens": "KV token slots (one data-parallel rank's pool)",
                   "kv_capacity_tokens_per_gpu": "KV token slots per GPU",
                   "max_concurrent_requests_total": "requests that fit at once, all ranks"}
"""Axis labels of the table's columns a reader compares deployments by (others: `axis_label`)."""


def plot_capacity(table: pd.DataFrame, column: str = "kv_capacity_tokens_total", *, ax: Axes | None = None,
                  title: str | None = None) -> Figure:
    """Horizontal bars of ``column`` for each deployment (the table's index, top to bottom in its order), each
    labelled with its value and, when the table has ``max_concurrent_requests_total`` and another column is
    drawn, the requests of the table's ``prompt_len`` + ``output_len`` tokens that fit at once: slots only buy
    what the requests' lengths let them hold."""
    require_frame(table, "plot_capacity", "table", "deployments (sim.deployment_memory.capacity_table())")
    require_columns(table, [column], "deployments")
    values = pd.to_numeric(table[column], errors="raise").to_numpy(dtype=float)
    fig, ax = figure_and_axes(ax, (8, 0.45 * len(table) + 1.2))
    y = np.arange(len(table))
    ax.barh(y, values, color=SERIES_COLORS[0])
    requests = "max_concurrent_requests_total" in table.columns and column != "max_concurrent_requests_total"
    for yi, value, (_, row) in zip(y, values, table.iterrows(), strict=True):
        text = f" {value:,.0f}"
        if requests:
            text += f"  ({row['max_concurrent_requests_total']:,} requests)"
        ax.text(value, yi, text, va="center", fontsize="small")
    ax.set_yticks(y, [str(label) for label in table.index], fontsize="small")
    ax.invert_yaxis()
    ax.set_xlim(right=values.max() * 1.45)
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))  # token counts in full, not in units of 1e6
    ax.set_xlabel(CAPACITY_LABELS.get(column, axis_label(column)))
    lengths = ["prompt_len", "output_len"]
    if title is None and requests and set(lengths) <= set(table.columns) and len(table[lengths].drop_duplicates()) == 1:
        first = table.iloc[0]
        title = f"Requests of {first['prompt_len']:,} prompt + {first['output_len']:,} output tokens in brackets"
    if title:
        ax.set_title(title, fontsize="medium")
    return fig
