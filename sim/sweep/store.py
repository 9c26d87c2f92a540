"""The results store: a table file plus a directory of one-row part files, one per finished point.

Why parts: a point's row must be on disk the moment it finishes, so that an interrupted sweep (Ctrl-C, a
killed job, a lost machine) loses nothing finished, and rewriting a whole table per point costs O(n^2).
Each part is written to a temporary name and renamed into place (atomic on POSIX), so a part is either
complete or absent. At the end of a sweep (and on interrupt) the parts are merged into the table, which
is itself replaced atomically, and only then are the merged parts deleted; a crash between the two
leaves a row in both places, and the part (the newer) wins on the next read.

Layout for ``--out sweep.parquet``: ``sweep.parquet`` and ``sweep.parquet.parts/<point_id>.parquet``.
The table may also be ``.csv``; parts are always Parquet.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sim.sweep.point import STATUS_OK

try:
    import fcntl
except ImportError:  # not POSIX: concurrent sweeps on one store are then not serialised
    fcntl = None

TABLE_SUFFIXES = (".parquet", ".csv")


def _atomic_replace(tmp: Path, dest: Path) -> None:
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, dest)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def rows_to_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows (which may lack keys: a failed point has no summary) as a frame with faithful column types.

    Integer columns with gaps become nullable ``Int64`` rather than floats (2048, not 2048.0).
    """
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    columns: dict[str, Any] = {}
    for name in names:
        values = [row.get(name) for row in rows]
        present = [v for v in values if not _missing(v)]
        if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            dtype = "Int64" if len(present) < len(values) else "int64"
            columns[name] = pd.array([None if _missing(v) else v for v in values], dtype=dtype)
        else:
            columns[name] = values
    return pd.DataFrame(columns, index=pd.RangeIndex(len(rows)))


class ResultStore:
    """Rows keyed by ``point_id``; ``append`` is durable at once, ``consolidate`` writes the table."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.suffix not in TABLE_SUFFIXES:
            raise ValueError(f"{self.path}: results table must end in .parquet or .csv")
        self.parts_dir = self.path.with_name(self.path.name + ".parts")

    def _read_table(self) -> list[dict[str, Any]]:
        """The table's rows, each with its ``point_id``. A file without that column is not a results table (a
        trace given to `kvsim plot`, an unrelated CSV given to ``kvsim sweep --out``): one error naming the
        file and what it holds, not a KeyError from the first row; a row without an id is named too, since
        two of them would otherwise collapse silently into one."""
        if not self.path.exists():
            return []
        try:
            if self.path.suffix == ".csv":
                frame = pd.read_csv(self.path)
                columns, rows = [str(c) for c in frame.columns], frame.to_dict("records")
            else:
                table = pq.read_table(self.path)
                columns, rows = table.column_names, table.to_pylist()
        except Exception as exc:
            raise ValueError(f"{self.path}: cannot read the results table: {exc}") from exc
        if "point_id" not in columns:
            shown = ", ".join(columns[:8]) + (f" and {len(columns) - 8} more" if len(columns) > 8 else "")
            raise ValueError(f"{self.path}: not a kvsim sweep results table: no point_id column (its columns: "
                             f"{shown or 'none'}); expected a table written by `kvsim sweep --out`")
        for number, row in enumerate(rows, start=1):
            if _missing(row["point_id"]):
                raise ValueError(f"{self.path}: row {number}: point_id is empty; every row of a results table "
                                 "has one")
        return rows

    def _part_paths(self) -> list[Path]:
        if not self.parts_dir.is_dir():
            return []
        return sorted(p for p in self.parts_dir.iterdir()
                      if p.suffix == ".parquet" and not p.name.startswith("."))

    def rows(self) -> dict[str, dict[str, Any]]:
        """Every stored row by point id: the table's rows in their order, then parts (newer, so they win)."""
        out: dict[str, dict[str, Any]] = {}
        for row in self._read_table():
            out[str(row["point_id"])] = row
        for part in self._part_paths():
            try:
                rows = pq.read_table(part).to_pylist()
            except Exception as exc:
                message = f"{part}: unreadable part file ({exc}); delete it to rerun its point"
                raise ValueError(message) from exc
            for row in rows:
                out[str(row["point_id"])] = row
        return out

    def done_ids(self) -> set[str]:
        """Points finished successfully; failed points are not done, so a rerun tries them again."""
        return {pid for pid, row in self.rows().items() if row.get("status") == STATUS_OK}

    def append(self, row: dict[str, Any]) -> None:
        """Write one finished point's row durably, before anything else happens."""
        self.parts_dir.mkdir(parents=True, exist_ok=True)
        dest = self.parts_dir / f"{row['point_id']}.parquet"
        tmp = self.parts_dir / f".{row['point_id']}.{os.getpid()}.tmp"
        pq.write_table(pa.Table.from_pylist([row]), tmp)
        _atomic_replace(tmp, dest)

    def consolidate(self, order: list[str]) -> pd.DataFrame:
        """Merge parts into the table: ``order``'s points first in that order, then older rows as they were.

        Returns the rows of ``order`` only (the current sweep), in order; the file keeps every row. Two sweeps
        writing to one store merge one at a time (a lock file beside the table), so neither drops the rows
        the other merged.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(f".{self.path.name}.lock"), "w") as lock:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            return self._consolidate(order)

    def _consolidate(self, order: list[str]) -> pd.DataFrame:
        parts = self._part_paths()
        rows = self.rows()
        ordered = [pid for pid in order if pid in rows]
        in_order = set(ordered)
        ordered += [pid for pid in rows if pid not in in_order]
        table = rows_to_frame([rows[pid] for pid in ordered])
        if parts or (rows and not self.path.exists()):
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            if self.path.suffix == ".csv":
                table.to_csv(tmp, index=False)
            else:
                table.to_parquet(tmp, index=False)
            _atomic_replace(tmp, self.path)
            for part in parts:
                part.unlink(missing_ok=True)
            if self.parts_dir.is_dir() and not any(self.parts_dir.iterdir()):
                self.parts_dir.rmdir()
        return table.iloc[: len(in_order)].reset_index(drop=True)


def load_results(path: str | Path) -> pd.DataFrame:
    """Every row of a results store, including parts not yet merged (a sweep still running or interrupted)."""
    rows = ResultStore(path).rows()
    return rows_to_frame(list(rows.values()))
