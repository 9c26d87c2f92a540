"""One sweep point: a configuration run through a point function into one row of the results table.

The point function maps a configuration to the summary dict of ``kvsim run --json``. The real one runs the
simulator; tests pass small fakes. A failure becomes a row with ``status="failed"`` and the error text, so a
sweep of hundreds of points is never stopped by one bad corner of the grid.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.sweep.hashing import config_values

PointFn = Callable[[Any], dict[str, Any]]

STATUS_OK = "ok"
STATUS_FAILED = "failed"


def simulate_point(config: Any) -> dict[str, Any]:
    """The default point function: run the simulator and return its summary (``kvsim run --json``). Quiet
    about settings a point ignores: the results table holds each point's ``ignored_settings``."""
    from sim.kernel.runner import run_config

    return dict(run_config(config, warn=False).summary)


@dataclass(frozen=True)
class PointTask:
    """What a worker needs to run one point: its place in the grid, its id, and the built configuration."""

    index: int
    point_id: str
    config: Any


def _scalar(value: Any) -> Any:
    """Parquet columns hold scalars; a nested summary value is kept as its JSON text."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    return value


EFFECTIVE_COLUMNS = {"block_size": "effective_block_size"}
"""Summary keys that share a configuration field's name but say what the run used rather than what was asked
-> the column they go under. The field keeps its own column (``block_size``: the grid's, empty where none was
given and vLLM chose), so a grouping by settings still groups by what was set; ``effective_block_size`` is the
block size the run's pool had (an MLA model's attention backend's, 64 for fp8 latents on an H100, where
``block_size`` was not given: `sim.kernel.block_size`). It is placed right after its field's column, so that a
table read by eye shows the run's size beside the empty setting rather than thirty columns away."""


def make_row(point_id: str, values: dict[str, Any], summary: dict[str, Any] | None,
             error: str | None, version: str) -> dict[str, Any]:
    """A results row: id, status and error, the configuration's fields, then the summary's keys.

    A summary key that is also a configuration field (``allocator``) keeps the configuration's value, but for
    the `EFFECTIVE_COLUMNS`, whose summary value goes under a column of its own.
    """
    row: dict[str, Any] = {"point_id": point_id, "status": STATUS_FAILED if error else STATUS_OK,
                           "error": error, "kvsim_version": version}
    row.update({k: _scalar(v) for k, v in values.items()})
    for key, value in (summary or {}).items():
        column = EFFECTIVE_COLUMNS.get(key) if key in values else key
        if column is not None and column not in row:
            row[column] = _scalar(value)
    return _beside_fields(row)


def _beside_fields(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with each `EFFECTIVE_COLUMNS` column moved to just after its field's (column order is first
    seen, `sim.sweep.store.rows_to_frame`)."""
    after = {field: column for field, column in EFFECTIVE_COLUMNS.items() if field in row and column in row}
    if not after:
        return row
    moved = set(after.values())
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key not in moved:
            out[key] = value
            if key in after:
                out[after[key]] = row[after[key]]
    return out


def describe_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def evaluate_point(point_fn: PointFn, task: PointTask, version: str) -> dict[str, Any]:
    """Run one point; never raises for a simulation error (it becomes the row's ``error``).

    ``point_wall_s`` is the time spent here, in the worker, so executor overheads can be measured apart.
    """
    values = config_values(task.config)
    start = time.perf_counter()
    try:
        summary = point_fn(task.config)
        if not isinstance(summary, dict):
            raise TypeError(f"point function returned {type(summary).__name__}, not a summary dict")
        error = None
    except Exception as exc:  # a failed point is recorded and the sweep goes on
        summary, error = None, describe_error(exc)
    row = make_row(task.point_id, values, summary, error, version)
    row["point_wall_s"] = time.perf_counter() - start
    return row
