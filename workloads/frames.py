"""A `Workload` as a pandas DataFrame, and written to the canonical kvsim format (CSV, JSONL, Parquet).

The canonical columns are the `Request` fields. ``prefix_hashes`` is a list in JSONL and Parquet and a
space-separated string in CSV; a session turn's ``think_time_s`` is blank (null) when not given; workload-wide
values (``prefix_hash_tokens``, a closed loop's ``closed_loop_users`` and ``think_time_s``) are repeated on
every row so that every container round-trips.
Optional columns are written only when some request uses them, and floats with ``repr`` precision, so a
file reads back to the same requests and the same seed writes the same bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from workloads.errors import SKIP_HINT, TraceError
from workloads.readers.build import RawTable, build_workload, workload_constants
from workloads.workload import NONE, Workload

WRITE_FORMATS = (".csv", ".jsonl", ".parquet")


def workload_to_frame(workload: Workload, *, hashes_as: str = "list") -> pd.DataFrame:
    """One row per request. ``hashes_as`` is 'list' (tuples), 'text' (space-separated) or 'none'."""
    w = workload
    frame = pd.DataFrame({"id": w.ids, "arrival_time_s": w.arrival_time_s, "prompt_tokens": w.prompt_tokens,
                          "output_tokens": w.output_tokens})
    frame["max_tokens"] = nullable(w.max_tokens)
    frame["n"], frame["beam_width"] = w.n, w.beam_width
    frame["prefix_group"] = nullable(w.prefix_group)
    frame["prefix_len"] = np.where(w.prefix_group == NONE, 0, w.prefix_len)  # no group: shares nothing, and
    # a reader rejects a length without its group
    frame["priority"] = w.priority
    if w.has_sessions:
        frame["session_id"], frame["turn"], frame["think_time_s"] = nullable(w.session_id), w.turn, w.think_time_s
    if hashes_as != "none":
        split = np.split(w.hash_values, w.hash_offsets[1:-1]) if len(w) else []
        if hashes_as == "text":
            frame["prefix_hashes"] = [" ".join(map(str, h.tolist())) for h in split]
        else:
            frame["prefix_hashes"] = [tuple(h.tolist()) for h in split]
    frame["prefix_hash_tokens"] = w.prefix_hash_tokens
    if w.closed_loop is not None:
        frame["closed_loop_users"] = w.closed_loop.users
        frame["think_time_s"] = w.closed_loop.think_time_s
    return frame


def nullable(values: np.ndarray, missing: np.ndarray | None = None) -> pd.arrays.IntegerArray:
    """``values`` as pandas nullable integers (``Int64``), NA where ``missing`` (default: where they hold the
    `NONE` sentinel), so a table says "none" rather than showing the sentinel as a number."""
    missing = values == NONE if missing is None else missing
    return pd.arrays.IntegerArray(np.where(missing, 0, values), missing)


def workload_from_frame(frame: pd.DataFrame, *, skip_bad_rows: bool = False, **attrs) -> Workload:
    """Rows with canonical column names to a validated `Workload`; bad rows raise `TraceError`, or with
    ``skip_bad_rows`` are dropped and counted in ``skipped_reasons``, as `workloads.load_trace` does. A column
    that is not a canonical field is named in a `TraceWarning`, or refused when it looks like a misspelled
    field (`workloads.readers.formats.check_unread_columns`). A frame `workload_to_frame` wrote reads back, also
    through Parquet (whose list cells come back as numpy arrays, and empty ones as None)."""
    from workloads.readers.formats import FORMATS, check_unread_columns

    if not isinstance(frame, pd.DataFrame):  # a path named no missing columns, it is no frame at all
        raise TypeError(f"workload_from_frame: frame must be a pandas DataFrame, got {type(frame).__name__} (a file: "
                        "workloads.load_trace(path))")

    kvsim = FORMATS["kvsim"]
    missing = [c for c in kvsim.required if c not in frame]
    if missing:
        raise TraceError(f"<frame>: missing column(s) {', '.join(missing)}")
    check_unread_columns("<frame>", frame.columns, {c: c for c in frame.columns if c in kvsim.columns})
    columns = {c: frame[c].to_numpy(dtype=object if frame[c].dtype.kind not in "iufb" else None)
               for c in frame.columns if c in kvsim.columns and c != "prefix_hashes"}
    hashes = None
    if "prefix_hashes" in frame:
        from workloads.ragged import from_lists, from_strings

        cells = [_hash_list(c) for c in frame["prefix_hashes"].to_numpy(dtype=object)]
        if any(isinstance(c, str) for c in cells):  # text cells ("0 1 2"), lists among them written out so
            hashes = from_strings(np.array([" ".join(map(str, c)) if isinstance(c, list) else c for c in cells],
                                           dtype=object))
        else:
            hashes = from_lists(cells)
    raw = RawTable("<frame>", columns, np.arange(1, len(frame) + 1), "row", hashes)
    constants = workload_constants(raw, kvsim.hash_tokens)
    options = {"name": "frame", "source": "DataFrame"} | constants | attrs
    try:
        return build_workload(raw, skip_bad_rows=skip_bad_rows, **options)
    except TraceError as exc:  # the command line's flag is this function's argument
        raise TraceError(str(exc).replace(SKIP_HINT, "(pass skip_bad_rows=True to skip such rows)")) from None


def _hash_list(cell: object) -> object:
    """A ``prefix_hashes`` cell as `workloads.ragged.from_lists` takes it: None (or NaN, pandas' NA) for no
    hashes; a tuple, list or numpy array (a Parquet list cell) as a list of Python ints. Anything else stays
    as it is, for the reader's rule to reject with the row named."""
    if cell is None or cell is pd.NA or (isinstance(cell, float) and cell != cell):
        return None
    if isinstance(cell, np.ndarray) and cell.dtype.kind in "iu":
        return cell.tolist()
    if isinstance(cell, (list, tuple, np.ndarray)):
        return [int(x) if isinstance(x, np.integer) else x for x in cell]
    return cell


def write_trace(workload: Workload, path: str | Path) -> Path:
    """Write the canonical format; the container comes from the extension (.csv, .jsonl, .parquet)."""
    if not isinstance(workload, Workload) or not isinstance(path, (str, Path)):  # (or the two swapped)
        raise TypeError(f"write_trace(workload, path): got {type(workload).__name__} and {type(path).__name__}; "
                        "a frame becomes a workload with workloads.workload_from_frame(df)")
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in WRITE_FORMATS:
        raise TraceError(f"{path}: unknown output format {suffix!r} (use one of {', '.join(WRITE_FORMATS)})")
    frame = workload_to_frame(workload, hashes_as="text" if suffix == ".csv" else "list")
    frame = _drop_unused(frame, workload)
    if suffix == ".csv":
        frame.to_csv(path, index=False, lineterminator="\n", float_format=None)
    elif suffix == ".jsonl":
        _write_jsonl(frame, path)
    else:
        _write_parquet(frame, workload, path)
    return path


def _drop_unused(frame: pd.DataFrame, workload: Workload) -> pd.DataFrame:
    """Leave out optional columns no request uses, so simple traces stay simple files."""
    unused = [c for c, default in (("n", 1), ("beam_width", 1), ("prefix_len", 0), ("priority", 0))
              if (getattr(workload, c) == default).all()]
    unused += [c for c in ("max_tokens", "prefix_group") if frame[c].isna().all()]
    if not workload.has_prefix_hashes:
        unused += ["prefix_hashes", "prefix_hash_tokens"]
    if (workload.ids == np.arange(len(workload))).all():
        unused.append("id")
    return frame.drop(columns=unused)


def _write_jsonl(frame: pd.DataFrame, path: Path) -> None:
    """JSON Lines with floats in ``repr`` (shortest round-trip) form, which pandas' ``to_json`` lacks."""
    encoded = []
    for name in frame.columns:
        col = frame[name]
        if name == "prefix_hashes":
            cells = ["[" + ", ".join(map(str, h)) + "]" for h in col]
        elif col.dtype.kind == "f":
            cells = [repr(float(v)) if v == v else "null" for v in col.to_numpy()]
        else:
            cells = ["null" if v is pd.NA else str(int(v)) for v in col.to_numpy(dtype=object)]
        encoded.append([f'"{name}": {cell}' for cell in cells])
    with path.open("w", encoding="utf-8", newline="\n") as out:
        for row in zip(*encoded, strict=True):
            out.write("{" + ", ".join(row) + "}\n")


def _write_parquet(frame: pd.DataFrame, workload: Workload, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    plain = frame.drop(columns=[c for c in ("prefix_hashes",) if c in frame])
    table = pa.Table.from_pandas(plain, preserve_index=False)
    if "prefix_hashes" in frame:
        hashes = pa.LargeListArray.from_arrays(pa.array(workload.hash_offsets), pa.array(workload.hash_values))
        table = table.append_column("prefix_hashes", hashes)
    pq.write_table(table, path)

