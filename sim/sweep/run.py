"""Run a grid: build each point's configuration, skip the points already stored, run the rest, record each.

The loop is deliberately simple: every finished point goes straight to the store (durable at once), and the
table is written in grid order at the end, or when the sweep is interrupted, so the order never depends on
which worker finished first.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.sweep.executors import run_tasks
from sim.sweep.grid import Grid
from sim.sweep.hashing import config_values, kvsim_version, point_id
from sim.sweep.point import (
    STATUS_FAILED,
    STATUS_OK,
    PointFn,
    PointTask,
    describe_error,
    evaluate_point,
    make_row,
    simulate_point,
)
from sim.sweep.slo import SearchSettings, SloTarget, search_rate
from sim.sweep.store import ResultStore, rows_to_frame


@dataclass(frozen=True)
class SweepReport:
    """The current grid's rows in grid order, and what this invocation did to produce them."""

    table: pd.DataFrame
    points: int
    skipped: int
    ran: int
    failed: int
    duplicates: int
    superseded: int = 0
    """Rows the results file keeps from earlier runs of this grid's very settings (`superseded_rows`)."""

    def line(self) -> str:
        dup = f", {self.duplicates} duplicate point(s) merged" if self.duplicates else ""
        return (f"{self.points} points: {self.ran} run ({self.failed} failed), "
                f"{self.skipped} already done{dup}")

    def superseded_line(self, out: str | Path) -> str | None:
        """The warning for `superseded`, or None: such rows carry the same settings as this grid's points,
        so only their ``point_id`` tells them apart, and a table grouped by settings would average them in."""
        if not self.superseded:
            return None
        return (f"{out} also keeps {self.superseded} row(s) with the same settings as this grid's points, from "
                "an earlier run on other contents of their input files (a trace or table edited in place) or by "
                "another kvsim version (its kvsim_version column); no setting column tells them apart, only "
                f"point_id: write to a new --out, or remove {out} and rerun, for this grid's rows alone")


def default_config_cls() -> type:
    from sim.kernel.config import SimConfig

    return SimConfig


def build_tasks(grid: Grid, config_cls: type,
                version: str) -> tuple[list[PointTask], list[dict[str, Any]], int]:
    """Tasks for the buildable points, failed rows for the points whose configuration is invalid, and the
    number of points that resolve to a configuration already in the grid (kept once, at the first place)."""
    defaults = {f.name: f.default for f in dataclasses.fields(config_cls)
                if f.default is not dataclasses.MISSING}
    tasks: list[PointTask] = []
    invalid: list[dict[str, Any]] = []
    seen: set[str] = set()
    duplicates = 0
    for index, values in enumerate(grid.points()):
        try:
            config = config_cls(**values)
        except (ValueError, TypeError, KeyError) as exc:
            raw = {**defaults, **values}
            pid = point_id(raw, version)
            if pid not in seen:
                seen.add(pid)
                row = make_row(pid, raw, None, describe_error(exc), version)
                invalid.append({"index": index, "row": row})
            else:
                duplicates += 1
            continue
        pid = point_id(config, version)
        if pid in seen:
            duplicates += 1
            continue
        seen.add(pid)
        tasks.append(PointTask(index, pid, config))
    return tasks, invalid, duplicates


def run_sweep(grid: Grid, out: str | Path, *, point_fn: PointFn = simulate_point,
              config_cls: type | None = None, workers: int = 1, executor: str = "local",
              scheduler: str | None = None, progress: bool = False,
              on_row: Callable[[dict[str, Any]], None] | None = None) -> SweepReport:
    """Run every point of ``grid`` not already stored in ``out``; return the grid's rows in grid order.

    ``point_fn`` maps a configuration to its summary dict; it must be picklable (a module-level function)
    for the process and Dask executors. Failed points are stored with their error and retried on a rerun.
    """
    config_cls = config_cls or default_config_cls()
    version = kvsim_version()
    store = ResultStore(out)
    tasks, invalid, duplicates = build_tasks(grid, config_cls, version)
    order = sorted([(t.index, t.point_id) for t in tasks]
                   + [(r["index"], r["row"]["point_id"]) for r in invalid])
    done = store.done_ids()
    pending = [t for t in tasks if t.point_id not in done]
    skipped = len(tasks) - len(pending)
    failed = 0
    bar = _progress_bar(len(pending) + len(invalid), progress)
    try:
        for item in invalid:
            store.append(item["row"])
            failed += 1
            _advance(bar, failed, on_row, item["row"])
        fn = functools.partial(evaluate_point, point_fn, version=version)
        for outcome in run_tasks(fn, pending, workers=workers, executor=executor, scheduler=scheduler):
            row = outcome.result
            if row is None:
                task = pending[outcome.index]
                row = make_row(task.point_id, config_values(task.config), None, outcome.error, version)
            store.append(row)
            failed += row["status"] != STATUS_OK
            _advance(bar, failed, on_row, row)
    finally:
        if bar is not None:
            bar.close()
        table = store.consolidate([pid for _, pid in order])
    return SweepReport(table, len(order), skipped, len(pending) + len(invalid), failed, duplicates,
                       superseded_rows(store, table, [f.name for f in dataclasses.fields(config_cls)]))


def superseded_rows(store: ResultStore, table: pd.DataFrame, fields: list[str]) -> int:
    """Rows of ``store`` outside this grid's ``table`` whose every configuration field equals one of its rows'.

    Why: the file keeps every row it ever held (earlier grids stay useful), but a point's id also hashes its
    input files' contents and the kvsim version, so rerunning a grid after editing its trace in place adds
    rows that no setting tells from the old ones: a newcomer who fixed a trace's units and reran saw two rows
    per point, half of them from the broken trace, and the sweep said nothing."""
    rows = store.rows()
    current = set(table["point_id"].astype(str)) if len(table) else set()
    if len(rows) <= len(current):
        return 0

    def key(row: dict[str, Any]) -> str:
        return repr([None if _missing(row.get(f)) else _plain(row.get(f)) for f in fields])

    settings = {key(rows[pid]) for pid in current if pid in rows}
    return sum(1 for pid, row in rows.items() if pid not in current and key(row) in settings)


def _missing(value: Any) -> bool:
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):  # a list or array cell
        return False


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds (a part file and the table may read one back as either)."""
    return value.item() if hasattr(value, "item") and getattr(value, "ndim", 1) == 0 else value


def _progress_bar(total: int, enabled: bool) -> Any:
    if not enabled or total == 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="point", desc="sweep", dynamic_ncols=True)


def _advance(bar: Any, failed: int, on_row: Callable[[dict[str, Any]], None] | None,
             row: dict[str, Any]) -> None:
    if bar is not None:
        bar.update(1)
        bar.set_postfix(failed=failed, refresh=False)
    if on_row is not None:
        on_row(row)


def run_slo(grid: Grid, target: SloTarget, settings: SearchSettings, *, point_fn: PointFn = simulate_point,
            config_cls: type | None = None, workers: int = 1, executor: str = "local",
            scheduler: str | None = None, progress: bool = False) -> pd.DataFrame:
    """One rate search per configuration of ``grid`` (which must not set the rate), rows in grid order.

    Searches are independent, so they run in parallel like sweep points; each search is sequential.
    """
    if "rate" in grid.base or "rate" in grid.axes:
        raise ValueError("the SLO search chooses the rate itself; do not give --rate")
    if "arrivals" in grid.base or "arrivals" in grid.axes:  # each probe sets the rate, as --rate would
        raise ValueError("the SLO search sets each probe's rate itself, as --rate does; do not give --arrivals")
    config_cls = config_cls or default_config_cls()
    version = kvsim_version()
    tasks, invalid, _ = build_tasks(grid, config_cls, version)
    rows: dict[int, dict[str, Any]] = {}
    for item in invalid:
        rows[item["index"]] = {k: v for k, v in item["row"].items() if k != "kvsim_version"}
    fn = functools.partial(_search_task, point_fn, target, settings)
    bar = _progress_bar(len(tasks), progress)
    failed = len(invalid)
    try:
        for outcome in run_tasks(fn, tasks, workers=workers, executor=executor, scheduler=scheduler):
            task = tasks[outcome.index]
            row = outcome.result
            if row is None:
                row = {"point_id": task.point_id, "status": STATUS_FAILED, "error": outcome.error,
                       **config_values(task.config)}
            rows[task.index] = row
            failed += row["status"] == STATUS_FAILED
            _advance(bar, failed, None, row)
    finally:
        if bar is not None:
            bar.close()
    return rows_to_frame([rows[i] for i in sorted(rows)])


def _search_task(point_fn: PointFn, target: SloTarget, settings: SearchSettings,
                 task: PointTask) -> dict[str, Any]:
    return search_rate(point_fn, task.config, target, settings, point_id=task.point_id)
