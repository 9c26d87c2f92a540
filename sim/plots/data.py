"""Turning kvsim's result tables into what a figure draws: checked columns, summaries as a frame, time bins.

The steps table has one row per event-grain step, and an hour of simulation can hold a hundred thousand of
them. A figure needs a thousand points at most, so `time_binned` averages each column over equal time bins,
weighting every row by how long its state held (exactly, by integrating the step function).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

SINGLE_RUN = "run"
"""The name a lone table is drawn under where a figure takes several runs' tables by name (and the name the
single-run figures give a table in their messages)."""


def is_result(value: object) -> bool:
    """A `sim.SimResult` (or anything shaped like one): it carries ``summary``, ``steps`` and ``requests``.
    Checked by shape, so drawing a figure does not import the simulator."""
    return all(hasattr(value, name) for name in ("summary", "steps", "requests"))


def describe(value: object) -> str:
    """What a caller passed, for an error message: ``a SimResult``, ``a dict of 2 SimResults``, ``a list of
    3 dicts``, ``a DataFrame``."""
    def kind(v: object) -> str:
        return "SimResult" if is_result(v) else type(v).__name__

    if isinstance(value, Mapping | list | tuple) and not is_result(value):
        items = list(value.values() if isinstance(value, Mapping) else value)
        if not items:
            return f"an empty {type(value).__name__}"
        kinds = sorted({kind(v) for v in items})
        return f"a {type(value).__name__} of {len(items)} {' and '.join(k + 's' for k in kinds)}"
    return f"a {kind(value)}"


def run_table(value: object, table: str, figure: str, param: str, several: str | None = None) -> pd.DataFrame:
    """One run's ``table`` (``steps``, ``requests`` or ``memory``) from the frame itself or the run's
    `SimResult`; else one ValueError naming ``figure``, ``param``, what it got and what to pass (``several``:
    the figure that draws several runs)."""
    if isinstance(value, pd.DataFrame):
        return value
    if is_result(value):
        return getattr(value, table)
    hint = f"; for several runs use {several}" if several and isinstance(value, Mapping) else ""
    raise ValueError(f"{figure}: `{param}` must be one run's {table} table (a DataFrame, or its SimResult), "
                     f"got {describe(value)}{hint}")


def require_frame(value: object, figure: str, param: str, what: str) -> pd.DataFrame:
    """``value`` itself when it is a frame (a figure drawn from a table of many runs' rows); else one
    ValueError naming ``figure``, ``param``, what it got and ``what`` the frame holds."""
    if not isinstance(value, pd.DataFrame):
        raise ValueError(f"{figure}: `{param}` must be a DataFrame of {what}, got {describe(value)}")
    return value


def result_name(result: object) -> str:
    """A lone `SimResult`'s run name: its allocator, as `compare_allocators` keys it."""
    return str(result.summary.get("allocator") or SINGLE_RUN)


def tables_by_run(value: object, table: str, figure: str, param: str) -> dict[str, pd.DataFrame]:
    """Run name -> ``table`` from what a caller naturally passes: a mapping of names to frames or to
    `SimResult` objects (what `compare_allocators` and `run_workload` return), one `SimResult` (named by its
    allocator) or one frame (named `SINGLE_RUN`); anything else is one ValueError naming ``param``."""
    if isinstance(value, pd.DataFrame):
        return {SINGLE_RUN: value}
    if is_result(value):
        return {result_name(value): getattr(value, table)}
    if not isinstance(value, Mapping):
        raise ValueError(f"{figure}: `{param}` must map run name -> {table} table (or SimResult), got "
                         f"{describe(value)}; pass {{name: r.{table} for name, r in runs.items()}} or the dict "
                         f"compare_allocators/run_workload return")
    out = {}
    for name, item in value.items():
        if isinstance(item, pd.DataFrame):
            out[name] = item
        elif is_result(item):
            out[name] = getattr(item, table)
        else:
            raise ValueError(f"{figure}: `{param}` must map run name -> {table} table (or SimResult), but "
                             f"{name!r} maps to {describe(item)}")
    return out


def _is_summary(value: object) -> bool:
    """One run's summary dict (it names its allocator), as opposed to a mapping of run names to summaries."""
    return isinstance(value, Mapping) and isinstance(value.get("allocator"), str)


def summaries_by_run(value: object, figure: str, param: str = "summaries") -> dict[str, Mapping]:
    """Run name -> summary dict from a mapping of names to summaries or to `SimResult` objects, one
    `SimResult` or one summary (named by its allocator); anything else is one ValueError naming ``param``."""
    if is_result(value):
        return {result_name(value): value.summary}
    if _is_summary(value):
        return {str(value["allocator"]): value}
    if not isinstance(value, Mapping):
        raise ValueError(f"{figure}: `{param}` must map run name -> summary dict (or SimResult), got "
                         f"{describe(value)}; pass {{name: r.summary for name, r in runs.items()}}")
    out = {}
    for name, item in value.items():
        if is_result(item):
            out[name] = item.summary
        elif isinstance(item, Mapping):
            out[name] = item
        else:
            raise ValueError(f"{figure}: `{param}` must map run name -> summary dict (or SimResult), but "
                             f"{name!r} maps to {describe(item)}")
    return out


def require_known(figure: str, param: str, given: Iterable[str], valid: Iterable[str], what: str) -> None:
    """One ValueError naming the keys of ``param`` that are not among ``valid`` (``what`` says what those
    are) and listing the valid ones: a misspelled key would otherwise leave its bar out without a word."""
    valid = list(valid)
    unknown = [k for k in given if k not in valid]
    if unknown:
        raise ValueError(f"{figure}: `{param}` names {', '.join(map(repr, unknown))}, not among the {what} "
                         f"({', '.join(map(str, valid))})")


def require_count(figure: str, param: str, value: object) -> int:
    """``value`` as a whole number >= 1 (a number of points, bins or slots per row), else one ValueError
    naming the figure and the parameter: 0 or less failed inside numpy or matplotlib, or drew nothing."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{figure}: `{param}` must be a whole number >= 1, got {value!r}")
    return int(value)


def require_names(figure: str, param: str, value: object) -> list[str]:
    """``value`` as a non-empty list of column names: a lone string was read a character at a time ("lacks
    column 't'") and an empty list made a figure of no panels (matplotlib's error)."""
    if isinstance(value, str):
        raise ValueError(f"{figure}: `{param}` must be a list of column names, such as ({value!r},), got a str")
    names = list(value)
    if not names:
        raise ValueError(f"{figure}: `{param}` names no column to draw")
    return names


def require_columns(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """Raise ValueError naming the table and every missing column, before any drawing starts. A table read
    from a file (``df.attrs["source"]``, set by `kvsim plot`) is named by its path too: of several runs'
    tables, the user must know which one is wrong. Anything but a frame is refused by name, not with pandas'
    or Python's error from deep inside a figure."""
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{what} must be a DataFrame, got {describe(df)}")
    if df.attrs.get("source"):
        what = f"{what} {df.attrs['source']}"
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what} lacks column(s) {missing}; it has {list(df.columns)}")
    if df.empty:
        raise ValueError(f"{what} has no rows to plot")


def summaries_frame(summaries: object, figure: str = "summaries_frame") -> pd.DataFrame:
    """Summaries as a frame indexed by run name, one row each: from a frame with an ``allocator`` column, a
    list of summaries or `SimResult` objects (each named by its allocator, as a frame's rows are), or anything
    `summaries_by_run` takes."""
    if isinstance(summaries, list | tuple):
        if not summaries:
            raise ValueError("no summaries to plot")
        if not all(is_result(s) or _is_summary(s) for s in summaries):
            raise ValueError(f"{figure}: `summaries` as a list must hold summary dicts or SimResults, got "
                             f"{describe(summaries)}; pass {{name: r.summary for name, r in runs.items()}}")
        summaries = pd.DataFrame([dict(s.summary if is_result(s) else s) for s in summaries])
    if isinstance(summaries, pd.DataFrame):
        require_columns(summaries, ["allocator"], "summaries table")
        frame = summaries.set_index("allocator")
    else:
        by_run = summaries_by_run(summaries, figure)
        if not by_run:
            raise ValueError("no summaries to plot")
        frame = pd.DataFrame.from_dict({k: dict(v) for k, v in by_run.items()}, orient="index")
        frame = frame.drop(columns=["allocator"], errors="ignore")
    if frame.index.has_duplicates:
        raise ValueError(f"summaries name an allocator twice: {sorted(frame.index[frame.index.duplicated()])}")
    return frame


def time_binned(steps: pd.DataFrame, columns: list[str], max_points: int = 600) -> pd.DataFrame:
    """Time-weighted means of ``columns`` over at most ``max_points`` equal bins of simulated time.

    Each row's values hold from its ``time_s`` until the next row starts (the last row for its own
    ``duration_s``), so an idle gap between steps keeps the state the last step left. A fleet's steps table (a
    ``replica`` column) holds each replica's rows: each replica's state is binned on its own and the replicas'
    means are added (running requests, slots and capacity of the whole fleet), where one timeline of every
    replica's rows jumped from replica to replica. Returns a frame with ``time_s`` (bin start), ``bin_s`` (bin
    width) and the averaged columns.
    """
    require_columns(steps, ["time_s", "duration_s", *columns], "steps table")
    max_points = require_count("time_binned", "max_points", max_points)
    replicas = ([part for _, part in steps.groupby("replica", sort=True)]
                if "replica" in steps.columns and steps["replica"].nunique() > 1 else [steps])
    holds = [_holds(part.sort_values("time_s", kind="stable")) for part in replicas]
    first = min(part["time_s"].iloc[0] for part, _, _ in holds)
    last = max(end[-1] for _, _, end in holds)
    edges = np.linspace(first, max(last, first + 1e-9), min(max_points, len(steps)) + 1)
    out = {"time_s": edges[:-1], "bin_s": np.diff(edges)}
    for column in columns:  # a fleet's replicas each hold their own state: their time-weighted means add up
        out[column] = sum(_binned(part[column].to_numpy(dtype=float), start, end, edges)
                          for part, start, end in holds)
    return pd.DataFrame(out)


def step_points(binned: pd.DataFrame) -> pd.DataFrame:
    """`time_binned`'s bins as the points of a line drawn ``where="post"`` (or a ``step="post"`` stack): each bin's
    start, then the last bin's end repeating its values, without which the last bin was not drawn at all."""
    last = binned.iloc[[-1]].copy()
    last["time_s"] = last["time_s"] + last["bin_s"]
    return pd.concat([binned, last], ignore_index=True)


def _holds(steps: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """One engine's rows (sorted by time) with when each starts and stops holding: at the next row's start, the
    last one after its own duration (a zero-length span made a nanosecond, so it still counts)."""
    start = steps["time_s"].to_numpy(dtype=float)
    end = np.append(start[1:], start[-1] + max(float(steps["duration_s"].iloc[-1]), 0.0))
    if end[-1] <= start[0]:
        end[-1] = start[0] + 1e-9
    return steps, start, end


def _binned(values: np.ndarray, start: np.ndarray, end: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The time-weighted mean of a step function (``values[i]`` from ``start[i]`` to ``end[i]``, nothing outside)
    over each bin between ``edges``."""
    integral = np.concatenate([[0.0], np.cumsum(values * (end - start))])
    at_edges = np.interp(edges, np.append(start, end[-1]), integral)
    return np.diff(at_edges) / np.diff(edges)
