"""Turning kvsim's result tables into what a figure draws: checked columns, summaries as a frame, time bins.

The steps table has one row per event-grain step, and an hour of simulation can hold a hundred thousand of
them. A figure needs a thousand points at most, so `time_binned` averages each column over equal time bins,
weighting every row by how long its state held (exactly, by integrating the step function).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd


def require_columns(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """Raise ValueError naming the table and every missing column, before any drawing starts. A table read
    from a file (``df.attrs["source"]``, set by `kvsim plot`) is named by its path too: of several runs'
    tables, the user must know which one is wrong."""
    if df.attrs.get("source"):
        what = f"{what} {df.attrs['source']}"
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what} lacks column(s) {missing}; it has {list(df.columns)}")
    if df.empty:
        raise ValueError(f"{what} has no rows to plot")


def summaries_frame(summaries: Mapping[str, Mapping] | pd.DataFrame) -> pd.DataFrame:
    """Summaries (allocator -> summary dict, or a frame with an ``allocator`` column) as a frame indexed by
    allocator, one row each."""
    if isinstance(summaries, pd.DataFrame):
        require_columns(summaries, ["allocator"], "summaries table")
        frame = summaries.set_index("allocator")
    else:
        if not summaries:
            raise ValueError("no summaries to plot")
        frame = pd.DataFrame.from_dict({k: dict(v) for k, v in summaries.items()}, orient="index")
        frame = frame.drop(columns=["allocator"], errors="ignore")
    if frame.index.has_duplicates:
        raise ValueError(f"summaries name an allocator twice: {sorted(frame.index[frame.index.duplicated()])}")
    return frame


def time_binned(steps: pd.DataFrame, columns: list[str], max_points: int = 600) -> pd.DataFrame:
    """Time-weighted means of ``columns`` over at most ``max_points`` equal bins of simulated time.

    Each row's values hold from its ``time_s`` until the next row starts (the last row for its own
    ``duration_s``), so an idle gap between steps keeps the state the last step left. Returns a frame with
    ``time_s`` (bin start), ``bin_s`` (bin width) and the averaged columns.
    """
    require_columns(steps, ["time_s", "duration_s", *columns], "steps table")
    steps = steps.sort_values("time_s", kind="stable")
    start = steps["time_s"].to_numpy(dtype=float)
    end = np.append(start[1:], start[-1] + max(float(steps["duration_s"].iloc[-1]), 0.0))
    if end[-1] <= start[0]:
        end[-1] = start[0] + 1e-9
    hold = end - start
    edges = np.linspace(start[0], end[-1], min(max_points, len(start)) + 1)
    bounds = np.append(start, end[-1])
    out = {"time_s": edges[:-1], "bin_s": np.diff(edges)}
    for column in columns:
        values = steps[column].to_numpy(dtype=float)
        integral = np.concatenate([[0.0], np.cumsum(values * hold)])
        at_edges = np.interp(edges, bounds, integral)
        out[column] = np.diff(at_edges) / np.diff(edges)
    return pd.DataFrame(out)
