"""The trace formats kvsim reads: which columns mean what, and how to tell one format from another.

A format maps the canonical fields (``arrival_time_s``, ``prompt_tokens``, ...) to the column names of its
files and says how its timestamps are written. Any format can sit in any container (CSV, JSON Lines, Parquet);
detection picks the first format whose required columns the file has, after the caller's column overrides.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.errors import TraceError

CANONICAL_FIELDS = ("id", "arrival_time_s", "prompt_tokens", "output_tokens", "max_tokens", "n", "beam_width",
                    "prefix_group", "prefix_len", "prefix_hashes", "priority", "session_id", "turn")
CONSTANT_FIELDS = ("prefix_hash_tokens", "closed_loop_users", "think_time_s")
"""Canonical-format columns that hold one workload-wide value (repeated on every row). In a file with a
``session_id`` column, ``think_time_s`` is each turn's own think time instead (`workloads.sessions`)."""


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
    """The first format whose required columns are all in ``header``."""
    names = set(header)
    for fmt in FORMATS.values():
        mapping = mapping_for(fmt, overrides)
        if all(mapping[f] in names for f in fmt.required):
            return fmt
    shown = ", ".join(header[:8]) + (", ..." if len(header) > 8 else "")
    raise TraceError(f"{path}: unknown trace format: its columns ({shown}) match none of "
                     f"{', '.join(FORMATS)}; name one with --trace-format, or map the columns with --columns "
                     "field=column,... (read as kvsim's canonical format)")


def format_named(name: str) -> TraceFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise TraceError(f"unknown trace format {name!r} (known: {', '.join(FORMATS)})") from None
