"""Sweep results: a metric against one grid axis, one line per value of another; SLO-sustained rates.

A sweep table usually varies more axes than a figure has dimensions (seeds, above all). The lines are the
mean over the axes not drawn, and a shaded band spans their minimum to maximum, so replication noise is
visible rather than hidden in a mean; the title names the axes averaged over and how many values each has.
Axes are labelled with units (`style.axis_label`), not column names. Failed points (``status`` other than
ok) are left out.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from sim.plots.data import require_columns, require_frame
from sim.plots.style import (
    SERIES_COLORS,
    allocator_color,
    allocator_label,
    axis_label,
    figure_and_axes,
    order_allocators,
    percent_axis,
)


def _ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"] if "status" in df.columns else df


def _config_fields() -> list[str]:
    """The configuration fields a sweep table's rows carry (`SimConfig`'s, in field order): what tells a
    configuration (an axis, a repeat) from a result column."""
    from sim.kernel.config import SimConfig

    return [f.name for f in dataclasses.fields(SimConfig)]


def _latest_rows(rows: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """One row per configuration, and how many older ones were left out. A store keeps every row it was given,
    and a point re-run because its trace file (or kvsim) changed has a new id beside the old row: averaged
    together they read as replicates. A store lists its newest sweep first (`ResultStore.consolidate`)."""
    fields = [name for name in _config_fields() if name in rows.columns]
    if not fields:
        return rows, 0
    older = rows[fields].astype(str).duplicated(keep="first").to_numpy()
    return rows[~older], int(older.sum())


def _series(df: pd.DataFrame, hue: str | None) -> list[tuple[object, pd.DataFrame]]:
    """Groups in a stable order: allocators in the paper's order, other values sorted."""
    if hue is None:
        return [(None, df)]
    keys = list(dict.fromkeys(df[hue].tolist()))
    if hue == "allocator":
        keys = order_allocators(keys)
    else:
        keys = sorted(keys, key=lambda k: (k is None, str(type(k)), k if k is not None else 0))
    return [(key, df[df[hue] == key]) for key in keys]


def _color(hue: str | None, key: object, i: int) -> str:
    if hue == "allocator" and isinstance(key, str):
        return allocator_color(key)
    return SERIES_COLORS[i % len(SERIES_COLORS)]


def _label(hue: str | None, key: object) -> str | None:
    if hue is None:
        return None
    return allocator_label(key) if hue == "allocator" and isinstance(key, str) else f"{hue}={key}"


def _x_positions(df: pd.DataFrame, x: str, ax: Axes) -> tuple[dict[object, float], str]:
    """Numeric axes plot at their values (log2 when they span 8x or more, as block sizes and rates do),
    joined by lines; anything else (names, booleans) at evenly spaced, labelled positions, unjoined, since
    a line between two allocators would suggest values in between. Returns positions and the line style."""
    values = list(dict.fromkeys(df[x].dropna().tolist()))
    numeric = all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
                  for v in values)
    if numeric:
        values = sorted(values)
        if values and values[0] > 0 and values[-1] / values[0] >= 8:
            ax.set_xscale("log", base=2)
            ax.set_xticks(values, [f"{v:g}" for v in values])
            ax.minorticks_off()
        return {v: float(v) for v in values}, "-"
    if x == "allocator":
        values = order_allocators(values)
    ax.set_xticks(range(len(values)), [allocator_label(v) if x == "allocator" else str(v) for v in values])
    ax.set_xlim(-0.5, len(values) - 0.5)
    return {v: float(i) for i, v in enumerate(values)}, "none"


def swept_fields(df: pd.DataFrame) -> list[str]:
    """Configuration fields that take more than one value among the table's rows, in field order."""
    return [n for n in _config_fields() if n in df.columns and df[n].nunique(dropna=False) > 1]


def _numeric_metric(rows: pd.DataFrame, metric: str) -> pd.Series:
    """``rows[metric]`` as numbers, or a one-line error naming the metrics that are: a text column (``status``,
    ``allocator``) failed in pandas' mean with a traceback, and a column empty in every point drew a blank
    figure."""
    values = rows[metric]
    if not pd.api.types.is_numeric_dtype(values):
        values = pd.to_numeric(values, errors="coerce")
    if values.notna().any():
        return values
    config = set(_config_fields())
    numeric = [c for c in rows.columns if c not in config and pd.api.types.is_numeric_dtype(rows[c])
               and rows[c].notna().any()]
    raise ValueError(f"--metric {metric}: no number in any successful point; metrics with numbers here: "
                     f"{', '.join(numeric[:12])}{', ...' if len(numeric) > 12 else ''}")


def plot_sweep(df: pd.DataFrame, metric: str = "normalized_latency_s_per_tok", x: str | None = None,
               hue: str | None = None, *, ax: Axes | None = None) -> Figure:
    """``metric`` against axis ``x``, one line per value of ``hue``; the mean over the other axes, with
    their min-max band where a point of the line aggregates several rows.

    ``x`` defaults to ``rate`` when the sweep varies it (the paper's latency-against-load figure), else to
    the first configuration field that varies. ``hue`` defaults to ``allocator`` when that varies and is not
    ``x``, else to the first other varied field but ``seed``: averaging allocators (whose latencies differ
    a thousandfold) into one line would hide the comparison the sweep was run for; seeds are replicates."""
    require_frame(df, "plot_sweep", "df", "sweep results (run_sweep(...).table, or load_results)")
    rows, superseded = _latest_rows(_ok_rows(df))
    if rows.empty:
        raise ValueError("sweep results have no successful points to plot")
    swept = swept_fields(rows)
    if x is None:
        if not swept:
            raise ValueError("the sweep varies no configuration field; name the x axis")
        x = "rate" if "rate" in swept else swept[0]
    if hue is None:
        others = [f for f in swept if f not in (x, "seed")]
        hue = "allocator" if "allocator" in others else (others[0] if others else None)
    require_columns(rows, [metric, x] + ([hue] if hue else []), "sweep results")
    rows = rows.assign(**{metric: _numeric_metric(rows, metric)})
    fig, ax = figure_and_axes(ax, (6.0, 4.0))
    positions, linestyle = _x_positions(rows, x, ax)
    for i, (key, group) in enumerate(_series(rows, hue)):
        stats = group.groupby(x, sort=False)[metric].agg(["mean", "min", "max", "count"])
        stats = stats.loc[[v for v in positions if v in stats.index]]
        xs = [positions[v] for v in stats.index]
        color = _color(hue, key, i)
        ax.plot(xs, stats["mean"].astype(float), marker="o", linestyle=linestyle, color=color,
                label=_label(hue, key))
        if (stats["count"] > 1).any():
            mean, low, high = (stats[c].astype(float).to_numpy() for c in ("mean", "min", "max"))
            if linestyle == "none":  # separate categories: whiskers instead of a band between them
                ax.errorbar(xs, mean, yerr=[mean - low, high - mean], fmt="none", color=color, capsize=3)
            else:
                ax.fill_between(xs, low, high, color=color, alpha=0.15, linewidth=0)
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(axis_label(metric))
    averaged = [f"{f} ({rows[f].nunique(dropna=False)} values)" for f in swept if f not in (x, hue)]
    title = ["mean over " + ", ".join(averaged) + "; band: min-max"] if averaged else []
    if superseded:
        title.append(f"{superseded} older row(s) of the same configurations left out")
    if title:
        ax.set_title("; ".join(title), fontsize="small")
    if metric.endswith("_frac"):
        percent_axis(ax)
    ax.grid(alpha=0.3)
    if hue is not None:
        ax.legend(fontsize="small", frameon=False)
    return fig


def plot_slo(df: pd.DataFrame, x: str = "allocator", hue: str | None = None, *,
             ax: Axes | None = None) -> Figure:
    """The sustained rate of each configuration against ``x`` (one line per ``hue``), with an error bar up to
    the lowest rate found failing: the true limit lies in that bracket. Searches that never met the target,
    or failed, are left out; searches that met it up to the rate ceiling are drawn at the ceiling."""
    require_frame(df, "plot_slo", "df", "SLO search results (run_slo(...).table)")
    require_columns(df, ["sustained_rate", "rate_fail", x] + ([hue] if hue else []), "SLO results")
    rows = df[np.isfinite(df["sustained_rate"].astype(float))]
    if rows.empty:
        raise ValueError("no configuration met the target at any rate tried; nothing to plot")
    fig, ax = figure_and_axes(ax, (6.0, 4.0))
    positions, linestyle = _x_positions(rows, x, ax)
    for i, (key, group) in enumerate(_series(rows, hue)):
        stats = group.groupby(x, sort=False).agg(low=("sustained_rate", "mean"), high=("rate_fail", "mean"))
        stats = stats.loc[[v for v in positions if v in stats.index]]
        xs = [positions[v] for v in stats.index]
        low = stats["low"].astype(float).to_numpy()
        upper = np.nan_to_num(stats["high"].astype(float).to_numpy() - low, nan=0.0)
        ax.errorbar(xs, low, yerr=[np.zeros_like(low), upper], marker="o", capsize=3, linestyle=linestyle,
                    color=_color(hue, key, i), label=_label(hue, key))
    target = rows["target"].iloc[0] if "target" in rows.columns else None
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel("sustained request rate (req/s)")
    averaged = [f"{f} ({rows[f].nunique(dropna=False)} values)" for f in swept_fields(rows) if f not in (x, hue)]
    note = "; mean over " + ", ".join(averaged) if averaged else ""
    if target or note:
        ax.set_title(f"highest rate meeting {target}{note}" if target else note.removeprefix("; "),
                     fontsize="medium" if not note else "small")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if hue is not None:
        ax.legend(fontsize="small", frameon=False)
    return fig
