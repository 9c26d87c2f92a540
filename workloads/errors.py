"""The one error a trace reader or a spec parser raises: `TraceError`.

Bad input must never be dropped silently or surface as a pandas or JSON traceback: a user needs the file, the
line (or row) and the field to fix it. `TraceError` subclasses ValueError so the CLI's `fail` turns it into a
one-line exit-code-2 message.
"""

from __future__ import annotations

SKIP_HINT = "(add --skip-bad-rows to skip such rows)"


class TraceError(ValueError):
    """A trace file or a workload spec that cannot be read as asked."""


class TraceWarning(UserWarning):
    """A trace read as asked that may still not mean what the user thinks (a timestamp column left unread);
    the command line prints it as one ``Warning: ...`` line on stderr."""


def row_error(path: object, where: str, field: str, problem: str, value: object = None, *,
              skippable: bool = True) -> TraceError:
    """Build the standard message: ``FILE: line N: field 'F': problem (got V)``, with the hint to skip bad rows
    unless skipping cannot help (a workload-wide value)."""
    got = "" if value is None else f" (got {show_value(value)})"
    hint = f" {SKIP_HINT}" if skippable else ""
    return TraceError(f"{path}: {where}: field '{field}': {problem}{got}{hint}")


def show_value(value: object) -> str:
    """The value as the file wrote it: numpy scalars as plain numbers (``0``, not ``np.float64(0.0)``)."""
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
