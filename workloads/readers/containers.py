"""Read a file's container (CSV, JSON Lines, Parquet) into raw columns, with line or row numbers.

Containers know nothing of trace formats: they return the columns asked for by their names in the file, plus
the header (for format detection). Parse failures become `TraceError`s naming the line; with
``skip_bad_rows`` the lines a container cannot split into fields are dropped and counted. Text files are UTF-8
(a leading byte-order mark allowed); any other encoding is an error naming the line, not text read with
replacement characters (two Latin-1 session ids ``café`` and ``cafè`` would both become ``caf\ufffd`` and merge).
Blank lines (only whitespace) are no rows, in CSV as in JSON Lines. A CSV header's names are read without the
spaces around them (``arrival_time_s, prompt_tokens``); JSON keys and Parquet names are read as they are.
"""

from __future__ import annotations

import codecs
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from workloads.errors import SKIP_HINT, TraceError, TraceWarning
from workloads.ragged import Ragged, from_arrow, from_lists, from_strings

BAD_LINE = "line: wrong number of fields"
BAD_JSON = "line: truncated or invalid JSON"
BAD_KEY = "line: a key repeated in a JSON object"
BOM = codecs.BOM_UTF8
"""The UTF-8 byte-order mark some editors (Notepad, Excel's "CSV UTF-8") put at the start of a file."""


def container_of(path: Path, head: bytes) -> str:
    """'parquet', 'jsonl' or 'csv', from the extension, else from the first bytes (after a byte-order mark)."""
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq") or head.startswith(b"PAR1"):
        return "parquet"
    if suffix in (".jsonl", ".json", ".ndjson") or head.removeprefix(BOM).lstrip().startswith(b"{"):
        return "jsonl"
    return "csv"


def csv_header(path: Path, head: bytes) -> list[str]:
    line = head.decode("utf-8", errors="replace").lstrip("\ufeff").splitlines()[:1]
    if not line or not line[0].strip():
        raise TraceError(f"{path}: empty file (no header line)")
    names = [name.strip().strip('"') for name in line[0].split(",")]
    twice = sorted({name for name in names if names.count(name) > 1 and name})
    if twice:  # pandas would read the second as 'name.1' and the reader the first alone: the other dropped
        raise TraceError(f"{path}: line 1: column '{twice[0]}' appears more than once in the header")
    return names


def csv_frame(path: Path, *, dtype: dict[str, object] | None = None, **options) -> tuple[pd.DataFrame, list]:
    """``pd.read_csv(path, **options)`` with parser warnings caught (returned, for the lines a caller told
    pandas to skip) and rows longer than the header refused: pandas would take the first column as an index
    and shift the fields left; told not to (``index_col=False``), it would drop the extras. pandas' own
    errors propagate to the caller, which knows what to call them.

    Header names are stripped of surrounding spaces, as `csv_header` reads them (``a, b`` names ``b``): pandas
    keeps `` b``, so a column the header check found was missing from the frame. ``dtype`` is keyed by the
    stripped names too."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pd.errors.ParserWarning)
        if dtype:  # pandas matches dtype to the names as written
            written = pd.read_csv(path, index_col=False, nrows=0, encoding=options.get("encoding")).columns
            as_written = {str(c).strip(): c for c in written}
            dtype = {as_written.get(name, name): kind for name, kind in dtype.items()}
        frame = pd.read_csv(path, index_col=False, dtype=dtype, **options)
    if any("Length of header" in str(w.message) for w in caught):
        raise TraceError(f"{path}: line 2: more fields than the header names ({len(frame.columns)}): a trailing "
                         "comma, or a column without a header name")
    names = [c.strip() if isinstance(c, str) else c for c in frame.columns]
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:  # (' a' and 'a': one column once stripped)
        raise TraceError(f"{path}: line 1: column '{twice[0]}' appears more than once in the header")
    frame.columns = names
    return frame, caught


def read_csv(path: Path, wanted: dict[str, str], hash_field: str | None, skip: bool) -> tuple:
    """Columns ``{field: values}`` for ``wanted`` (field -> file column), line numbers, hashes, skips."""
    dtype = {wanted[hash_field]: str} if hash_field in wanted else None
    try:
        frame, caught = csv_frame(path, skip_blank_lines=False, on_bad_lines="warn" if skip else "error",
                                  encoding="utf-8-sig", dtype=dtype, low_memory=False)
    except pd.errors.EmptyDataError as exc:
        raise TraceError(f"{path}: empty file (no header line)") from exc
    except UnicodeDecodeError as exc:  # (a ValueError: before the generic parse error below)
        raise not_utf8(path, path.read_bytes()) from exc
    except (pd.errors.ParserError, ValueError, OverflowError) as exc:
        found = re.search(r"line (\d+)", str(exc))
        where = f"line {found.group(1)}" if found else "parse error"
        raise TraceError(f"{path}: {where}: {str(exc).splitlines()[-1].strip()} {SKIP_HINT}") from exc
    skipped_lines = sorted(int(m) for w in caught for m in re.findall(r"Skipping line (\d+)", str(w.message)))
    rows = len(frame)
    lines = np.arange(2, rows + len(skipped_lines) + 2, dtype=np.int64)
    if skipped_lines:
        lines = np.setdiff1d(lines, np.array(skipped_lines, np.int64))[:rows]
    blank = _blank_rows(path, frame, lines)
    if blank is not None:
        frame, lines = frame[~blank], lines[~blank]
    pre = {BAD_LINE: len(skipped_lines)} if skipped_lines else {}
    columns = {f: frame[c].to_numpy() for f, c in wanted.items() if f != hash_field and c in frame}
    hashes = from_strings(frame[wanted[hash_field]].to_numpy(object)) if hash_field in wanted else None
    return columns, lines, hashes, pre


def _blank_rows(path: Path, frame: pd.DataFrame, lines: np.ndarray) -> np.ndarray | None:
    """Rows that are blank lines (only whitespace; None: none), which pandas reads as rows of missing values
    (``skip_blank_lines=False`` keeps the line numbers right). A line of only commas is no blank line: its
    row keeps its "missing" error. Cheap on the usual file: the raw lines are read only when some row has no
    value after its first cell (a whitespace-only line puts its whitespace there)."""
    maybe = frame.iloc[:, -1].isna().to_numpy()
    if not maybe.any():
        return None
    for name in frame.columns[1:-1]:
        maybe = maybe & frame[name].isna().to_numpy()  # (pandas' arrays are read-only)
    rows = np.flatnonzero(maybe)
    first = frame.iloc[:, 0].iloc[rows].to_numpy(object)
    rows = rows[[not v.strip() if isinstance(v, str) else bool(pd.isna(v)) for v in first]]
    if not len(rows):
        return None
    raw = path.read_bytes().splitlines()  # pandas' line ends too: \n, \r\n and a lone \r
    blank = np.zeros(len(frame), bool)
    blank[rows] = [n <= len(raw) and not raw[n - 1].strip() for n in lines[rows].tolist()]
    return blank if blank.any() else None


def not_utf8(path: Path, data: bytes) -> TraceError:
    """The error for a file that is not UTF-8, naming the line of its first undecodable byte (a line ends at
    LF, CRLF or a lone CR, as for the CSV parser). Computed from ``data`` only once a decode has failed."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = exc.start
        line = data.count(b"\n", 0, at) + data.count(b"\r", 0, at) - data.count(b"\r\n", 0, at) + 1
        return TraceError(f"{path}: line {line}: not valid UTF-8 (byte 0x{data[at]:02x} at byte {at}); save the "
                          "file as UTF-8")
    return TraceError(f"{path}: not valid UTF-8; save the file as UTF-8")


class _RepeatedKey(Exception):
    """A JSON object that names a key twice (`json` would keep the last value without a word)."""


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object's ``(key, value)`` pairs as a dict, or `_RepeatedKey` naming the first key given twice."""
    record = dict(pairs)
    if len(record) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(key)
            seen.add(key)
    return record


_DECODE = json.JSONDecoder(object_pairs_hook=_unique_keys).decode
"""One decoder, built once: ``json.loads(line, object_pairs_hook=...)`` builds a decoder per call, which costs
as much again as the hook; this one reads the full Mooncake trace as fast as plain ``json.loads`` did."""


def jsonl_header(path: Path, head: bytes) -> list[str]:
    for number, line in enumerate(head.removeprefix(BOM).decode("utf-8", errors="replace").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            first = json.loads(line)
        except ValueError as exc:
            raise TraceError(f"{path}: line {number}: truncated or invalid JSON ({exc})") from exc
        if not isinstance(first, dict):
            raise TraceError(f"{path}: line {number}: not a JSON object")
        return list(first)
    raise TraceError(f"{path}: empty file (no JSON lines)")


def read_jsonl(path: Path, wanted: dict[str, str], hash_field: str | None, skip: bool) -> tuple:
    """One JSON decode per line (the slow container; canonical CSV and Parquet are the fast ones). A key
    repeated in a record is an error (or, skipping, a bad line), as a CSV header naming a column twice is."""
    names = [(f, c) for f, c in wanted.items() if f != hash_field]
    values: dict[str, list] = {f: [] for f, _ in names}
    cells: list[object] = []
    lines: list[int] = []
    pre: dict[str, int] = {}
    data = path.read_bytes()
    header = jsonl_header(path, data[:1 << 16])
    try:
        text = data.removeprefix(BOM).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(path, data) from exc
    keys: set[str] = set()
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = _DECODE(line)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except _RepeatedKey as exc:
            if not skip:
                raise TraceError(f"{path}: line {number}: key '{exc.args[0]}' appears more than once in the "
                                 f"JSON object {SKIP_HINT}") from None
            pre[BAD_KEY] = pre.get(BAD_KEY, 0) + 1
            continue
        except (ValueError, RecursionError) as exc:
            if not skip:
                raise TraceError(f"{path}: line {number}: truncated or invalid JSON ({exc}) {SKIP_HINT}") from exc
            pre[BAD_JSON] = pre.get(BAD_JSON, 0) + 1
            continue
        lines.append(number)
        keys.update(record)
        for f, c in names:
            values[f].append(record.get(c))
        if hash_field in wanted:
            cells.append(record.get(wanted[hash_field]))
    late = sorted(keys - set(header))
    if late:  # the header is the first record's keys: a field that starts later is never read
        warnings.warn(f"{path}: key(s) {', '.join(repr(k) for k in late[:5])} are not in the first record and are "
                      "not read (the first record's keys are the file's columns); give every key on the first line",
                      TraceWarning, stacklevel=4)
    columns = {f: _object_array(v) for f, v in values.items()}
    hashes = from_lists(cells) if hash_field in wanted else None
    return columns, np.array(lines, np.int64), hashes, pre


def _object_array(items: list) -> np.ndarray:
    """Keep JSON values as they came (numbers fast, anything else as objects for `to_float` to reject)."""
    if all(type(v) is int or type(v) is float for v in items):
        return np.array(items, dtype=np.float64)
    return np.fromiter(items, dtype=object, count=len(items))


def parquet_header(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(path).names)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise TraceError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {exc})") from exc


def read_parquet(path: Path, wanted: dict[str, str], hash_field: str | None, skip: bool) -> tuple:
    import pyarrow.parquet as pq

    present = [c for c in wanted.values() if c in set(parquet_header(path))]
    try:
        table = pq.read_table(path, columns=present)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise TraceError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {exc})") from exc
    columns = {}
    for f, c in wanted.items():
        if f == hash_field or c not in present:
            continue
        columns[f] = _arrow_values(table.column(c))
    hashes: Ragged | None = None
    if hash_field in wanted and wanted[hash_field] in present:
        hashes = from_arrow(table.column(wanted[hash_field]))
    return columns, np.arange(1, table.num_rows + 1, dtype=np.int64), hashes, {}


def _arrow_values(column) -> np.ndarray:
    """Numbers (nulls as NaN) without a Python object per row; anything else as objects for `to_float`."""
    import pyarrow as pa

    if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
        # unchecked cast: an id past 2**53 (Arrow's safe range) must reach the range checks as a number and
        # get their one-line error, not an Arrow traceback
        values = column.cast(pa.float64(), safe=False) if column.null_count else column
        return values.to_numpy()
    if column.null_count == 0 and pa.types.is_boolean(column.type):
        return column.to_numpy()
    return np.fromiter(column.to_pylist(), dtype=object, count=len(column))
