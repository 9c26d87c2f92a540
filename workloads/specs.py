"""The small spec strings of the command line: ``KIND[:key=value[,key=value...]]``.

Examples: ``poisson:rate=2``, ``gamma:rate=2,cv=3``, ``lognormal:prompt_mean=161,prompt_cv=1.2,...``,
``empirical:trace=azure-conv``. Values are numbers unless the parameter is a name or a path. A bad spec is a
`TraceError` that names the spec, the parameter and what was expected.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping

from workloads.errors import TraceError
from workloads.validation import MAX_TOKENS

MAX_CV = 1e100
"""Largest coefficient of variation a spec takes (`check_cv`); any cv near it draws nothing but near-zero values."""


def _key_values(items: str, context: str, pair: str, label: str = "") -> dict[str, str]:
    """The ``a=b,c=d`` list shared by spec strings and column mappings; errors start with ``context``."""
    values: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in items.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise TraceError(f"{context}: expected {pair}, got {item!r}")
        if key.strip() in values:
            raise TraceError(f"{context}: {label}{key.strip()!r} given twice")
        values[key.strip()] = value.strip()
    return values


def parse_spec(text: str, what: str) -> tuple[str, dict[str, str]]:
    """Split ``KIND:k=v,...`` into the kind and its raw parameters."""
    kind, _, rest = text.strip().partition(":")
    params = _key_values(rest, f"bad {what} spec {text!r}", "key=value")
    if not kind.strip():
        raise TraceError(f"bad {what} spec {text!r}: missing the kind before ':'")
    return kind.strip().lower(), params


def parse_columns(text: str) -> dict[str, str]:
    """A column-mapping override, ``field=column[,field=column...]`` (``prompt_tokens=ContextTokens``), as the
    dict `load_trace` takes; which fields exist is checked against the format when the trace is read."""
    mapping = _key_values(text, f"bad column mapping {text!r}", "field=column", "field ")
    if not mapping:
        raise TraceError(f"bad column mapping {text!r}: expected field=column[,field=column...]")
    return mapping


def check_positive(**values: float) -> None:
    """Raise ValueError naming the first parameter that is not a positive finite number (NaN included);
    `build_from_spec` turns it into a `TraceError` that names the spec. (Compared with ``inf``, not passed to
    ``np.isfinite``, which fails on an int past int64 such as ``prompt=10**20``.)"""
    for name, value in values.items():
        if not 0 < value < math.inf:
            raise ValueError(f"{name} must be a positive number, got {value}")


def check_tokens(**values: float) -> None:
    """`check_positive`, and at most `MAX_TOKENS`, the most a trace row may hold: token counts (or their means)
    past it made draws that wrapped negative in int64 or could not be drawn at all, and a workload that its
    own reader would refuse."""
    check_positive(**values)
    for name, value in values.items():
        if value > MAX_TOKENS:
            raise ValueError(f"{name} must be <= {MAX_TOKENS:g} tokens, got {value}")


def check_cv(**values: float) -> None:
    """`check_positive`, and within [1/`MAX_CV`, `MAX_CV`]: the distributions work from cv², which leaves
    floating-point range (an OverflowError, a division by zero) a little past 1e154 either way."""
    check_positive(**values)
    for name, value in values.items():
        if not 1 / MAX_CV <= value <= MAX_CV:
            raise ValueError(f"{name} must be within [{1 / MAX_CV:g}, {MAX_CV:g}], got {value}")


def build_from_spec(text: str, what: str, kinds: Mapping[str, Callable[..., object]],
                    types: Mapping[str, type]) -> object:
    """Parse ``text`` and call ``kinds[kind](**params)``, converting each value with ``types``."""
    kind, raw = parse_spec(text, what)
    if kind not in kinds:
        raise TraceError(f"bad {what} spec {text!r}: unknown kind {kind!r} (kinds: {', '.join(kinds)})")
    params: dict[str, object] = {}
    for key, value in raw.items():
        convert = types.get(key)
        if convert is None:
            raise TraceError(f"bad {what} spec {text!r}: unknown parameter {key!r}")
        try:
            params[key] = convert(value)
        except ValueError:
            raise TraceError(f"bad {what} spec {text!r}: {key}={value!r} is not {'an' if convert.__name__[0] in 'aeiou' else 'a'} {convert.__name__}") from None
    _check_parameters(kinds[kind], kind, params, f"bad {what} spec {text!r}")
    try:
        return kinds[kind](**params)
    except TypeError as exc:
        raise TraceError(f"bad {what} spec {text!r}: {exc}") from None
    except ValueError as exc:
        raise TraceError(f"bad {what} spec {text!r}: {exc}") from None


def _check_parameters(build: Callable[..., object], kind: str, params: Mapping[str, object], context: str) -> None:
    """A spec's parameters against what its kind takes: the missing required ones and those of another kind are
    named with the kind's whole list, where Python's own message names the class's ``__init__``."""
    taken = inspect.signature(build).parameters
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in taken.values()):
        return  # takes what it is given: its own call says what is wrong
    missing = [name for name, p in taken.items() if p.default is inspect.Parameter.empty and name not in params]
    foreign = [name for name in params if name not in taken]
    if missing or foreign:
        listed = ", ".join(name if p.default is inspect.Parameter.empty else f"{name}={p.default}"
                           for name, p in taken.items())
        problem = f"needs {', '.join(missing)}" if missing else f"takes no {', '.join(foreign)}"
        raise TraceError(f"{context}: {kind} {problem} (its parameters: {listed})")
