"""`load_trace`: any supported trace file in, one validated `Workload` out.

The file's container (CSV, JSON Lines, Parquet) comes from its extension or first bytes; its format (Azure,
Mooncake, BurstGPT, Vidur/etalon, kvsim canonical) from its columns, unless ``format=`` says. ``columns=``
maps canonical fields to other column names (``{"prompt_tokens": "input_len"}``); a mapped file is read as
kvsim's canonical format (arrival times in seconds) unless ``format=`` names another, since detection would
otherwise pick a format by the mapped names and apply its units (a Mooncake-like layout read as milliseconds).

Readers only read: a trace keeps its own timestamps (re-timing is `workloads.named.load_trace`'s
``arrivals=``); only a file without timestamps gets the documented default, Poisson arrivals at 1 req/s.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from workloads.arrivals import ArrivalProcess, Poisson, retime
from workloads.attribution import ATTRIBUTIONS
from workloads.errors import TraceError, TraceWarning
from workloads.readers import containers
from workloads.readers.build import RawTable, build_workload, to_float, workload_constants
from workloads.readers.formats import (
    FORMATS,
    TraceFormat,
    check_time_unit,
    check_unread_columns,
    close_column,
    detect_format,
    format_named,
    mapping_for,
    time_mapping_hint,
)
from workloads.readers.seconds_check import warn_if_milliseconds
from workloads.specs import parse_columns
from workloads.workload import Workload

FAILED = "failed request (0 response tokens)"
TIMESTAMP_LIKE = re.compile(r"time|date|(^|_)ts$|^t$", re.IGNORECASE)
"""Column names that probably hold arrival times; one left unread is named in a `TraceWarning`."""
ISO_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?")
"""An ISO 8601 date and time (`_parse_datetimes`): a date alone, or a bare number, is no arrival time."""
__all__ = ["FORMATS", "load_trace"]
MISSING_TIMES = Poisson(1.0)
"""The arrivals of a file without timestamps: ``poisson:rate=1``."""


def load_trace(path: str | Path, *, format: str | None = None, columns: dict[str, str] | str | None = None,
               skip_bad_rows: bool = False, seed: int = 0,
               missing_times: ArrivalProcess | None = MISSING_TIMES, check_seconds: bool = True) -> Workload:
    """Read a trace file. Raises `TraceError` naming the file, line and field on bad input, unless
    ``skip_bad_rows`` (then bad rows are dropped and counted in ``skipped_reasons``). Files without
    timestamps get ``missing_times`` arrivals seeded by ``seed`` (None: all at 0, for a caller that draws its
    own). ``columns`` overrides the format's field -> column mapping, as a dict or as the command line's
    ``field=column,...`` string. ``check_seconds``: warn when kvsim-format arrival times in seconds look like
    milliseconds (`seconds_check`); off for a caller that replaces or rescales them, or reads lengths only."""
    if isinstance(columns, str):
        columns = parse_columns(columns)
    path = Path(path)
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, not a trace file")
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    with path.open("rb") as handle:
        head = handle.read(1 << 16)
    if not head.strip():
        raise TraceError(f"{path}: empty file")
    kind = containers.container_of(path, head)
    header = {"csv": lambda: containers.csv_header(path, head), "jsonl": lambda: containers.jsonl_header(path, head),
              "parquet": lambda: containers.parquet_header(path)}[kind]()
    if format:
        fmt = format_named(format)
    else:
        fmt = FORMATS["kvsim"] if columns else detect_format(path, header, None)
    mapping = mapping_for(fmt, columns)
    for field in fmt.required:
        if mapping[field] not in header:
            raise TraceError(_missing_field(path, fmt, field, mapping[field], header, mapped=bool(columns)))
    wanted = {f: c for f, c in mapping.items() if c in header}
    check_time_unit(path, fmt, wanted.get("arrival_time_s"))
    if fmt.name == "kvsim":  # (the unread timestamps get the warning below, which says where times come from)
        check_unread_columns(path, header, wanted, "" if kind == "parquet" else "line 1: ",
                             warned=[c for c in header if TIMESTAMP_LIKE.search(c)])
    _warn_unread_times(path, header, wanted, missing_times)
    reader = {"csv": containers.read_csv, "jsonl": containers.read_jsonl, "parquet": containers.read_parquet}[kind]
    values, lines, hashes, pre = reader(path, wanted, "prefix_hashes", skip_bad_rows)
    for field in fmt.required:
        if field not in values:  # the container's parser read the header differently from the sniffer
            raise TraceError(f"{path}: line 1: field '{field}': column '{mapping[field]}' could not be read")
    raw = RawTable(str(path), values, lines, "row" if kind == "parquet" else "line", hashes, pre,
                   names={f: c for f, c in wanted.items() if f != c})
    _convert_times(raw, fmt)
    if fmt.failed_output_zero:
        _drop_failed(raw)
    constants = workload_constants(raw, fmt.hash_tokens)
    workload = build_workload(raw, skip_bad_rows=skip_bad_rows, name=path.stem,
                              source=_source(path, fmt, columns), **constants)
    if check_seconds and fmt.name == "kvsim":
        warn_if_milliseconds(path, workload)
    if fmt.time_unit is None and missing_times is not None:
        workload = retime(workload, missing_times, seed, "poisson:rate=1" if missing_times == MISSING_TIMES
                          else str(missing_times))
    return workload


def _missing_field(path: Path, fmt: TraceFormat, field: str, column: str, header: list[str], mapped: bool) -> str:
    """The error for a required field without its column: the field, the column looked for, and how to fix it."""
    message = (f"{path}: line 1: field '{field}': missing column '{column}' for format {fmt.name} "
               f"(columns: {', '.join(header[:10])}{', ...' if len(header) > 10 else ''})")
    times = [c for c in header if TIMESTAMP_LIKE.search(c)] if field == "arrival_time_s" else []
    close = close_column(column, header)
    if close is not None:  # a near-miss spelling: say so, as for a misspelled optional column
        message += f"; column '{close}' is close to '{column}': rename it to '{column}' if that is what it holds"
    if times:
        message += f"; map it with {time_mapping_hint(times[0])}"
    else:
        message += f"; map it with --columns {field}=COLUMN"
    if mapped:
        message += (f"; with a column mapping the file is read as kvsim's canonical format (arrival times in "
                    f"seconds) unless --trace-format names another ({', '.join(FORMATS)})")
    return message


def _warn_unread_times(path: Path, header: list[str], wanted: dict[str, str],
                       missing_times: ArrivalProcess | None) -> None:
    """Name each timestamp-like column that nothing reads: arrivals silently drawn or taken from elsewhere
    are the mistake a column mapping invites."""
    unread = [c for c in header if TIMESTAMP_LIKE.search(c) and c not in wanted.values()]
    if not unread:
        return
    if "arrival_time_s" in wanted:
        used = f"arrival times come from column '{wanted['arrival_time_s']}'"
    else:
        used = "arrival times are poisson:rate=1" if missing_times == MISSING_TIMES else "arrival times are drawn"
    names = ", ".join(f"'{c}'" for c in unread)
    warnings.warn(f"{path}: column(s) {names} look like timestamps but are not read ({used}); map one with "
                  f"{time_mapping_hint(unread[0])} or name the format with --trace-format",
                  TraceWarning, stacklevel=3)


def _source(path: Path, fmt: TraceFormat, columns: dict[str, str] | None = None) -> str:
    """What to print with results: the file, its format and, for a known public trace, its attribution. A
    column mapping is named: a file read through one is the caller's own layout, not the format's trace."""
    attribution = ATTRIBUTIONS.get(path.name)
    read_as = fmt.label
    if columns:
        mapping = ",".join(f"{field}={column}" for field, column in columns.items())
        read_as = f"{fmt.name} format with column mapping {mapping}"
    return f"{path.name}, read as {read_as}" + (f". {attribution}" if attribution else "")


def _convert_times(raw: RawTable, fmt: TraceFormat) -> None:
    """Timestamps to seconds: absolute datetimes become seconds since the first one; ms become s."""
    times = raw.columns.get("arrival_time_s")
    if times is None or fmt.time_unit in ("s", None):
        return
    if fmt.time_unit == "datetime" and times.dtype.kind not in "iufb":
        parsed = _parse_datetimes(pd.Series(times, dtype=object))
        seconds = (parsed - parsed.min()).dt.total_seconds().to_numpy(np.float64, na_value=np.nan)
        unparsed = parsed.isna().to_numpy()
        raw.columns["arrival_time_s"] = np.where(unparsed, times, seconds)
        with np.errstate(invalid="ignore"):  # a number among datetimes is no time the file's clock knows
            text = unparsed & ~np.isnan(to_float(times))
        raw.format_rules.append(("arrival_time_s", "not a datetime (YYYY-MM-DD HH:MM:SS[.fraction], or ISO 8601 "
                                                   "such as YYYY-MM-DDTHH:MM:SS[.fraction]Z)", text))
    elif fmt.time_unit == "ms":
        raw.columns["arrival_time_s"] = to_float(times) / 1000.0


def _parse_datetimes(text: pd.Series) -> pd.Series:
    """Naive ``YYYY-MM-DD HH:MM:SS[.fraction]`` datetimes (Azure writes 7 fractional digits), or ISO 8601 ones
    as other tools write the same times: ``T`` between date and time, ``Z`` or an offset (``+00:00``), read as
    the UTC time they name (a naive one as UTC), so ``2023-11-16T18:17:04.03Z`` is ``2023-11-16 18:17:04.03``.
    Anything else (a date alone, a number) is NaT, and becomes a bad row rather than a guess at a time. The
    published traces take the first, fast form only."""
    parsed = pd.to_datetime(text, format="%Y-%m-%d %H:%M:%S.%f", errors="coerce")
    missing = parsed.isna()
    if missing.any():
        parsed[missing] = pd.to_datetime(text[missing], format="%Y-%m-%d %H:%M:%S", errors="coerce")
        missing = parsed.isna()
    if missing.any():
        iso = text[missing]
        iso = iso[iso.map(lambda v: isinstance(v, str) and ISO_DATETIME.fullmatch(v) is not None).astype(bool)]
        if len(iso):
            utc = pd.to_datetime(iso, format="ISO8601", utc=True, errors="coerce").dt.tz_localize(None)
            parsed[utc.index] = utc.astype(parsed.dtype)
    return parsed


def _drop_failed(raw: RawTable) -> None:
    """Failed requests (zero output tokens) are not requests the server served: keep them out, count them."""
    failed = to_float(raw.columns["output_tokens"]) == 0
    if not failed.any():
        return
    keep = np.flatnonzero(~failed)
    raw.columns = {f: v[keep] for f, v in raw.columns.items()}
    raw.locations = raw.locations[keep]
    if raw.hashes is not None:
        raw.hashes = raw.hashes.take(keep)
    raw.pre_skipped[FAILED] = raw.pre_skipped.get(FAILED, 0) + int(failed.sum())
