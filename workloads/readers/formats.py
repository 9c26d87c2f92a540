"""The trace formats kvsim reads: which columns mean what, and how to tell one format from another.

A format maps the canonical fields (``arrival_time_s``, ``prompt_tokens``, ...) to the column names of its
files and says how its timestamps are written. Any format can sit in any container (CSV, JSON Lines, Parquet);
detection picks the first format whose required columns the file has, after the caller's column overrides.
"""

from __future__ import annotations

import difflib
import re
import warnings
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from workloads.errors import TraceError, TraceWarning

CANONICAL_FIELDS = ("id", "arrival_time_s", "prompt_tokens", "output_tokens", "max_tokens", "n", "beam_width",
                    "prefix_group", "prefix_len", "prefix_hashes", "priority", "session_id", "turn")
CONSTANT_FIELDS = ("prefix_hash_tokens", "closed_loop_users", "think_time_s")
"""Canonical-format columns that hold one workload-wide value (repeated on every row). In a file with a
``session_id`` column, ``think_time_s`` is each turn's own think time instead (`workloads.sessions`)."""
MISSPELLING_CUTOFF = 0.82
"""`difflib` ratio (of the lower-cased name) from which a column kvsim does not read is taken for a misspelled
field: ``session`` -> ``session_id`` (0.82), ``prefix_length`` -> ``prefix_len`` (0.87), ``max_token`` (0.95),
``priorty`` (0.93) are errors; ``num_tokens`` -> ``max_tokens``, ``idx`` -> ``id`` (0.80), plausibly columns of
their own, and every column of the shared traces (``total_tokens`` 0.73) are only named in a warning."""


UNITS = {"datetime": "arrival times as datetimes", "ms": "arrival times in milliseconds",
         "s": "arrival times in seconds", None: "no arrival times"}
"""`TraceFormat.time_unit` in words, for a message that suggests a format."""
NAMED_UNITS = {"s": ("s", "sec", "secs", "second", "seconds"), "ms": ("ms", "msec", "msecs", "millis", "milliseconds"),
               "us": ("us", "usec", "usecs", "micros", "microseconds"), "ns": ("ns", "nsec", "nanos", "nanoseconds"),
               "min": ("mins", "minute", "minutes")}
"""The time unit a column's name states (``timestamp_ms``, ``TimeMs``, ``t (us)``): what `named_unit` reads."""
UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds", "min": "minutes"}


@dataclass(frozen=True)
class TraceFormat:
    name: str
    label: str
    columns: dict[str, str]
    required: tuple[str, ...]
    time_unit: str | None
    """'datetime' (absolute; arrival = seconds since the first), 'ms', 's', or None (no timestamps)."""
    hash_tokens: int = 512
    failed_output_zero: bool = False
    """Rows with zero output tokens are failed requests: kept out and counted, not an error."""


FORMATS: dict[str, TraceFormat] = {
    "azure": TraceFormat(
        "azure", "Azure LLM inference trace 2023 CSV",
        {"arrival_time_s": "TIMESTAMP", "prompt_tokens": "ContextTokens", "output_tokens": "GeneratedTokens"},
        ("arrival_time_s", "prompt_tokens", "output_tokens"), "datetime"),
    "mooncake": TraceFormat(
        "mooncake", "Mooncake trace JSONL (512-token hash_ids)",
        {"arrival_time_s": "timestamp", "prompt_tokens": "input_length", "output_tokens": "output_length",
         "prefix_hashes": "hash_ids"},
        ("arrival_time_s", "prompt_tokens", "output_tokens"), "ms"),
    "burstgpt": TraceFormat(
        "burstgpt", "BurstGPT CSV",
        {"arrival_time_s": "Timestamp", "prompt_tokens": "Request tokens", "output_tokens": "Response tokens"},
        ("arrival_time_s", "prompt_tokens", "output_tokens"), "s", failed_output_zero=True),
    "vidur": TraceFormat(
        "vidur", "Vidur/etalon length-statistics CSV (no timestamps)",
        {"prompt_tokens": "num_prefill_tokens", "output_tokens": "num_decode_tokens"},
        ("prompt_tokens", "output_tokens"), None),
    "kvsim": TraceFormat(
        "kvsim", "kvsim canonical trace",
        {f: f for f in CANONICAL_FIELDS + CONSTANT_FIELDS},
        ("arrival_time_s", "prompt_tokens", "output_tokens"), "s"),
}


def mapping_for(fmt: TraceFormat, overrides: dict[str, str] | None) -> dict[str, str]:
    """The format's field -> column mapping with the caller's overrides applied."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(CANONICAL_FIELDS + CONSTANT_FIELDS))
    if unknown:
        raise TraceError(f"unknown field(s) in the column mapping: {', '.join(unknown)} "
                         f"(fields: {', '.join(CANONICAL_FIELDS + CONSTANT_FIELDS)})")
    return fmt.columns | overrides


def detect_format(path: object, header: list[str], overrides: dict[str, str] | None) -> TraceFormat:
    """The first format whose required columns are all in ``header``. When none is, a header that misses a
    format's required columns only by a near-miss spelling (``arrival_time``, ``prompt_token``) is told which
    column is close to which, as a misspelled optional column is (`check_unread_columns`): the generic "unknown
    format" gave no clue that one letter was all that was wrong."""
    names = set(header)
    for fmt in FORMATS.values():
        mapping = mapping_for(fmt, overrides)
        if all(mapping[f] in names for f in fmt.required):
            return fmt
    shown = ", ".join(header[:8]) + (", ..." if len(header) > 8 else "")
    near = _near_miss(header, overrides)
    if near is not None:  # (with the format's units: a Mooncake name for a column in seconds reads as ms)
        fmt, pairs = near
        required = f"which format {fmt.name} ({UNITS[fmt.time_unit]}) requires"
        if len(pairs) == 1:
            close = (f"column '{pairs[0][0]}' is close to '{pairs[0][1]}', {required}; rename it to "
                     f"'{pairs[0][1]}' if that is what it holds")
        else:
            close = (f"columns {', '.join(repr(c) for c, _ in pairs)} are close to "
                     f"{', '.join(repr(w) for _, w in pairs)}, {required}; rename them if that is what they hold")
        raise TraceError(f"{path}: unknown trace format: {close}, or map the columns with --columns "
                         f"field=column,... (read as kvsim's canonical format) (columns: {shown})")
    raise TraceError(f"{path}: unknown trace format: its columns ({shown}) match none of "
                     f"{', '.join(FORMATS)}; name one with --trace-format, or map the columns with --columns "
                     "field=column,... (read as kvsim's canonical format)")


def close_column(wanted: str, header: Iterable[object], taken: Collection[str] = ()) -> str | None:
    """The column of ``header`` (not in ``taken``) whose name is close to ``wanted`` (`MISSPELLING_CUTOFF`,
    compared lower-cased, as `check_unread_columns` compares), or None."""
    candidates = {str(c).lower(): str(c) for c in header if str(c) not in taken and str(c).strip()}
    close = difflib.get_close_matches(wanted.lower(), list(candidates), n=1, cutoff=MISSPELLING_CUTOFF)
    return candidates[close[0]] if close else None


def _near_miss(header: list[str], overrides: dict[str, str] | None
               ) -> tuple[TraceFormat, list[tuple[str, str]]] | None:
    """The format (most required columns present, then `FORMATS` order) whose every missing required column
    has a close column in ``header``, with its ``(column, required column)`` pairs; None if there is none."""
    names = set(header)
    best: tuple[int, TraceFormat, list[tuple[str, str]]] | None = None
    for fmt in FORMATS.values():
        mapping = mapping_for(fmt, overrides)
        required = [mapping[f] for f in fmt.required]
        present = [c for c in required if c in names]
        pairs = []
        for wanted in required:
            if wanted in names:
                continue
            column = close_column(wanted, header, taken=present + [c for c, _ in pairs])
            if column is None:
                break
            pairs.append((column, wanted))
        else:
            if best is None or len(present) > best[0]:
                best = (len(present), fmt, pairs)
    return None if best is None else (best[1], best[2])


def named_unit(column: str) -> str | None:
    """The time unit ``column``'s name states, as a key of `NAMED_UNITS` (``timestamp_ms`` -> ``ms``,
    ``arrivalTimeUs`` -> ``us``, ``arrival_time_s`` -> ``s``), or None when it states none, or two."""
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(column)).lower())
    found = {unit for unit, names in NAMED_UNITS.items() for word in words if word in names}
    return found.pop() if len(found) == 1 else None


def check_time_unit(path: object, fmt: TraceFormat, column: str | None) -> None:
    """A `TraceError` when the column read as arrival times names a unit other than the one ``fmt`` reads it
    in. Why: ``--columns arrival_time_s=timestamp_ms`` (what an unknown-format error suggests) read
    milliseconds as seconds, stretching a 3 req/s trace to 0.003 req/s without a word. A format's unit is how
    kvsim converts, so the fix is the format with the column's unit, or seconds in the file."""
    if column is None or fmt.time_unit not in ("s", "ms"):
        return
    unit = named_unit(column)
    if unit is None or unit == fmt.time_unit:
        return
    if unit == "ms":
        fix = ("add --trace-format mooncake to read it in milliseconds (mapping with --columns every field "
               "whose column is not named as Mooncake's)")
    elif unit == "s":
        fix = "read it with a format in seconds (--trace-format kvsim)"
    else:
        fix = "convert it to seconds (kvsim reads arrival times in seconds, or milliseconds with --trace-format mooncake)"
    raise TraceError(f"{path}: line 1: field 'arrival_time_s' (column '{column}'): the column's name says "
                     f"{UNIT_WORDS[unit]}, but format {fmt.name} reads it in {UNIT_WORDS[fmt.time_unit]}; {fix}, "
                     "or rename the column if its name is wrong")


def time_mapping_hint(column: str) -> str:
    """How to read ``column`` as the arrival times, in the unit its name states (`named_unit`): the advice an
    error or warning gives must not itself read milliseconds as seconds."""
    unit = named_unit(column)
    if unit == "ms":
        return (f"--trace-format mooncake --columns arrival_time_s={column},prompt_tokens=...,output_tokens=... "
                "(milliseconds; the fields format mooncake reads from its own column names, mapped to yours)")
    if unit in (None, "s"):
        return f"--columns arrival_time_s={column} (seconds)"
    return f"--columns arrival_time_s=COLUMN (seconds; '{column}' holds {UNIT_WORDS[unit]}: convert it first)"


def format_named(name: str) -> TraceFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise TraceError(f"unknown trace format {name!r} (known: {', '.join(FORMATS)})") from None


def check_unread_columns(path: object, header: Iterable[object], read: Mapping[str, str], where: str = "",
                         warned: Collection[str] = ()) -> None:
    """The canonical format's columns that nothing reads, given the fields ``read`` (field -> column: its
    keys are the fields the input has, its values the columns read). A column close to a field the input lacks
    (`MISSPELLING_CUTOFF`) is a `TraceError`: a misspelled ``prefix_len`` dropped unread changed a run's hit rate
    from 0.84 to 0.04 without a word. Any other is named in one `TraceWarning`, not refused: real traces carry
    columns of their own. Only for the canonical format: a named format's other columns (BurstGPT's ``Model``,
    Vidur's ``pd_ratio``) are its known, deliberately unread ones. ``warned``: columns another warning has
    named already (an unread timestamp)."""
    used = set(read.values())
    unread = [str(c) for c in header if str(c) not in used and str(c).strip()]
    lacking = [f for f in CANONICAL_FIELDS + CONSTANT_FIELDS if f not in read]
    for column in unread:
        close = difflib.get_close_matches(column.lower(), lacking, n=1, cutoff=MISSPELLING_CUTOFF)
        if close:
            raise TraceError(f"{path}: {where}column '{column}': not a kvsim field, but close to '{close[0]}', "
                             f"which this trace does not have: rename it to '{close[0]}' if that is what it holds, "
                             "or to a name further from kvsim's fields if not")
    unread = [c for c in unread if c not in warned]
    if unread:
        names = ", ".join(repr(c) for c in unread[:5]) + (", ..." if len(unread) > 5 else "")
        warnings.warn(f"{path}: column(s) {names} are not kvsim fields and are not read", TraceWarning,
                      stacklevel=3)
