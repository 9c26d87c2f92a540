"""`Workload`: an ordered, re-iterable sequence of `Request`s, stored as columns.

A million requests as a million frozen dataclasses cost about a gigabyte and seconds to build; as numpy columns
they cost tens of megabytes and nothing to slice. Requests are made lazily when iterated or indexed. The ragged
``prefix_hashes`` live as one flat value array plus offsets (Arrow's list layout), so request ``i`` holds
``hash_values[hash_offsets[i]:hash_offsets[i + 1]]``.

Missing values are sentinels inside the columns (``max_tokens`` and ``prefix_group`` are -1 for none) and
``None`` in `Request` and in `workloads.frames.workload_to_frame` (pandas nullable integers). Requests are sorted by arrival; every
column is validated once, vectorised, on construction, so iteration never raises.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import overload

import numpy as np

from workloads.errors import is_whole_number, show_value, whole_number
from workloads.ragged import take_ragged
from workloads.request import Request, prefix_units
from workloads.sessions import SESSION_RULES, session_reasons
from workloads.validation import MAX_ARRIVAL_S, MAX_TOKENS, PAST_CLOCK, PAST_SPAN, first_problem

INT_COLUMNS = ("prompt_tokens", "output_tokens", "max_tokens", "n", "beam_width", "prefix_group", "prefix_len",
               "priority", "session_id", "turn")
NONE = -1
"""Sentinel for 'no value' in the ``max_tokens`` and ``prefix_group`` columns."""


@dataclass(frozen=True)
class ClosedLoop:
    """Marker for a closed-loop workload: ``users`` concurrent users, each sending its next request
    ``think_time_s`` after its previous one finishes. Arrival times are then only an order (all 0.0); the
    simulator must honour the marker (a simulator that ignores it sees every request arrive at t=0)."""

    users: int
    think_time_s: float = 0.0

    def __post_init__(self) -> None:
        """The bounds a trace's ``closed_loop_users`` and ``think_time_s`` columns get: a think time of 1e30 s
        put the clock past where it resolves a step (`MAX_ARRIVAL_S`), and an infinite one released no user
        again (the run's clock ended at infinity)."""
        whole_number("closed loop", "users", self.users, 1, MAX_TOKENS)
        if not 0 <= self.think_time_s < np.inf:
            raise ValueError(f"closed loop: needs a finite think_time_s >= 0 (got {show_value(self.think_time_s)})")
        if self.think_time_s > MAX_ARRIVAL_S:
            raise ValueError(f"closed loop: think_time_s {PAST_CLOCK} (got {show_value(self.think_time_s)})")


@dataclass(eq=False)
class Workload:
    """Columns of equal length, one row per request, sorted by ``arrival_time_s``."""

    arrival_time_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    max_tokens: np.ndarray | None = None
    n: np.ndarray | None = None
    beam_width: np.ndarray | None = None
    prefix_group: np.ndarray | None = None
    prefix_len: np.ndarray | None = None
    priority: np.ndarray | None = None
    """Scheduling priority under ``--scheduling-policy priority`` (vLLM's: lower value first; default 0)."""
    session_id: np.ndarray | None = None
    """Multi-turn sessions (`workloads.sessions`): the conversation of each row (-1: none), its turn, and the
    think time before the turn (NaN: it arrives at ``arrival_time_s``)."""
    turn: np.ndarray | None = None
    think_time_s: np.ndarray | None = None
    hash_offsets: np.ndarray | None = None
    hash_values: np.ndarray | None = None
    prefix_hash_tokens: int = 512
    ids: np.ndarray | None = None
    name: str = "workload"
    source: str = ""
    skipped_rows: int = 0
    skipped_reasons: dict[str, int] = field(default_factory=dict)
    closed_loop: ClosedLoop | None = None
    fan_parent: np.ndarray | None = None
    """Set by the simulator on a workload whose requests sampled ``n > 1`` times were fanned out into ``n``
    requests each (`sim.kernel.parallel_sampling`): the row each row came from."""
    length_capped: np.ndarray | None = None
    """Set by the simulator on a workload whose outputs it cut at ``max_model_len`` as vLLM stops them
    (`sim.kernel.over_length`): the output tokens each row lost (0: none)."""
    trace_row: np.ndarray | None = None
    """Set by the readers: where in its file each row was read, as their errors name it (a CSV or JSON Lines
    file's line, a Parquet file's or a DataFrame's 1-based row), so that results join back to the file when
    ``skip_bad_rows`` left rows out (``ids`` are the file's ``id`` column, or count the rows kept); None for
    requests read from no file."""

    def __post_init__(self) -> None:
        size = len(self.arrival_time_s)
        self.arrival_time_s = np.ascontiguousarray(self.arrival_time_s, dtype=np.float64)
        defaults = {"max_tokens": NONE, "n": 1, "beam_width": 1, "prefix_group": NONE, "prefix_len": 0,
                    "priority": 0, "session_id": NONE, "turn": 0}
        for col in INT_COLUMNS:
            value = getattr(self, col)
            value = np.full(size, defaults[col], np.int64) if value is None else self._whole_numbers(col, value)
            setattr(self, col, np.ascontiguousarray(value))
        think = np.full(size, np.nan) if self.think_time_s is None else self.think_time_s
        self.think_time_s = np.ascontiguousarray(think, dtype=np.float64)
        self.ids = np.arange(size, dtype=np.int64) if self.ids is None else self._whole_numbers("ids", self.ids)
        if self.trace_row is not None:
            self.trace_row = self._whole_numbers("trace_row", self.trace_row)
        if self.hash_offsets is None:
            self.hash_offsets = np.zeros(size + 1, np.int64)
        self.hash_offsets = np.asarray(self.hash_offsets, np.int64)
        self.hash_values = np.asarray([] if self.hash_values is None else self.hash_values, np.int64)
        self._validate(size)

    def _whole_numbers(self, col: str, value: object) -> np.ndarray:
        """``value`` as int64, refusing what the cast would silently change: a fraction (100.9 truncated to
        100), NaN (cast to -2**63, then reported as below the field's bound), a bool or a string."""
        values = np.asarray(value)
        if values.dtype.kind == "i":
            return values.astype(np.int64, copy=False)
        flat = values.ravel()
        whole = np.zeros(flat.shape, bool)
        if values.dtype.kind == "u":
            whole[:] = True
        elif values.dtype.kind == "f":
            whole = np.isfinite(flat) & (flat == np.floor(flat))
        elif values.dtype.kind == "O":
            whole = np.array([is_whole_number(v) for v in flat], bool)
        if not whole.all():
            i = np.flatnonzero(~whole)[0]
            raise ValueError(f"workload {self.name!r}: request {i}: {col}: must be a whole number "
                             f"(got {show_value(flat[i])})")
        if values.dtype.kind == "u":  # past 2**63 - 1 the cast wraps to a negative count
            too_big = np.flatnonzero(flat > np.iinfo(np.int64).max)
        elif values.dtype.kind == "f":
            too_big = np.flatnonzero(np.abs(flat) >= 2.0 ** 63)
        else:
            too_big = [i for i, v in enumerate(flat) if not -2 ** 63 <= v < 2 ** 63]
        if len(too_big):
            i = too_big[0]
            raise ValueError(f"workload {self.name!r}: request {i}: {col}: must be below 2**63 "
                             f"(got {show_value(flat[i])})")
        return values.astype(np.int64)

    def _validate(self, size: int) -> None:
        """The request rules (`workloads.validation`) over the columns, so that iterating never raises."""
        for col in (*INT_COLUMNS, "ids", "think_time_s", "trace_row"):
            if getattr(self, col) is not None and len(getattr(self, col)) != size:
                raise ValueError(f"column {col} has {len(getattr(self, col))} rows, expected {size}")
        offsets, t = self.hash_offsets, self.arrival_time_s
        counts = np.diff(offsets) if len(offsets) == size + 1 else None
        if counts is None or offsets[0] != 0 or offsets[-1] != len(self.hash_values) or (counts < 0).any():
            raise ValueError(f"workload {self.name!r}: hash_offsets must be non-decreasing, from 0 to "
                             "len(hash_values)")
        if not np.isfinite(t).all() or (np.diff(t) < 0).any():
            raise ValueError(f"workload {self.name!r}: arrival_time_s must be finite and sorted")
        if size and t[-1] - t[0] > MAX_ARRIVAL_S:
            i = int(np.argmax(t - t[0] > MAX_ARRIVAL_S))
            raise ValueError(f"workload {self.name!r}: request {i}: arrival_time_s: {PAST_SPAN} "
                             f"(got {show_value(t[i])})")
        columns = {col: getattr(self, col) for col in INT_COLUMNS}
        columns["hash_counts"] = counts if len(self.hash_values) else 0
        for col in ("max_tokens", "prefix_group"):  # the sentinel is a missing value: NaN to the rules
            missing = columns[col] == NONE
            if missing.all():  # (a scalar when the column is unused, which saves a float copy of it)
                columns[col] = np.nan
            elif missing.any():
                columns[col] = np.where(missing, np.nan, columns[col])
        if (problem := first_problem(columns, self.prefix_hash_tokens)) is not None:
            raise ValueError(f"workload {self.name!r}: {problem}")
        if self.has_sessions or (self.turn != 0).any() or not np.isnan(self.think_time_s).all():
            self._validate_sessions()

    def _validate_sessions(self) -> None:
        if self.closed_loop is not None:
            raise ValueError(f"workload {self.name!r}: sessions and a closed loop of users cannot be combined")
        reason, _ = session_reasons(self.session_id, self.turn, self.think_time_s, self.prompt_tokens,
                                    self.output_tokens, np.diff(self.hash_offsets),
                                    prefix=(self.prefix_group, self.prefix_len))
        if (reason >= 0).any():
            i = int(np.argmax(reason >= 0))
            field, problem = SESSION_RULES[reason[i]]
            raise ValueError(f"workload {self.name!r}: request {i}: {field}: {problem}")

    def __len__(self) -> int:
        return len(self.arrival_time_s)

    @overload
    def __getitem__(self, index: int) -> Request: ...

    @overload
    def __getitem__(self, index: slice) -> Workload: ...

    def __getitem__(self, index: int | slice) -> Request | Workload:
        """Request ``index``, or a slice of the workload as a `Workload` (``w[10:20]``), in arrival order."""
        size = len(self)
        if isinstance(index, slice):
            if index.step is not None:  # a reversed slice would not be in arrival order
                whole_number("Workload slice", "step", index.step, 1)
            return self.select(np.arange(size)[index])
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, numbers.Integral):
            raise TypeError(f"workload indices must be integers or slices, not {type(index).__name__}")
        if not -size <= index < size:
            raise IndexError(f"request index {index} out of range for {size} requests")
        return self._request(int(index) % size if index < 0 else int(index))

    def __iter__(self) -> Iterator[Request]:
        return (self._request(i) for i in range(len(self)))

    def _request(self, i: int) -> Request:
        mx, group = int(self.max_tokens[i]), int(self.prefix_group[i])
        lo, hi = self.hash_offsets[i], self.hash_offsets[i + 1]
        return Request.checked(
            int(self.ids[i]), float(self.arrival_time_s[i]), int(self.prompt_tokens[i]), int(self.output_tokens[i]),
            None if mx == NONE else mx, int(self.n[i]), int(self.beam_width[i]),
            tuple(self.hash_values[lo:hi].tolist()), self.prefix_hash_tokens, None if group == NONE else group,
            int(self.prefix_len[i]), None if (session := int(self.session_id[i])) == NONE else session,
            int(self.turn[i]), None if (think := float(self.think_time_s[i])) != think else think,
        )

    @property
    def has_prefix_hashes(self) -> bool:
        return len(self.hash_values) > 0

    @property
    def has_sessions(self) -> bool:
        return bool((self.session_id != NONE).any())

    def prefix_hashes(self, i: int) -> np.ndarray:
        """Request ``i``'s prefix hashes as an array view (no tuple built)."""
        return self.hash_values[self.hash_offsets[i] : self.hash_offsets[i + 1]]

    def prefix_units(self, i: int) -> np.ndarray:
        """Request ``i``'s dense unit ids for `Request.block_hashes` (``units``), a view of
        `workloads.request.prefix_units` over every request, computed at the first call: one numbering for
        the whole workload, so its requests' block ids agree with each other (and only with each other)."""
        return self._prefix_units[self.hash_offsets[i] : self.hash_offsets[i + 1]]

    @cached_property
    def _prefix_units(self) -> np.ndarray:
        return prefix_units(self.hash_offsets, self.hash_values)

    def with_arrivals(self, arrival_time_s: np.ndarray, **attrs) -> Workload:
        """The same requests at new (sorted) arrival times, e.g. re-timed to another rate."""
        return self.select(np.arange(len(self)), arrival_time_s=arrival_time_s, **attrs)

    def select(self, index: np.ndarray, **overrides) -> Workload:
        """The requests at ``index`` (in that order), with any column or attribute replaced."""
        index = np.asarray(index, np.int64)
        offsets, values = take_ragged(self.hash_offsets, self.hash_values, index)
        columns: dict[str, object] = {col: getattr(self, col)[index] for col in INT_COLUMNS}
        columns |= {"arrival_time_s": self.arrival_time_s[index], "ids": self.ids[index],
                    "think_time_s": self.think_time_s[index]}
        columns |= {"hash_offsets": offsets, "hash_values": values}
        attrs = {"prefix_hash_tokens": self.prefix_hash_tokens, "name": self.name, "source": self.source}
        attrs |= {"skipped_rows": self.skipped_rows, "skipped_reasons": dict(self.skipped_reasons)}
        attrs |= {"closed_loop": self.closed_loop}
        for name in ("fan_parent", "length_capped", "trace_row"):
            if getattr(self, name) is not None:
                attrs[name] = getattr(self, name)[index]
        return Workload(**(columns | attrs | overrides))

    def head(self, count: int) -> Workload:
        """The first ``count`` requests (all of them when there are fewer); a negative or fractional count is
        an error, not a silent empty or rounded cut."""
        count = whole_number("Workload.head", "count", count, 0)
        return self.select(np.arange(min(count, len(self))))

    def describe_skips(self) -> str:
        """One line for the user: how many rows were skipped, and why."""
        if not self.skipped_rows:
            return "no rows skipped"
        reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(self.skipped_reasons.items()))
        return f"{self.skipped_rows} rows skipped: {reasons}"

