"""A measured serving run, per request: what ``kvsim calibrate --from-trace`` fits to and scores against.

Three inputs are read into one table (`MeasuredRun.frame`, columns ``arrival_time_s, prompt_tokens,
output_tokens, ttft_s, e2e_s, tpot_s, phase, warmup`` and, where given, ``prefix_group, prefix_len, session_id,
turn, n, beam_width`` and ``hash_ids`` (tuples of ints, their unit `MeasuredRun.prefix_hash_tokens`)):

- a per-request CSV with at least ``arrival_time_s,prompt_tokens,output_tokens,ttft_s,e2e_s`` (optional:
  ``phase``, ``warmup`` 0/1 or true/false, ``prefix_group`` (a whole number >= 0 or a group name, blank for
  none), ``prefix_len``, and together ``session_id`` (a whole number >= 0 or a conversation name, blank for no
  session) and ``turn`` (0, 1, 2, ... in its session), checked by the trace readers' session rules:
  `workloads.sessions`; ``n`` and ``beam_width``, a request's parallel samples or beams, blank for 1, not both
  above 1; ``hash_ids``, the prompt's block hashes as Mooncake's traces give them (whole numbers >= 0 separated
  by spaces, ``0 1 2``, as the trace readers read ``prefix_hashes`` from a CSV cell; a list-of-integers column in
  Parquet; blank for none), each covering ``prefix_hash_tokens`` prompt tokens (one value on every row, blank
  or absent for Mooncake's 512), replayed as the request's ``prefix_hashes`` so that the simulated prefix cache
  hits what the measured one did); ``tpot_s`` is recomputed as ``(e2e - ttft) / (output - 1)``; times in
  seconds (arrivals that look like milliseconds are warned about, never converted: `SECONDS_ADVICE`); the trace
  readers' ``prefix_hashes`` is refused (it is ``hash_ids`` here) and a ``priority`` column warned of (`UNREAD`);
- vLLM's ``benchmark_serving.py --save-result`` JSON: per-request lists ``input_lens``, ``output_lens``,
  ``ttfts`` and ``itls`` in seconds (E2E = TTFT + the sum of the request's ITLs; lists in milliseconds are
  refused where the file's own ``duration``, ``mean_ttft_ms`` or ``mean_e2el_ms`` shows them to be, see
  `_in_seconds`, and cannot be told apart otherwise); its requests arrive at their ``start_times`` (when
  each was sent, after any ``--max-concurrency`` wait: vLLM 0.33's ``vllm bench serve`` writes them), or, in a
  file without them (older benchmark_serving.py), at ``request_rate`` (Poisson is not reproducible without its
  seed: evenly spaced; all at 0 when the rate is ``inf``); such a file from a run that held requests back
  (``max_concurrency``, a ``ramp_up_strategy``) is refused, see `_sent_times`. A request with an entry in ``errors``
  failed (vLLM records it with ``output_lens`` 0) and is left out. ``itls`` holds one gap per streamed chunk
  after the first, and a chunk may carry several tokens, so its length need not be ``output_lens - 1``;
- guidellm's results JSON (``benchmarks[].requests.successful[]``, each with ``prompt_tokens``,
  ``output_tokens``, ``first_token_time``/``start_time``/``end_time`` or ``time_to_first_token_ms``/
  ``request_latency``); each benchmark is a phase, arrivals are the requests' start times. Its ``errored``
  and ``incomplete`` requests (and any that ``request_totals`` counts but sampling left out of the file) are
  left out.

Every bad input is a one-line `TraceError` naming the file, row and field. Nothing is dropped silently: the
requests left out are counted in `MeasuredRun.skipped` and named in one `TraceWarning`.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from workloads.errors import TraceError, TraceWarning, show_value
from workloads.ragged import Ragged, from_lists, from_strings
from workloads.readers.containers import csv_frame
from workloads.readers.formats import FORMATS
from workloads.readers.seconds_check import times_doubt
from workloads.sessions import NONE, SESSION_RULES, session_reasons
from workloads.validation import BOTH_N_AND_BEAM, MAX_SAMPLES, cross_field_rules

REQUIRED = ("arrival_time_s", "prompt_tokens", "output_tokens", "ttft_s", "e2e_s")
TOKENS = ("prompt_tokens", "output_tokens")
MAX_TOKENS = 10**9
"""Token counts above this are certainly corrupt (as `workloads.readers.build` has it)."""
MAX_GROUP = 2**62
"""Largest ``prefix_group`` id: numbers travel through float64, names map below this (`group_ids`)."""
MIN_REQUESTS = 2
"""A fit needs requests on both sides of its split: one half to fit, the other to score."""
SAMPLED = "sampled out of the file (see request_totals)"
"""guidellm's ``--output-sampling`` keeps a sample of each benchmark's requests; the rest are counted under this."""
OPTIONAL_IDS = ("prefix_group", "prefix_len", "session_id", "turn")
"""Optional columns a measured table may carry into the replay: a shared system prompt, a multi-turn session."""
SAMPLING = ("n", "beam_width")
"""Optional columns of a request's parallel samples and beams (vLLM's names, blank for 1): replayed as one
sample, a request sampled ``n`` times would load the server with an ``n``-th of its sequences, and the fit
would pay for the rest with a larger per-sequence cost."""
REPLAYED = (*OPTIONAL_IDS, *SAMPLING)
"""Every optional column the replay carries into its workload (`sim.replay.workload_of`)."""
HASHES = "hash_ids"
"""Optional column of each request's block hashes, Mooncake's name for them (its traces' ``hash_ids``): a run
that replayed a Mooncake trace on a server with prefix caching hit whatever blocks earlier requests shared, and a
replay without them computed every prompt in full, so the fit paid for the hits with slower coefficients."""
HASH_TOKENS = "prefix_hash_tokens"
"""Optional column of the prompt tokens each hash covers, the trace readers' name (`workloads.readers.formats`):
one value on every row, as there."""
DEFAULT_HASH_TOKENS = FORMATS["mooncake"].hash_tokens
"""Mooncake's 512 tokens per hash, which its reader assumes too when the file gives no ``prefix_hash_tokens``."""
FLAGS = {"0": 0, "1": 1, "false": 0, "true": 1}
"""The values a ``warmup`` cell may hold (text compared in lower case)."""


@dataclass
class MeasuredRun:
    """Per-request measurements sorted by arrival, and the file they came from."""

    frame: pd.DataFrame
    path: str
    kind: str
    skipped: dict[str, int] = field(default_factory=dict)
    """Requests in the file but not in ``frame``, by reason (failed ones): counted, never dropped silently."""
    prefix_hash_tokens: int = DEFAULT_HASH_TOKENS
    """The prompt tokens each of a request's ``hash_ids`` covers (the replay's ``prefix_hash_tokens``)."""

    @property
    def scored(self) -> np.ndarray:
        """Rows that count in scores: not the warm-up request."""
        return ~self.frame["warmup"].to_numpy(bool)


def _bad(path: Path, where: str, name: str, value: object, problem: str) -> TraceError:
    """The one error of this module: ``FILE: WHERE: field 'F': bad value V (problem)``, which the CLI prints
    as its one ``Error:`` line."""
    if isinstance(value, np.ndarray):  # a Parquet list cell (``hash_ids``), shown as the list it is
        value = value.tolist()
    return TraceError(f"{path}: {where}: field '{name}': bad value {show_value(value)} ({problem})")


def _numbers(values: Sequence | pd.Series, text: bool) -> np.ndarray:
    """Each value as a float, NaN where it is not a number. A boolean never is one (JSON ``true`` is not a
    count of tokens, though Python would take it as 1); text is parsed only where the file is text (CSV)."""
    if isinstance(values, pd.Series) and values.dtype.kind in "iuf":  # nullable integers' NA (Parquet) as NaN
        return values.to_numpy(np.float64, na_value=np.nan)
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number, str)):
            continue
        if isinstance(v, str) and not text:
            continue
        try:
            out[i] = float(v)
        except OverflowError:  # an integer past float range, as JSON may write one
            out[i] = math.copysign(math.inf, int(v))
        except ValueError:
            pass
    return out


def _given(values: pd.Series) -> np.ndarray:
    """Cells that hold something (not blank): an optional column's blank means its default."""
    blank = values.isna().to_numpy(bool)
    return ~blank & ~np.array([isinstance(v, str) and not v.strip() for v in values], bool)


def _flags(values: pd.Series) -> np.ndarray:
    """``warmup`` as 0/1, NaN where the cell is not 0/1 or true/false (a blank, 7, 'yes'): a mistyped flag
    would silently move a request in or out of the scores."""
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        if isinstance(v, str):
            out[i] = FLAGS.get(v.strip().lower(), np.nan)
        elif isinstance(v, (bool, np.bool_, int, float, np.number)) and v in (0, 1):
            out[i] = float(v)
    return out


def _finish(frame: pd.DataFrame, path: Path, kind: str, where: Callable[[int], str], *, text: bool = False,
            names: dict[str, str] | None = None, skipped: dict[str, int] | None = None) -> MeasuredRun:
    """Check every row (the first bad one, in file order, is the error), then sort by arrival and rebase.
    ``where(i)``: how the file locates row ``i``; ``names``: the file's names of the canonical fields."""
    names = {col: col for col in frame.columns} | (names or {})
    skipped = {k: v for k, v in (skipped or {}).items() if v}
    if len(frame) == 0:
        left = f" ({_skipped_text(skipped)}, left out)" if skipped else ""
        raise TraceError(f"{path}: no requests to fit{left}")
    x = {col: _numbers(frame[col], text) for col in REQUIRED}
    unit = _hash_unit(frame, path, where, text)
    rules: list[tuple[str, str, np.ndarray]] = []
    with np.errstate(invalid="ignore"):  # NaN compares False: only its own rule catches it
        for col in REQUIRED:
            v = x[col]
            rules.append((col, "missing or not a number", np.isnan(v)))
            rules.append((col, "must be finite", np.isinf(v)))
            if col in TOKENS:
                rules.append((col, "must be a whole number", np.isfinite(v) & (v != np.floor(v))))
                rules.append((col, "must be >= 1", v < 1))
                rules.append((col, f"must be <= {MAX_TOKENS:g}", np.isfinite(v) & (v > MAX_TOKENS)))
            elif col == "arrival_time_s":
                rules.append((col, "must be >= 0", v < 0))
            else:  # a zero latency cannot have been measured, and the scores (relative errors) would skip it
                rules.append((col, "must be > 0", v <= 0))
        rules.append(("ttft_s", f"must be <= {names['e2e_s']}: the first token comes before the last",
                      x["ttft_s"] > x["e2e_s"]))
        if "warmup" in frame:
            warm = _flags(frame["warmup"])
            rules.append(("warmup", "must be 0/1 or true/false", np.isnan(warm)))
        if "prefix_group" in frame:
            group = _ids(frame["prefix_group"], text)
            rules.append(("prefix_group", "must be a whole number >= 0, a group name, or blank for none",
                          _bad_ids(group)))
        if HASHES in frame:
            hashes = _hash_lists(frame[HASHES], text)
            rules.append((HASHES, _HASH_CELL[text], hashes.bad))
            record = dict.fromkeys(("output_tokens", "max_tokens", "n", "beam_width", "prefix_len"), np.nan)
            record |= {"prompt_tokens": x["prompt_tokens"], "hash_counts": hashes.counts}
            _, problem, mask = next(r for r in cross_field_rules(record, unit) if r[0] == "prefix_hashes")
            rules.append((HASHES, problem, mask))
            if "prefix_group" in frame:
                rules.append((HASHES, "given with prefix_group: a request's shared prefix is its group's or its "
                              "hashes', not both", (hashes.counts > 0) & ~np.isnan(group)))
        if "prefix_len" in frame:
            plen = _numbers(frame["prefix_len"], text)
            rules.append(("prefix_len", "must be a whole number, or blank for none",
                          _given(frame["prefix_len"]) & ((plen != np.floor(plen)) | np.isnan(plen))))
            rules.append(("prefix_len", "must be >= 0", plen < 0))
            rules.append(("prefix_len", f"must be <= {names['prompt_tokens']}: the prefix is part of the prompt",
                          plen > x["prompt_tokens"]))
        samples = {col: _numbers(frame[col], text) for col in SAMPLING if col in frame}
        for col, v in samples.items():
            rules.append((col, f"must be a whole number from 1 to {MAX_SAMPLES:g}, or blank for 1",
                          _given(frame[col]) & ~((v == np.floor(v)) & (v >= 1) & (v <= MAX_SAMPLES))))
        if len(samples) == 2:
            rules.append(("beam_width", BOTH_N_AND_BEAM, (samples["n"] > 1) & (samples["beam_width"] > 1)))
        if "session_id" in frame:
            from workloads.readers.build import TURN_MISSING

            session, turn = _ids(frame["session_id"], text), _numbers(frame["turn"].to_numpy(object), text)
            rules.append(("session_id", "must be a whole number >= 0, a session name, or blank for none",
                          _bad_ids(session)))
            rules.append(("turn", f"must be a whole number from 0 to {MAX_TOKENS:g}, or blank for no session's turn",
                          _given(frame["turn"]) & ~((turn == np.floor(turn)) & (turn >= 0) & (turn <= MAX_TOKENS))))
            rules.append(("turn", TURN_MISSING, ~np.isnan(session) & ~_given(frame["turn"])))
    hits = np.array([mask for _, _, mask in rules], bool)
    if hits.any():
        i = int(np.argmax(hits.any(axis=0)))
        col, problem, _ = rules[int(np.argmax(hits[:, i]))]
        raise _bad(path, where(i), names[col], frame[col].iloc[i], problem)
    written, frame = frame, frame.copy()
    for col in REQUIRED:
        frame[col] = x[col]
    if "phase" not in frame:
        frame["phase"] = "all"
    frame["phase"] = frame["phase"].astype(str)
    frame["warmup"] = warm.astype(np.int64) if "warmup" in frame else 0
    if "prefix_group" in frame:
        frame["prefix_group"] = np.where(np.isnan(group), -1, group).astype(np.int64)
    if "prefix_len" in frame:
        frame["prefix_len"] = np.where(np.isnan(plen), 0, plen).astype(np.int64)
    if HASHES in frame:
        ends = hashes.offsets.tolist()
        frame[HASHES] = [tuple(hashes.values[a:b].tolist()) for a, b in zip(ends[:-1], ends[1:], strict=True)]
    for col, v in samples.items():
        frame[col] = np.where(np.isnan(v), 1, v).astype(np.int64)
    if "session_id" in frame:
        frame["session_id"] = np.where(np.isnan(session), NONE, session).astype(np.int64)
        frame["turn"] = np.where(np.isnan(turn), 0, turn).astype(np.int64)
    scored = int((frame["warmup"] == 0).sum())
    if scored < MIN_REQUESTS:
        raise TraceError(f"{path}: {scored} request(s) besides warm-up; a fit needs at least {MIN_REQUESTS} "
                         "(one half to fit, the other to score)")
    frame["prompt_tokens"] = frame["prompt_tokens"].astype(np.int64)
    frame["output_tokens"] = frame["output_tokens"].astype(np.int64)
    if "session_id" in frame:
        _check_sessions(frame, written, path, where, names)
    frame["tpot_s"] = tpot(frame)
    frame = frame.sort_values("arrival_time_s", kind="stable").reset_index(drop=True)
    frame["arrival_time_s"] -= frame["arrival_time_s"].iloc[0]
    keep = [*REQUIRED, "tpot_s", "phase", "warmup"] + [c for c in (*REPLAYED, HASHES) if c in frame]
    if skipped:
        warnings.warn(f"{path}: {sum(skipped.values())} request(s) left out of the fit and its scores "
                      f"({_skipped_text(skipped)}); {len(frame)} used", TraceWarning, stacklevel=3)
    return MeasuredRun(frame[keep], str(path), kind, skipped, prefix_hash_tokens=unit)


def tpot(frame: pd.DataFrame) -> np.ndarray:
    """Time per output token, ``(e2e_s - ttft_s) / (output_tokens - 1)`` (NaN for one-token outputs): all a
    measured run's one TTFT and E2E per request give, so the replay's is computed the same way
    (`sim.replay.latencies`). A request sampled ``n`` times spans its samples, first token to last finish."""
    out = frame["output_tokens"].to_numpy()
    decode = (frame["e2e_s"] - frame["ttft_s"]).to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(out > 1, decode / np.maximum(out - 1, 1), np.nan)


def _ids(values: pd.Series, text: bool) -> np.ndarray:
    """A ``prefix_group`` or ``session_id`` column as ids (`workloads.readers.build.group_ids`: numbers as they
    are, a name as a stable id of its own), NaN where blank."""
    from workloads.readers.build import group_ids

    raw = values.to_numpy(object)
    return np.where(_given(values), group_ids(raw, _numbers(raw, text)), np.nan)


_HASH_CELL = {True: "must be whole numbers >= 0 separated by spaces (0 1 2), as the trace readers read "
                    "prefix_hashes from a CSV cell, or blank for none",
              False: "must be a list of whole numbers >= 0, or null for none"}
"""The problem of a ``hash_ids`` cell that is no list of hashes, in a text file (CSV) and in Parquet."""


def _hash_lists(values: pd.Series, text: bool) -> Ragged:
    """A ``hash_ids`` column as ragged lists (`workloads.ragged`), ``bad`` where a cell holds no list of hashes.
    CSV cells as the readers take ``prefix_hashes`` from a CSV (`from_strings`: ``0 1 2``; a JSON list
    ``[0, 1, 2]`` is refused, not guessed at); Parquet's as lists of integers, or text spelled as in CSV."""
    cells = values.to_numpy(object)
    if text or not any(_listlike(c) for c in cells):  # (Parquet: a column of text, or of nothing)
        return from_strings(cells)
    return from_lists([_as_list(c) for c in cells])


def _listlike(cell: object) -> bool:
    return isinstance(cell, (list, tuple, np.ndarray))


def _as_list(cell: object) -> object:
    """A Parquet cell as `from_lists` takes it: a list (of Python ints where the cell's are integers; floats and
    nulls inside stay what they are, which `from_lists` marks bad), None for a null, anything else as it is."""
    if _listlike(cell):
        return list(cell.tolist() if isinstance(cell, np.ndarray) else cell)
    return None if pd.isna(cell) else cell


def _hash_unit(frame: pd.DataFrame, path: Path, where: Callable[[int], str], text: bool) -> int:
    """``prefix_hash_tokens``: one whole number >= 1 on every row that is not blank, as the trace readers take it
    (`workloads.readers.build.workload_constants`), or Mooncake's 512 where the file gives none. Checked before
    the rows: every row's ``hash_ids`` count is checked against it."""
    if HASH_TOKENS not in frame:
        return DEFAULT_HASH_TOKENS
    raw = frame[HASH_TOKENS]
    v, given = _numbers(raw, text), _given(raw)
    with np.errstate(invalid="ignore"):
        wrong = given & ~((v == np.floor(v)) & (v >= 1) & (v <= MAX_TOKENS))
    first = v[given & ~wrong][0] if (given & ~wrong).any() else None
    differs = given & ~wrong & (v != first)
    if (wrong | differs).any():
        i = int(np.argmax(wrong | differs))
        problem = (f"must be a whole number from 1 to {MAX_TOKENS:g} (the prompt tokens each hash covers), or blank"
                   if wrong[i] else f"must be the same on every row (the first value is {first:g})")
        raise _bad(path, where(i), HASH_TOKENS, raw.iloc[i], problem)
    return DEFAULT_HASH_TOKENS if first is None else int(first)


def _bad_ids(ids: np.ndarray) -> np.ndarray:
    """Ids (`_ids`) no group or session can have: a fraction, a negative number, one past `MAX_GROUP`."""
    with np.errstate(invalid="ignore"):
        return ~np.isnan(ids) & ((ids != np.floor(ids)) | (ids < 0) | (ids > MAX_GROUP))


def _check_sessions(frame: pd.DataFrame, written: pd.DataFrame, path: Path, where: Callable[[int], str],
                    names: dict[str, str]) -> None:
    """The trace readers' session rules (`workloads.sessions.SESSION_RULES`) over ``frame``'s parsed rows in
    arrival order, as the replay sends them: each turn after its session's previous turn, its prompt at least
    that turn's prompt + output (it repeats them), the same system prompt. The first bad row in file order is the
    error, its cell shown as the file wrote it (``written``)."""
    order = np.argsort(frame["arrival_time_s"].to_numpy(), kind="stable")
    col = {c: frame[c].to_numpy(np.int64)[order] if c in frame else np.full(len(order), default, np.int64)
           for c, default in (("session_id", NONE), ("turn", 0), ("prompt_tokens", 1), ("output_tokens", 1),
                              ("prefix_group", NONE), ("prefix_len", 0))}
    hash_counts = frame[HASHES].map(len).to_numpy(np.int64)[order] if HASHES in frame else 0
    found, _ = session_reasons(col["session_id"], col["turn"], np.full(len(order), np.nan), col["prompt_tokens"],
                               col["output_tokens"], hash_counts, prefix=(col["prefix_group"], col["prefix_len"]))
    if (found >= 0).any():
        first = int(np.argmin(np.where(found >= 0, order, len(order))))  # the bad row earliest in the file
        i = int(order[first])
        field, problem = SESSION_RULES[found[first]]
        column = HASHES if field == "prefix_hashes" else field  # (the readers' name of the file's hash_ids)
        value = written[column].iloc[i] if column in written else None
        raise _bad(path, where(i), names.get(column, column), value, problem)


def _skipped_text(skipped: dict[str, int]) -> str:
    return ", ".join(f"{count} {reason}" for reason, count in skipped.items())


def _read_table(path: Path) -> MeasuredRun:
    """A per-request table: CSV, or Parquet by its suffix. kvsim's own requests table (``kvsim run --out``) reads
    as one, its ``arrival_s`` taken for ``arrival_time_s`` and its rejected requests (no latency) left out and
    counted: a run simulated with known coefficients fits back without editing the file."""
    if path.suffix.lower() == ".parquet":
        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # pyarrow's errors have no common base class
            raise TraceError(f"{path}: cannot read as Parquet: {str(exc).splitlines()[0]}") from None
        return _finish_table(frame, path, text=False)
    try:
        frame, _ = csv_frame(path, encoding="utf-8-sig", dtype={HASHES: str})  # "5" stays text, not 5.0
    except pd.errors.EmptyDataError:
        raise TraceError(f"{path}: empty file (a measured run needs the header "
                         f"{','.join(REQUIRED)})") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        found = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(exc))
        if found:
            header, line, saw = found.groups()
            raise TraceError(f"{path}: line {line}: {saw} fields, the header names {header}") from None
        raise TraceError(f"{path}: cannot read as CSV: {str(exc).splitlines()[-1].strip()}") from None
    return _finish_table(frame, path, text=True)


def consecutive_turns(session: pd.Series, turn: pd.Series) -> pd.Series:
    """Each session's turns numbered 0, 1, 2, ... again, in the order of their own numbers, after some were left
    out (a turn the simulation rejected, a selection of rows). A later turn's prompt still begins with every
    earlier turn's tokens, so it follows the last turn kept and hits what that one computed. Rows of no session
    (NA or `NONE`) keep their values."""
    in_session = session.notna() & (session != NONE)
    rank = turn[in_session].groupby(session[in_session]).rank(method="first") - 1
    return turn.mask(in_session, rank)


UNREAD = {"priority": "the replay schedules first come, first served (calibrate has no --scheduling-policy), so a "
                       "run under vLLM's priority policy replays in another order"}
"""Trace-format columns (`workloads.readers.formats.CANONICAL_FIELDS`) a measured table may carry that the replay
does not read, each with what that changes: said in one `TraceWarning`, not dropped in silence."""


def _unread_columns(frame: pd.DataFrame, path: Path) -> None:
    """Refuse ``prefix_hashes``, the trace readers' name of what a measured table calls ``hash_ids`` (a file
    converted from a kvsim trace keeps it): read as an unknown column, the replay computed every shared prompt in
    full and the fit paid for the measured run's cache hits with slower coefficients. Warn of an `UNREAD` column
    that holds anything but 0 (vLLM's default priority, which orders nothing)."""
    if "prefix_hashes" in frame.columns:
        raise TraceError(f"{path}: column prefix_hashes: a measured run's block hashes are its {HASHES} column "
                         f"(Mooncake's name; prefix_hashes is the trace readers'): rename it {HASHES}, or drop it "
                         f"where {HASHES} holds the same")
    for column, why in UNREAD.items():
        if column in frame.columns and (_given(frame[column]) & (_numbers(frame[column], True) != 0)).any():
            warnings.warn(f"{path}: column {column} is not read: {why}", TraceWarning, stacklevel=4)


def _finish_table(frame: pd.DataFrame, path: Path, *, text: bool) -> MeasuredRun:
    """A per-request table's columns checked, kvsim's own requests table recognised (`_read_table`), then
    `_finish`."""
    skipped: dict[str, int] = {}
    _unread_columns(frame, path)
    if len(given := [c for c in ("session_id", "turn") if c in frame.columns]) == 1:
        raise TraceError(f"{path}: column {given[0]} without {({'session_id', 'turn'} - set(given)).pop()}: a "
                         "multi-turn session needs both (session_id: its conversation; turn: 0, 1, 2, ...)")
    if "arrival_time_s" not in frame.columns and "arrival_s" in frame.columns and "rejected" in frame.columns:
        rejected = frame["rejected"].astype(str).str.lower().isin(("true", "1"))
        skipped["rejected by the simulation"] = int(rejected.sum())
        frame = frame[~rejected].rename(columns={"arrival_s": "arrival_time_s"}).reset_index(drop=True)
        if given and rejected.any() and pd.api.types.is_numeric_dtype(frame["turn"]):
            frame["turn"] = consecutive_turns(frame["session_id"], frame["turn"])
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise TraceError(f"{path}: missing column(s) {', '.join(missing)} (a measured run needs "
                         f"{','.join(REQUIRED)})")
    kind = "measured Parquet" if path.suffix.lower() == ".parquet" else "measured CSV"
    run = _finish(frame, path, kind, lambda i: f"row {i + 1}", text=text, skipped=skipped)
    if (why := times_doubt(run.frame["arrival_time_s"].to_numpy(), SECONDS_ADVICE)) is not None:
        warnings.warn(f"{path}: arrival_time_s: {why}", TraceWarning, stacklevel=3)
    return run


SECONDS_ADVICE = " (and ttft_s and e2e_s, if they are milliseconds too)"
"""The trace readers' milliseconds warning (`workloads.readers.seconds_check`), for a per-request table only:
its ``arrival_time_s`` is the file's own, in seconds by its name, and a table written in milliseconds replays a
thousand times slower than its run, with no queueing for the fit to meet (its latencies' unit is the fit's
warnings' to catch, `sim.commands.calibrate`). benchmark_serving's arrivals are ``perf_counter`` readings or
``request_rate``'s schedule, and guidellm's epoch times, so neither is checked."""


def _request_rate(data: dict, path: Path) -> float:
    """``request_rate`` in requests per second: ``inf`` (or absent) means all at once; anything else must be a
    finite number > 0 (a zero or negative rate has no arrival times)."""
    rate = data.get("request_rate", "inf")
    if rate is None or rate == "inf" or (isinstance(rate, float) and rate == math.inf):
        return math.inf
    number = _positive(rate)
    if number is None:
        raise _bad(path, "top level", "request_rate", rate, "must be a finite number of requests/s > 0, or 'inf'")
    return number


def _benchmark_serving(data: dict, path: Path) -> MeasuredRun:
    lists = {key: data.get(key) for key in ("input_lens", "output_lens", "ttfts", "itls")}
    for key, value in lists.items():
        if not isinstance(value, list) or len(value) != len(lists["input_lens"] or []):
            raise TraceError(f"{path}: field {key!r} must be a list with one entry per request")
    errors = data.get("errors")
    if errors is not None and (not isinstance(errors, list) or len(errors) != len(lists["input_lens"])):
        raise TraceError(f"{path}: field 'errors' must be a list with one entry per request")
    ok = [i for i in range(len(lists["input_lens"])) if not (errors and errors[i])]
    n = len(lists["input_lens"])
    arrivals, arrival_field = _sent_times(data, path, n)
    ttfts = _numbers(lists["ttfts"], text=False)
    e2e = []
    for i in ok:
        itl = lists["itls"][i]
        if not isinstance(itl, list):
            raise _bad(path, f"request {i + 1}", "itls", itl, "must be a list of seconds")
        gaps = _numbers(itl, text=False)
        with np.errstate(invalid="ignore"):
            wrong = ~(np.isfinite(gaps) & (gaps >= 0))
        if wrong.any():
            j = int(np.argmax(wrong))
            raise _bad(path, f"request {i + 1}", f"itls[{j}]", itl[j], "must be a finite number of seconds >= 0")
        e2e.append(ttfts[i] + float(gaps.sum()))
    _in_seconds(data, path, ttfts[ok], np.asarray(e2e) - ttfts[ok])
    raw = {col: pd.Series([lists[key][i] for i in ok], dtype=object)  # as written: true stays a boolean
           for col, key in (("prompt_tokens", "input_lens"), ("output_tokens", "output_lens"), ("ttft_s", "ttfts"))}
    frame = pd.DataFrame({"arrival_time_s": [arrivals[i] for i in ok], **raw, "e2e_s": e2e})
    names = {"prompt_tokens": "input_lens", "output_tokens": "output_lens", "ttft_s": "ttfts", "e2e_s": "itls",
             "arrival_time_s": arrival_field}
    return _finish(frame, path, "vLLM benchmark_serving result", lambda i: f"request {ok[i] + 1}", names=names,
                   skipped={"failed (an entry in 'errors')": n - len(ok)})


HELD_BACK = ("max_concurrency", "ramp_up_strategy")
"""benchmark_serving settings under which its requests were not sent at ``request_rate``: at most
``max_concurrency`` in flight (each later one waits for a slot), or a rate ramped from ``ramp_up_start_rps`` to
``ramp_up_end_rps`` (vllm/benchmarks/serve.py, 0.33: ``limited_request_func``'s semaphore, ``get_request``)."""


def _sent_times(data: dict, path: Path, n: int) -> tuple[list, str]:
    """Each request's arrival and the field it comes from. ``start_times``, where the file has them: the
    ``time.perf_counter()`` at which the benchmark sent each request, after its wait for a ``--max-concurrency``
    slot (vllm/benchmarks/serve.py and lib/endpoint_request_func.py, 0.33; `_finish` checks each and rebases
    them to the first). A file without them is replayed at ``request_rate``, which is the run's schedule only
    if nothing held requests back (`HELD_BACK`): a run at ``--max-concurrency 16`` and rate ``inf`` sent 16 at
    once and each next one as a slot freed, where a replay would send all of them at 0 and queue them in the
    server, and the fit would take that queueing for slow steps. That file is refused, naming the field (not
    for a ``max_concurrency`` of 0 or of at least the file's requests, which never made one wait)."""
    starts = data.get("start_times")
    if starts is not None:
        if not isinstance(starts, list) or len(starts) != n:
            raise TraceError(f"{path}: field 'start_times' must be a list with one entry per request")
        return starts, "start_times"
    limit = data.get("max_concurrency")
    no_wait = isinstance(limit, (int, float)) and not isinstance(limit, bool) and (limit >= n or limit == 0)
    for key in HELD_BACK:  # (vLLM takes a max_concurrency of 0 for none: ``if max_concurrency``)
        if data.get(key) is not None and not (key == "max_concurrency" and no_wait):
            raise TraceError(f"{path}: top level: field {key!r} is {show_value(data[key])}: its requests were not "
                             "sent at request_rate, and the file has no 'start_times' to say when they were (vLLM "
                             "0.33's vllm bench serve --save-result --save-detailed writes them); give a per-request "
                             "CSV with each request's arrival_time_s instead")
    rate = _request_rate(data, path)
    return (np.zeros(n) if math.isinf(rate) else np.arange(n) / rate).tolist(), "request_rate"


def _in_seconds(data: dict, path: Path, ttfts: np.ndarray, decode_s: np.ndarray) -> None:
    """Refuse ``ttfts`` or ``itls`` in milliseconds (benchmark_serving writes seconds; a converted or
    hand-made file may not), which would otherwise be fitted as a thousand times slower. Two tests only where
    the file says so itself, never a guess from the values: a TTFT longer than the whole run's ``duration``
    (seconds), and a mean that equals the file's own ``mean_ttft_ms`` or ``mean_e2el_ms`` instead of a
    thousandth of it (the E2E mean, TTFT plus the ITLs' sum, tests the ``itls``)."""
    ttfts, decode_s = ttfts[np.isfinite(ttfts)], decode_s[np.isfinite(decode_s)]  # others: `_finish` says why
    if not len(ttfts):
        return
    duration = _positive(data.get("duration"))
    if duration and ttfts.max() > duration:
        raise TraceError(f"{path}: field 'ttfts' holds {ttfts.max():g}, longer than the run's 'duration' "
                         f"{duration:g} s: are they milliseconds? benchmark_serving writes seconds")
    for key, mean_key, mean in (("ttfts", "mean_ttft_ms", ttfts.mean()),
                                ("itls", "mean_e2el_ms", ttfts.mean() + decode_s.mean())):
        mean_ms = _positive(data.get(mean_key))
        if mean_ms and 0.5 < mean / mean_ms < 2:  # seconds would give 1/1000
            raise TraceError(f"{path}: field {key!r} is in milliseconds: its mean {mean:g} matches "
                             f"'{mean_key}' {mean_ms:g}; benchmark_serving writes seconds")


def _positive(value: object) -> float | None:
    """A field of the file as a finite number > 0, else None (absent, null, text, a boolean): the caller says
    whether that is an error (``request_rate``) or only leaves a check out (``duration``, ``mean_ttft_ms``)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf
    return float(value) if ok else None


def _guidellm_request(req: object, where: str) -> dict:
    if not isinstance(req, dict):
        raise TraceError(f"{where}: must be an object (one request), got {show_value(req)}")

    def num(*keys: str) -> float | None:
        for key in keys:
            value = req.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        return None

    start = num("start_time", "request_start_time")
    end = num("end_time", "request_end_time")
    first = num("first_token_time")
    ttft = (first - start) if first is not None and start is not None else num("time_to_first_token_ms")
    if ttft is not None and first is None:
        ttft /= 1000.0
    e2e = (end - start) if end is not None and start is not None else num("request_latency")
    prompt, output = num("prompt_tokens"), num("output_tokens")
    for name, value in (("start_time", start), ("time to first token", ttft), ("latency", e2e),
                        ("prompt_tokens", prompt), ("output_tokens", output)):
        if value is None:
            raise TraceError(f"{where}: field {name!r} is missing or not a number")
    return {"arrival_time_s": start, "prompt_tokens": prompt, "output_tokens": output, "ttft_s": ttft,
            "e2e_s": e2e}


def _guidellm(data: dict, path: Path) -> MeasuredRun:
    benchmarks = data.get("benchmarks")
    if not isinstance(benchmarks, list):
        raise _bad(path, "top level", "benchmarks", benchmarks, "must be a list of benchmarks")
    rows, locations = [], []
    skipped = {"errored": 0, "incomplete": 0, SAMPLED: 0}
    for b, bench in enumerate(benchmarks):
        if not isinstance(bench, dict):
            raise TraceError(f"{path}: benchmarks[{b}]: must be an object (one benchmark), got {show_value(bench)}")
        requests = bench.get("requests", {})
        successful = requests.get("successful") if isinstance(requests, dict) else None
        if not isinstance(successful, list):
            raise TraceError(f"{path}: benchmarks[{b}]: field 'requests.successful' must be a list")
        listed = {"successful": len(successful)}
        for status in ("errored", "incomplete"):
            others = requests.get(status) or []
            if not isinstance(others, list):
                raise TraceError(f"{path}: benchmarks[{b}]: field 'requests.{status}' must be a list")
            listed[status] = len(others)
            skipped[status] += len(others)
        totals = bench.get("request_totals")
        if isinstance(totals, dict):  # guidellm's --output-sampling keeps a sample of each status's requests
            for status, count in listed.items():
                total = totals.get(status)
                if total is None:
                    continue
                if isinstance(total, bool) or not isinstance(total, (int, float)) or not 0 <= total < float("inf"):
                    raise _bad(path, f"benchmarks[{b}]", f"request_totals.{status}", total,
                               "must be a count of requests")
                skipped[SAMPLED] += max(0, int(total) - count)
        args = bench.get("args", {}) if isinstance(bench.get("args"), dict) else {}
        strategy = args.get("strategy", {}) if isinstance(args.get("strategy"), dict) else {}
        phase = str(strategy.get("type_", strategy.get("type", f"benchmark-{b}")))
        rate = strategy.get("rate")
        if rate is not None:
            if isinstance(rate, bool) or not isinstance(rate, (int, float)):
                raise _bad(path, f"benchmarks[{b}]", "args.strategy.rate", rate, "must be a number of requests/s")
            phase += f"@{rate:.3g}"
        for r, req in enumerate(successful):
            locations.append(f"benchmarks[{b}].requests.successful[{r}]")
            rows.append(_guidellm_request(req, f"{path}: {locations[-1]}") | {"phase": phase})
    columns = [*REQUIRED, "phase"]
    names = {"arrival_time_s": "start_time", "ttft_s": "time to first token", "e2e_s": "latency"}
    return _finish(pd.DataFrame(rows, columns=columns), path, "guidellm results", locations.__getitem__,
                   names=names, skipped=skipped)


def read_measured(path: str | Path) -> MeasuredRun:
    """Read a measured run from any of the three formats (JSON by its keys; a per-request table, Parquet by its
    suffix, anything else as CSV)."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    if path.suffix.lower() != ".json":
        return _read_table(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(f"{path}: cannot read JSON: {exc}") from None
    if isinstance(data, dict) and "input_lens" in data:
        return _benchmark_serving(data, path)
    if isinstance(data, dict) and "benchmarks" in data:
        return _guidellm(data, path)
    raise TraceError(f"{path}: neither a vLLM benchmark_serving result (input_lens, ttfts, itls) nor guidellm "
                     "results (benchmarks)")
