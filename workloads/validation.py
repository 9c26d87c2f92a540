"""The one home of the rules that decide whether a request record is valid.

`Request` (one record), `Workload` (columns) and the trace readers (raw file columns) all ask `record_rules`,
so a rule and its wording change in one place. Each rule is ``(field, problem, bad)`` where ``bad`` marks the
records that break it. The rules use only comparisons and ``&``/``|``, so the same code runs over numpy
columns (vectorised, one pass per rule) and over plain numbers (one `Request`). A missing optional value is
NaN, which fails no comparison, so it breaks no rule. Callers add their context to the message: the readers
the file, row and field (and count skipped rows by ``"field: problem"``), `Workload` its name, `Request` its id.

What stays with the readers is parsing: "missing or not a number" and "must be a whole number". The upper bounds
(`MAX_TOKENS`, `MAX_SAMPLES`, `MAX_ARRIVAL_S`) are here: the readers refuse a row past them, a `Workload` or a
`Request` built in Python refuses a count past them (`UPPER_BOUNDS`), and the generator refuses options and length
specs that ask for more, so that what it writes reads back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MAX_TOKENS = 10**9
"""Token counts above this are certainly corrupt (and would overflow downstream arithmetic)."""
MAX_SAMPLES = 10**6
"""Most parallel samples (``n``) or beams (``beam_width``) one request may have."""
MAX_ARRIVAL_S = 1e9
"""Latest time, in seconds (about 32 years), a request may arrive at (a trace's: after its first arrival) and the
longest think time or turn gap a trace row, spec or `workloads.generate.generate` may set.
kvsim's clock is float seconds: at 1e9 s it still resolves a step to 1e-7 s, past 1e13 s a step's time is
visibly rounded and past 1e15 s latencies are off by percents. A rate that spreads the requests further
(``rate=1e-20``), or a trace timestamp that far out, is a slip, whose run was wrong rather than refused."""
PAST_CLOCK = f"must be <= {MAX_ARRIVAL_S:g} s (about 32 years)"
"""The problem a think time past `MAX_ARRIVAL_S` is, in a trace row, a `Workload` or a closed loop."""
PAST_SPAN = f"more than {MAX_ARRIVAL_S:g} s (about 32 years) after the first arrival"
"""The problem an arrival past `MAX_ARRIVAL_S` is, in a trace row or a `Workload`: counted from the first arrival,
as a trace's rebased times are, so that epoch-seconds timestamps are no slip and 1e30 s is."""

LOWER_BOUNDS = {"prompt_tokens": 1, "output_tokens": 1, "max_tokens": 1, "n": 1, "beam_width": 1,
                "prefix_group": 0, "prefix_len": 0}
"""The smallest valid value of each whole-number field of a request."""
UPPER_BOUNDS = {"prompt_tokens": MAX_TOKENS, "output_tokens": MAX_TOKENS, "max_tokens": MAX_TOKENS,
                "n": MAX_SAMPLES, "beam_width": MAX_SAMPLES, "prefix_len": MAX_TOKENS}
"""The largest valid value of each count of a request: the readers refuse a row past it, and a `Workload` or a
`Request` built in Python does too (it accepted ``prompt_tokens=10**12``, which its own trace file then failed)."""

BOTH_N_AND_BEAM = "use either n (parallel sampling) or beam_width, not both"

GROUP_AND_HASHES = "given with prefix_hashes: a request's shared prefix is its group's or its hashes', not both"

Rule = tuple[str, str, Any]
"""``(field, problem, bad)``: ``bad`` is a boolean mask over records (or one bool for one record)."""


def lower_bound_rule(field: str, values: Any) -> Rule:
    """The record breaks ``field``'s lower bound (a missing value, NaN, does not)."""
    low = LOWER_BOUNDS[field]
    return field, f"must be >= {low}", values < low


def upper_bound_rule(field: str, values: Any) -> Rule:
    """The record breaks ``field``'s upper bound (a missing value, NaN, does not)."""
    high = UPPER_BOUNDS[field]
    return field, f"must be <= {high:g}", values > high


def cross_field_rules(columns: dict[str, Any], prefix_hash_tokens: int) -> list[Rule]:
    """Rules between fields. ``columns`` holds ``prompt_tokens``, ``output_tokens``, ``max_tokens``, ``n``,
    ``beam_width``, ``prefix_len`` and ``hash_counts`` (prefix hashes per record); absent optional values NaN."""
    prompt, unit = columns["prompt_tokens"], prefix_hash_tokens
    return [
        ("max_tokens", "must be >= output_tokens", columns["max_tokens"] < columns["output_tokens"]),
        ("beam_width", BOTH_N_AND_BEAM, (columns["n"] > 1) & (columns["beam_width"] > 1)),
        ("prefix_len", "must be within the prompt", columns["prefix_len"] > prompt),
        ("prefix_hashes", f"more hashes than {unit}-token blocks of the prompt",
         (columns["hash_counts"] - 1) * unit >= prompt),
    ]


def group_and_hashes_rule(group: Any, hash_counts: Any) -> Rule:
    """A record names a prefix group (``group == group``: not NaN) and gives prefix hashes too."""
    return "prefix_group", GROUP_AND_HASHES, (hash_counts > 0) & (group == group)


def record_rules(columns: dict[str, Any], prefix_hash_tokens: int) -> list[Rule]:
    """Every rule of a request record, in the order a record's first failing rule is reported: each
    field's lower bound, each count's upper bound, then the rules between fields. ``columns`` as for
    `cross_field_rules`, plus ``prefix_group``."""
    bounds = [lower_bound_rule(field, columns[field]) for field in LOWER_BOUNDS]
    bounds += [upper_bound_rule(field, columns[field]) for field in UPPER_BOUNDS]
    return (bounds + cross_field_rules(columns, prefix_hash_tokens)
            + [group_and_hashes_rule(columns["prefix_group"], columns["hash_counts"])])


def hash_unit_problem(prefix_hash_tokens: int) -> str | None:
    """The workload-wide hash unit's rule (one value, not a column)."""
    return None if prefix_hash_tokens >= 1 else f"prefix_hash_tokens: must be >= 1 (got {prefix_hash_tokens})"


def first_problem(columns: dict[str, Any], prefix_hash_tokens: int) -> str | None:
    """``"field: problem"`` for the first rule any record breaks, or None when every record is valid.
    ``columns`` are numpy columns; a column with one value for every record (say, all missing) may be a
    scalar, which saves building it."""
    if (unit := hash_unit_problem(prefix_hash_tokens)) is not None:
        return unit
    with np.errstate(invalid="ignore"):  # NaN compares False: a missing value breaks no rule
        rules = record_rules(columns, prefix_hash_tokens)
    for field, problem, bad in rules:
        if np.any(bad):
            return f"{field}: {problem}"
    return None


def record_problem(record: dict[str, Any], prefix_hash_tokens: int) -> str | None:
    """`first_problem` for one record of plain numbers (no numpy on this path: a `Request` is built per
    iterated request, so this runs a million times for a million-request trace)."""
    if (unit := hash_unit_problem(prefix_hash_tokens)) is not None:
        return unit
    for field, problem, bad in record_rules(record, prefix_hash_tokens):
        if bad:
            return f"{field}: {problem}"
    return None
