"""The one error a trace reader or a spec parser raises: `TraceError`.

Bad input must never be dropped silently or surface as a pandas or JSON traceback: a user needs the file, the
line (or row) and the field to fix it. `TraceError` subclasses ValueError so the CLI's `fail` turns it into a
one-line exit-code-2 message.
"""

from __future__ import annotations

import numbers

import numpy as np

SKIP_HINT = "(add --skip-bad-rows to skip such rows)"


class TraceError(ValueError):
    """A trace file or a workload spec that cannot be read as asked."""


class TraceWarning(UserWarning):
    """A trace read as asked that may still not mean what the user thinks (a timestamp column left unread);
    the command line prints it as one ``Warning: ...`` line on stderr."""


def row_error(path: object, where: str, field: str, problem: str, value: object = None, *,
              skippable: bool = True, column: str | None = None) -> TraceError:
    """Build the standard message: ``FILE: line N: field 'F': problem (got V)``, with the hint to skip bad rows
    unless skipping cannot help (a workload-wide value). ``column``: the file's name for the field where it has
    another (Azure's ``TIMESTAMP`` for ``arrival_time_s``), shown as ``field 'F' (column 'C')``: the user looks
    for the column in the file, not for kvsim's field."""
    got = "" if value is None else f" (got {show_value(value)})"
    hint = f" {SKIP_HINT}" if skippable else ""
    named = f" (column '{column}')" if column is not None and column != field else ""
    return TraceError(f"{path}: {where}: field '{field}'{named}: {problem}{got}{hint}")


def show_value(value: object) -> str:
    """The value as the file wrote it: numpy scalars as plain numbers (``0``, not ``np.float64(0.0)``), a whole
    float as an integer (``100``, not ``100.0``) while a float holds every integer of its size (below 2**53):
    past it the digits an ``int`` prints are the float's, not the file's (a cell ``1e30`` showed as
    ``1000000000000000019884624838656``), so it keeps the float's short form (``1e+30``)."""
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer() and abs(value) < 2.0 ** 53:
        value = int(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def is_whole_number(value: object) -> bool:
    """An integer (numpy's too) or a float such as 100.0, as a trace cell may hold a count; not a bool (True is
    no count), not a string, not a fraction that a cast would silently truncate, not NaN."""
    if isinstance(value, (bool, np.bool_)):
        return False
    return isinstance(value, numbers.Integral) or (isinstance(value, numbers.Real) and float(value).is_integer())


def whole_number(context: str, name: str, value: object, low: int, high: int | None = None) -> int:
    """``value`` as an ``int`` when it is a whole number (`is_whole_number`) >= ``low`` (and <= ``high``: a count
    that no array or int64 column can hold failed inside numpy, or wrapped negative), else a one-line
    `TraceError` naming the argument, worded as a trace row's error is (``generate: n must be a whole number
    (got 1.9)``). Why: numpy casts silently truncate (``n=1.9`` ran as 1, parallel sampling off) and a string
    fails deep inside a comparison."""
    if not is_whole_number(value):
        raise TraceError(f"{context}: {name} must be a whole number (got {show_value(value)})")
    if value < low:
        raise TraceError(f"{context}: {name} must be >= {low} (got {show_value(value)})")
    if high is not None and value > high:
        raise TraceError(f"{context}: {name} must be <= {high:g} (got {show_value(value)})")
    return int(value)


def real_number(context: str, name: str, value: object) -> float:
    """``value`` as a ``float`` when it is a real number (not a bool or a string: ``rate="2"`` failed inside
    a format code); ranges are the caller's to check, with its own wording."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TraceError(f"{context}: {name} must be a number (got {show_value(value)})")
    return float(value)


def check_seed(context: str, seed: object) -> int:
    """``seed`` as an ``int``, or a one-line `TraceError`. ``None`` is numpy's fresh entropy, a different
    workload on every call, which breaks "same inputs and seed, same bytes"; a float, a string or a negative
    number would fail inside numpy with a message that does not name the seed."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise TraceError(f"{context}: seed must be a non-negative integer, got {show_value(seed)}")
    return int(seed)
