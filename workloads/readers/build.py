"""Turn raw columns from any container and format into a validated `Workload`, vectorised.

Every rule is a boolean mask over rows, checked in a fixed order; a row's first failing rule is its reason.
Without ``skip_bad_rows`` the first bad row (in file order) raises one `TraceError` naming the file, the line
(or row) and the field; with it, bad rows are dropped and counted by reason in ``Workload.skipped_reasons``.
Arrival times are rebased to the first arrival (``source`` says by how much), whatever the format.
No per-row Python runs unless a column fails its fast numeric parse.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from workloads.errors import TraceError, row_error
from workloads.ragged import Ragged, empty
from workloads.readers.formats import CONSTANT_FIELDS
from workloads.sessions import PREFIX_CHANGED, SESSION_RULES, session_reasons
from workloads.validation import (
    MAX_ARRIVAL_S,
    MAX_TOKENS,
    PAST_CLOCK,
    PAST_SPAN,
    cross_field_rules,
    group_and_hashes_rule,
    lower_bound_rule,
    upper_bound_rule,
)
from workloads.workload import NONE, ClosedLoop, Workload

MAX_ID = 2**53
"""Group ids travel through float64 on the way in; larger ids would silently lose precision."""
MAX_NAMED_ID = 2**62
"""Text group names map to ids in [MAX_ID, MAX_NAMED_ID), apart from every numeric id."""
TURN_MISSING = "missing (a session row needs its turn number)"
"""A session row with a blank turn: read as turn 0, it failed a later rule ("repeats an earlier row's
session_id and turn", "think_time_s given on a session's first turn") that hid the cause."""

HASH_LIST = "not a list of non-negative integers"
HASH_TEXT = "not non-negative integers separated by spaces (a text cell holds 0 1 2, not a JSON list [0, 1, 2])"
"""The reason of a bad ``prefix_hashes`` cell: a list (JSON Lines, Parquet, a DataFrame's lists), or text (a CSV
cell, a text column), where the expected form is the one thing a user cannot guess."""


@dataclass
class RawTable:
    """What a container reader hands over: raw values per canonical field, one entry per row."""

    path: str
    columns: dict[str, np.ndarray]
    locations: np.ndarray
    where: str = "line"
    hashes: Ragged | None = None
    pre_skipped: dict[str, int] = field(default_factory=dict)
    format_rules: list[tuple[str, str, np.ndarray]] = field(default_factory=list)
    """Rules a format's conversion found broken (a timestamp that is not a datetime): checked first, their
    cells read as no value by the rules after them, the cell shown as the file wrote it."""
    names: dict[str, str] = field(default_factory=dict)
    """The file's column for each field it names otherwise (Azure's ``TIMESTAMP`` for ``arrival_time_s``, a
    ``--columns`` mapping), for errors to name both."""

    @property
    def rows(self) -> int:
        return len(self.locations)


def to_float(values: np.ndarray) -> np.ndarray:
    """Numbers as float64; anything that is not a number (text, lists, blanks, booleans) becomes NaN. A
    boolean is not a count: ``True`` read as 1 token would be a silent misread."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iuf":
        return arr.astype(np.float64)
    if arr.dtype.kind == "b":
        return np.full(len(arr), np.nan)
    try:
        out = pd.to_numeric(pd.Series(arr, dtype=object), errors="coerce").to_numpy(np.float64, na_value=np.nan)
    except (TypeError, ValueError):
        return np.array([_one_float(v) for v in arr], np.float64)
    flags = [i for i in np.flatnonzero((out == 0) | (out == 1)) if isinstance(arr[i], (bool, np.bool_))]
    if flags:  # only where a boolean could have turned into a number
        out = out.copy()
        out[flags] = np.nan
    return out


def group_ids(values: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """``prefix_group`` (or ``session_id``) values as ids: numbers as they are; any other text is a name (same
    name, same group) mapped to a stable id of its own (`workloads.hashing.mix` over its UTF-8 bytes, a multiple of
    1024 so float64 holds it exactly), never to "no group". A value that is neither (a list, a boolean) becomes
    -1.5, which the whole-number rule rejects with the usual error naming the row."""
    from workloads.hashing import mix

    arr = np.asarray(values)
    if arr.dtype.kind != "O" and arr.dtype.kind != "U":
        return numbers
    out = numbers.copy()
    for i in np.flatnonzero(np.isnan(numbers)):
        v = arr[i]
        if v is None or v is pd.NA or (isinstance(v, float) and v != v):
            continue
        if isinstance(v, str):
            name = v.strip()
            if not name:
                continue
            h = 0
            for byte in name.encode():
                h = mix(h, byte)
            out[i] = float(MAX_ID + (h % (MAX_NAMED_ID - MAX_ID)) // 1024 * 1024)
        else:
            out[i] = -1.5  # not a number and not a name: rejected as "must be a whole number"
    return out


def _one_float(value: object) -> float:
    try:
        return float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else np.nan
    except ValueError:
        return np.nan


def _integer_rules(name: str, x: np.ndarray, lo: float | None, hi: float | None, optional: bool,
                   cells: np.ndarray | None = None) -> list[tuple]:
    """Parsing rules for a whole-number field in [lo, hi]; a missing optional value is allowed (a default),
    but a cell of ``cells`` (the file's own values) that holds something else than a number is not: text in
    ``n`` silently read as the default 1 would be a misread. ``lo`` and ``hi`` None: a request field, whose
    bounds are the record rules of `workloads.validation`, which a `Workload` built in Python gets too."""
    present = ~np.isnan(x)
    with np.errstate(invalid="ignore"):
        rules = [] if optional else [(name, "missing or not a number", ~present)]
        if optional and cells is not None:
            rules.append((name, "not a number", _not_numbers(cells, present)))
        rules.append((name, "must be a whole number", present & (x != np.floor(x))))
        rules.append(lower_bound_rule(name, x) if lo is None else (name, f"must be >= {lo:g}", present & (x < lo)))
        rules.append(upper_bound_rule(name, x) if hi is None else (name, f"must be <= {hi:g}", present & (x > hi)))
    return rules


def build_workload(raw: RawTable, *, skip_bad_rows: bool, name: str, source: str,
                   prefix_hash_tokens: int = 512, **attrs) -> Workload:
    """Validate ``raw`` and return its requests as a `Workload` (rows in file order)."""
    if raw.rows == 0 and not raw.pre_skipped:
        raise TraceError(f"{raw.path}: no requests (the file has no data rows)")
    x = {key: to_float(values) for key, values in raw.columns.items()}
    for key, _, mask in raw.format_rules:
        x[key] = np.where(mask, np.nan, x[key])
    rows = raw.rows
    nan = np.full(rows, np.nan)
    cells = raw.columns.get
    prompt, output = x["prompt_tokens"], x["output_tokens"]
    rules: list[tuple[str, str, np.ndarray]] = list(raw.format_rules)
    if "arrival_time_s" in x:
        t = x["arrival_time_s"]
        rules.append(("arrival_time_s", "missing or not a number", np.isnan(t)))
        rules.append(("arrival_time_s", "must be finite and >= 0", ~np.isnan(t) & ~(np.abs(t) < np.inf) | (t < 0)))
    if "id" in x:
        rules += _integer_rules("id", x["id"], 0, MAX_ID, optional=False)
        rules.append(("id", "repeats an earlier row's id", _repeats(x["id"])))
    mx, n, beam, plen = (x.get(key, nan) for key in ("max_tokens", "n", "beam_width", "prefix_len"))
    hashes = raw.hashes if raw.hashes is not None else empty(rows)
    record = {"prompt_tokens": prompt, "output_tokens": output, "max_tokens": mx, "n": n, "beam_width": beam,
              "prefix_len": plen, "hash_counts": hashes.counts}
    with np.errstate(invalid="ignore"):  # a missing value (NaN) breaks no rule
        cross = {rule[0]: rule for rule in cross_field_rules(record, prefix_hash_tokens)}
    rules += _integer_rules("prompt_tokens", prompt, None, None, optional=False)
    rules += _integer_rules("output_tokens", output, None, None, optional=False)
    rules += _integer_rules("max_tokens", mx, None, None, optional=True, cells=cells("max_tokens"))
    rules.append(cross["max_tokens"])
    rules += _integer_rules("n", n, None, None, optional=True, cells=cells("n"))
    rules += _integer_rules("beam_width", beam, None, None, optional=True, cells=cells("beam_width"))
    rules.append(cross["beam_width"])
    group, group_rules = _named_ids(raw, "prefix_group", x)
    rules += group_rules
    priority = x.get("priority", nan)
    if "priority" in raw.columns:
        rules.append(("priority", "must be a whole number", _not_numbers(raw.columns["priority"], ~np.isnan(priority))))
    rules += _integer_rules("priority", priority, -MAX_ID, MAX_ID, optional=True)
    rules += _integer_rules("prefix_len", plen, None, None, optional=True, cells=cells("prefix_len"))
    rules.append(cross["prefix_len"])
    if "prefix_len" in x:  # without a group nothing shares the prefix: the value would be dropped unread
        rules.append(("prefix_len", "given without prefix_group", (plen > 0) & np.isnan(group)))
    rules.append(("prefix_hashes", HASH_TEXT if hashes.text else HASH_LIST, hashes.bad))
    rules.append(cross["prefix_hashes"])
    rules.append(group_and_hashes_rule(group, hashes.counts))
    session, session_rules = _named_ids(raw, "session_id", x)
    rules += session_rules
    turn, think = x.get("turn", nan), x.get("think_time_s", nan)
    _check_turn_column(raw, session)
    rules += _integer_rules("turn", turn, 0, MAX_TOKENS, optional=True, cells=cells("turn"))
    if "turn" in raw.columns:  # (without the column each session has one row: `_check_turn_column`)
        rules.append(("turn", TURN_MISSING, ~np.isnan(session) & np.isnan(turn)))
    if "think_time_s" in raw.columns:
        rules.append(("think_time_s", "not a number", _not_numbers(raw.columns["think_time_s"], ~np.isnan(think))))

    reason = np.full(rows, -1, np.int64)
    for k, (_, _, mask) in enumerate(rules):
        reason[(reason < 0) & mask] = k
    if "arrival_time_s" in x:
        ok = np.flatnonzero(reason < 0)
        t_ok = x["arrival_time_s"][ok]
        previous_max = np.maximum.accumulate(t_ok)
        late = np.zeros(len(ok), bool)
        late[1:] = t_ok[1:] < previous_max[:-1]
        reason[ok[late]] = len(rules)
        rules.append(("arrival_time_s", "timestamps out of order (earlier than a previous row)", late))
        far = (t_ok - t_ok[:1] > MAX_ARRIVAL_S) & ~late
        reason[ok[far]] = len(rules)
        rules.append(("arrival_time_s", PAST_SPAN, far))
    if "session_id" in x or "turn" in x or "think_time_s" in x:
        found = _session_reasons(reason, session, turn, think, prompt, output, hashes.counts, group, plen)
        reason[found >= 0] = len(rules) + found[found >= 0]
        rules += [(field, problem, found == k) for k, (field, problem) in enumerate(SESSION_RULES)]

    bad = reason >= 0
    if bad.any() and not skip_bad_rows:
        i = int(np.argmax(bad))
        column, problem, _ = rules[reason[i]]
        raw_value = raw.columns.get(column, None)
        shown = raw_value is not None and column != "prefix_hashes" and problem not in (TURN_MISSING, PREFIX_CHANGED)
        value = raw_value[i] if shown else None
        raise row_error(raw.path, f"{raw.where} {raw.locations[i]}", column, problem, value,
                        column=raw.names.get(column))
    skipped = dict(raw.pre_skipped)
    for k, count in zip(*np.unique(reason[bad], return_counts=True), strict=True):
        key = f"{rules[k][0]}: {rules[k][1]}"
        skipped[key] = skipped.get(key, 0) + int(count)
    keep = np.flatnonzero(~bad)
    if len(keep) == 0:
        detail = ", ".join(f"{c} {r}" for r, c in sorted(skipped.items()))
        raise TraceError(f"{raw.path}: no usable rows ({detail})")

    def column(values: np.ndarray, default: int) -> np.ndarray:
        v = values[keep]
        return np.where(np.isnan(v), default, v).astype(np.int64)

    kept_hashes = hashes.take(keep)
    arrival = x["arrival_time_s"][keep] if "arrival_time_s" in x else np.zeros(len(keep))
    offset = float(arrival[0])  # the earliest: arrivals are in order
    if offset:  # seconds from the trace start, as the canonical format defines them: epoch-sized timestamps
        arrival = arrival - offset  # would leave a millisecond step ~1e-4 s of float precision, or none at all
        source += f"; arrival times rebased by {offset:.15g} s (the first arrival)"
    return Workload(
        arrival_time_s=arrival,
        prompt_tokens=prompt[keep].astype(np.int64),
        output_tokens=output[keep].astype(np.int64),
        max_tokens=column(mx, NONE),
        n=column(n, 1),
        beam_width=column(beam, 1),
        prefix_group=column(group, NONE),
        prefix_len=column(plen, 0),
        priority=column(priority, 0),
        session_id=column(session, NONE),
        turn=column(turn, 0),
        think_time_s=think[keep] if "think_time_s" in x else None,
        hash_offsets=kept_hashes.offsets,
        hash_values=kept_hashes.values,
        prefix_hash_tokens=prefix_hash_tokens,
        ids=column(x["id"], 0) if "id" in x else None,
        trace_row=raw.locations[keep],
        name=name,
        source=source,
        skipped_rows=int(sum(skipped.values())),
        skipped_reasons=skipped,
        **attrs,
    )


def _named_ids(raw: RawTable, field: str, x: dict[str, np.ndarray]) -> tuple[np.ndarray, list[tuple]]:
    """An id column that may hold names (``prefix_group``, ``session_id``): numbers as they are, text as a
    stable id of its own (`group_ids`): a conversation id such as ``conv-a`` read as "no session" would
    silently turn a multi-turn trace into unrelated requests. Returns the ids and their rules."""
    ids = x.get(field, np.full(raw.rows, np.nan))
    rules: list[tuple] = []
    if field in raw.columns:
        numeric = ids
        ids = group_ids(raw.columns[field], ids)
        with np.errstate(invalid="ignore"):
            rules.append((field, f"must be <= {MAX_ID:g}", numeric > MAX_ID))
    lo = None if field == "prefix_group" else 0
    return ids, rules + _integer_rules(field, ids, lo, MAX_NAMED_ID, optional=True)


def _check_turn_column(raw: RawTable, session: np.ndarray) -> None:
    """A session with more than one row needs a ``turn`` column: without one every row was read as turn 0, and
    the error blamed the second row for repeating the first's session_id and turn. (Sessions of one row each
    need none: each is its own first turn.) Not skippable: no row is wrong, the file lacks a column."""
    if "turn" in raw.columns:
        return
    again = _repeats(session)
    if again.any():
        i = int(np.argmax(again))
        raise row_error(raw.path, f"{raw.where} {raw.locations[i]}", "session_id", "repeats an earlier row's "
                        "session, and the file has no turn column: a session_id column needs a turn column (each "
                        "row's turn in its session: 0, 1, 2, ... in file order)", skippable=False,
                        column=raw.names.get("session_id"))


def _repeats(ids: np.ndarray) -> np.ndarray:
    """Rows whose id an earlier row has already (request ids name rows in every output table)."""
    order = np.argsort(ids, kind="stable")
    ranked = ids[order]
    repeat = np.zeros(len(ids), bool)
    with np.errstate(invalid="ignore"):
        repeat[order[1:]] = ranked[1:] == ranked[:-1]
    return repeat


def _session_reasons(reason: np.ndarray, session: np.ndarray, turn: np.ndarray, think: np.ndarray,
                     prompt: np.ndarray, output: np.ndarray, hash_counts: np.ndarray, group: np.ndarray,
                     plen: np.ndarray) -> np.ndarray:
    """Each row's first broken `workloads.sessions.SESSION_RULES` rule (-1: none), over the rows no earlier
    rule rejected (``reason`` < 0), so that a turn after a bad turn is bad too."""
    ok = reason < 0
    ints = [np.where(ok & ~np.isnan(v), v, default).astype(np.int64)
            for v, default in ((session, NONE), (turn, 0), (prompt, 1), (output, 1), (group, NONE), (plen, 0))]
    return session_reasons(ints[0], ints[1], think, ints[2], ints[3], hash_counts, candidates=ok,
                           prefix=(ints[4], ints[5]))[0]


def workload_constants(raw: RawTable, default_hash_tokens: int) -> dict:
    """Take the workload-wide columns (`CONSTANT_FIELDS`) out of ``raw``, as `Workload` keyword arguments.

    Each holds one value, repeated on every row that is not blank; a cell that is not a number, out of its
    field's range, or unlike the first row's value is an error naming its line (skipping rows cannot mend a
    workload-wide value). ``default_hash_tokens`` (the format's hash unit) applies when the file gives none."""
    found: dict[str, float] = {}
    sessions = "session_id" in raw.columns
    for name in CONSTANT_FIELDS:
        if sessions and name == "think_time_s":
            continue  # each turn's own think time: a request column
        values = raw.columns.pop(name, None)
        if values is not None and (value := _constant(raw, name, values)) is not None:
            found[name] = value
    constants: dict = {"prefix_hash_tokens": int(found.get("prefix_hash_tokens", default_hash_tokens))}
    if "closed_loop_users" in found and sessions:
        raise TraceError(f"{raw.path}: field 'closed_loop_users': sessions (session_id) and a closed loop of "
                         "users cannot be combined")
    if "closed_loop_users" in found:
        constants["closed_loop"] = ClosedLoop(int(found["closed_loop_users"]), found.get("think_time_s", 0.0))
    elif "think_time_s" in found:
        raise TraceError(f"{raw.path}: field 'think_time_s': given without closed_loop_users")
    return constants


def _constant(raw: RawTable, field: str, values: np.ndarray) -> float | None:
    """The one value of a workload-wide column (None when every cell is blank), checked row by row."""
    x = to_float(values)
    given = ~np.isnan(x)
    rules = [("not a number", _not_numbers(values, given))]
    if field == "think_time_s":
        with np.errstate(invalid="ignore"):
            rules.append(("must be finite and >= 0", given & ~((x >= 0) & (x < np.inf))))
            rules.append((PAST_CLOCK, x > MAX_ARRIVAL_S))
    else:
        rules += [(problem, mask) for _, problem, mask in _integer_rules(field, x, 1, MAX_TOKENS, optional=True)]
    first = x[given][0] if given.any() else None
    if first is not None:
        rules.append((f"must be the same on every row (the first value is {first:g})", given & (x != first)))
    bad = np.logical_or.reduce([mask for _, mask in rules])
    if bad.any():
        i = int(np.argmax(bad))
        problem = next(problem for problem, mask in rules if mask[i])
        raise row_error(raw.path, f"{raw.where} {raw.locations[i]}", field, problem, values[i], skippable=False,
                        column=raw.names.get(field))
    return None if first is None else float(first)


def _not_numbers(values: np.ndarray, given: np.ndarray) -> np.ndarray:
    """Cells that hold something other than a number: NaN, None and blank text are no value at all."""
    bad = np.zeros(len(values), bool)
    if values.dtype.kind == "O":
        for i in np.flatnonzero(~given):
            v = values[i]
            bad[i] = not (v is None or v is pd.NA or (isinstance(v, float) and v != v)
                          or (isinstance(v, str) and not v.strip()))
    return bad
