"""A sweep's grid: fixed configuration values (the base) and axes of values, from flags or a TOML file.

Each point of the grid is the base with one value from every axis; points are ordered as
``itertools.product`` orders them (the last axis varies fastest), and that order is the order of the
results table whatever order the points finish in. Values are coerced to the configuration field's
type here, once, so that ``--rate 1`` and ``rate = [1]`` in TOML describe the same point (and hash alike).
A field may be spelled as its flag alias (`SimConfig.FLAG_ALIASES`: ``columns``, vLLM's ``tensor_parallel_size``
for ``tensor_parallel``, ...) in flags, TOML keys and a grid built in Python alike; the grid holds the field's own
name, so the results table has one column per field, and two spellings of one field in one grid are refused
rather than one silently winning.
"""

from __future__ import annotations

import dataclasses
import itertools
import types
import typing
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from sim.kernel.config import SimConfig, plain_int, plain_number
from sim.kernel.vllm_names import lookalike_message

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"none", "null"}


def one_or_many(value: Any, what: str) -> tuple[Any, ...]:
    """The values of an argument that takes several (allocator names, an axis of a grid), in order: a lone
    string or other single value is a list of one, so ``"paged"`` is one allocator and not five letters, and
    ``16`` an axis of one block size. A set or a mapping is refused, naming ``what``: a set's order of names
    changes from run to run, and with it the order of the results."""
    if isinstance(value, (str, bytes, Path)) or not isinstance(value, Iterable):
        return (value,)
    if isinstance(value, (Set, Mapping)):
        raise ValueError(f"{what} must be a list of values, got a {type(value).__name__} ({value!r}); "
                         f"pass a list, whose order the results keep")
    return tuple(value)


@dataclass(frozen=True)
class Grid:
    """Fixed values plus ordered axes; ``points()`` expands them into per-point field dictionaries.

    A grid built in Python is checked and coerced as the flag and TOML paths do (unknown fields refused, values
    turned into the field's type, so numpy integers hash as plain ones): an axis given as a single value, a
    string included, is an axis of one. An axis that repeats a value is kept: the sweep runs the point once
    and reports it merged. ``config_cls`` (default `SimConfig`) gives the fields and their types."""

    base: dict[str, Any]
    axes: dict[str, tuple[Any, ...]]
    config_cls: type = field(default=SimConfig, compare=False, repr=False)

    def __post_init__(self) -> None:
        types_ = config_field_types(self.config_cls)
        aliases = getattr(self.config_cls, "FLAG_ALIASES", {})
        base = {name: _coerce_all(name, [value], types_, "grid base")[0]
                for name, (_, value) in by_field(self.base, aliases, "grid base").items()}
        axes = {name: _coerce_all(name, list(one_or_many(values, f"grid axis {name!r}")), types_, "grid axes",
                                  unique=False)
                for name, (_, values) in by_field(self.axes, aliases, "grid axes").items()}
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "axes", axes)

    def __len__(self) -> int:
        n = 1
        for values in self.axes.values():
            n *= len(values)
        return n

    def points(self) -> list[dict[str, Any]]:
        """One dictionary of field values per point, base first and then the point's axis values."""
        names = list(self.axes)
        return [{**self.base, **dict(zip(names, combo, strict=True))}
                for combo in itertools.product(*self.axes.values())]

    def without(self, name: str) -> Grid:
        """The grid with ``name`` dropped from both base and axes (the SLO search owns the rate)."""
        return Grid({k: v for k, v in self.base.items() if k != name},
                    {k: v for k, v in self.axes.items() if k != name}, self.config_cls)

    def merged(self, other: Grid) -> Grid:
        """This grid with ``other``'s fields taking precedence: flags override a TOML file's base and axes."""
        base = {k: v for k, v in self.base.items() if k not in other.axes}
        axes = {k: v for k, v in self.axes.items() if k not in other.base}
        base.update(other.base)
        axes.update(other.axes)
        return Grid(base, axes, self.config_cls)


def by_field(table: Mapping[str, Any], aliases: Mapping[str, str], where: str) -> dict[str, tuple[str, Any]]:
    """Field name -> (the key that spelled it, its value), a key being a field's name or one of its ``aliases``
    (flag spellings such as vLLM's ``tensor_parallel_size``). Two keys spelling one field are refused, naming
    both: which one was meant is not for kvsim to guess."""
    out: dict[str, tuple[str, Any]] = {}
    for key, value in table.items():
        name = aliases.get(key, key)
        if name in out:
            raise ValueError(f"{where}: {out[name][0]!r} and {key!r} both set field {name!r} (two spellings of "
                             f"one setting); give one")
        out[name] = (key, value)
    return out


def config_field_types(config_cls: type) -> dict[str, Any]:
    """Field name -> annotated type of a configuration dataclass (falling back to the default's type)."""
    try:
        hints = typing.get_type_hints(config_cls)
    except Exception:  # annotations naming things only imported for type checkers
        hints = {}
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config_cls):
        if f.name in hints:
            out[f.name] = hints[f.name]
        elif f.default is not dataclasses.MISSING and f.default is not None:
            out[f.name] = type(f.default)
        else:
            out[f.name] = Any
    return out


def coerce_value(name: str, typ: Any, value: Any, where: str) -> Any:
    """Turn a flag string or a TOML value into the field's type; ValueError naming ``where`` and the field."""
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(typ)
        if type(None) in options and (value is None or (isinstance(value, str) and value.lower() in _NONE)):
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return coerce_value(name, option, value, where)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(errors[0] if errors else f"{where}: field {name!r}: cannot use {value!r}")
    if origin is typing.Literal:
        allowed = typing.get_args(typ)
        for option in allowed:
            if value == option or (isinstance(value, str) and str(option) == value):
                return option
        raise ValueError(f"{where}: field {name!r}: {value!r} is not one of {', '.join(map(str, allowed))}")
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise ValueError(f"{where}: field {name!r}: expected true or false, got {value!r}")
    if typ is int or typ is float:
        # An int field takes only integers (TOML's 2.0 is refused, not truncated); a float field takes both.
        # numpy's count as well (a grid built from np.arange), stored as plain numbers so points hash alike.
        number = plain_int(value) if typ is int else plain_number(value)
        if number is not None:
            return typ(number)
        if isinstance(value, str):
            try:
                return typ(value)
            except ValueError:
                pass
        expected = "an integer" if typ is int else "a number"
        raise ValueError(f"{where}: field {name!r}: expected {expected}, got {value!r}")
    if typ in (str, Path):
        if isinstance(value, (str, Path)):
            return typ(value)
        raise ValueError(f"{where}: field {name!r}: expected a string, got {value!r}")
    return value


def _coerce_all(name: str, values: list[Any], types_: dict[str, Any], where: str,
                unique: bool = True) -> tuple[Any, ...]:
    """Every value of field ``name`` coerced to its type; ``unique`` refuses a value given twice (a flag's or
    a TOML file's typo), which a grid built in Python may hold, as the sweep merges such points."""
    if name not in types_:
        why = lookalike_message(name)
        raise ValueError(f"{where}: unknown configuration field {name!r}"
                         + (f": {why}" if why else f" (known: {', '.join(types_)})"))
    if not values:
        raise ValueError(f"{where}: field {name!r} has no values")
    out = tuple(coerce_value(name, types_[name], v, where) for v in values)
    if not unique:
        return out
    seen: list[Any] = []
    for v in out:
        if v in seen:
            raise ValueError(f"{where}: field {name!r} lists {v!r} twice")
        seen.append(v)
    return out


TRACE_SUFFIXES = (".csv", ".jsonl", ".json", ".parquet")
"""File name endings of a trace (`workloads.readers`), for `parse_flag_tokens`'s hint."""


def _looks_like_trace(token: str) -> bool:
    """Whether an unexpected positional argument is probably a trace: `kvsim run TRACE` takes one, so
    ``kvsim sweep good.csv`` is an easy slip, and the grid's own error does not say where the trace goes."""
    if token.lower().endswith(TRACE_SUFFIXES):
        return True
    try:
        return Path(token).is_file()
    except (OSError, ValueError):  # a name too long for the file system, or with a NUL byte
        return False


def parse_flag_tokens(tokens: list[str], comma_fields: tuple[str, ...] = (),
                      aliases: dict[str, str] | None = None,
                      short_flags: dict[str, str] | None = None) -> dict[str, list[str]]:
    """``['--block-size', '8,16', '--prefix-caching', '--seed=0,1']`` -> ``{'block_size': ['8', '16'], ...}``.

    A flag with no value is boolean true, ``--no-NAME`` is false, and ``--axis NAME=V1,V2`` names the field
    directly. The values of ``comma_fields`` hold commas themselves (``--columns a=b,c=d``): they split on
    ``;`` instead. ``aliases`` maps other flag spellings to field names (``columns`` -> ``trace_columns``,
    vLLM's ``tensor_parallel_size`` -> ``tensor_parallel``) and ``short_flags`` single-dash ones (``-tp``) to
    field names; two spellings of one field are refused.
    """
    out: dict[str, list[str]] = {}
    spelled: dict[str, tuple[str, str]] = {}  # field -> (its spelling, the flag as given)
    short_flags = short_flags or {}

    def is_flag(token: str) -> bool:
        return token.startswith("--") or token in short_flags

    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not is_flag(token) or token == "--":
            raise ValueError(f"unexpected argument {token!r}: grid flags look like --field-name V1,V2"
                             + (" (a trace file goes in --trace FILE)" if _looks_like_trace(token) else ""))
        flag, eq, value = ("", "", "") if token in short_flags else token[2:].partition("=")
        given = token.partition("=")[0]  # as typed (--no-enable-prefix-caching), for the error that names it
        if not eq:
            if i + 1 < len(tokens) and not is_flag(tokens[i + 1]):
                value = tokens[i + 1]
                i += 1
            elif flag.startswith("no-"):
                flag, value = flag[3:], "false"
            else:
                value = "true"
        i += 1
        if flag == "axis":
            flag, eq, value = value.partition("=")
            if not eq:
                raise ValueError(f"--axis expects NAME=V1,V2, got {flag!r}")
            given = f"--axis {flag}"
        name = short_flags.get(token) or (aliases or {}).get(flag.replace("-", "_"), flag.replace("-", "_"))
        shown = token if token in short_flags else f"--{flag}"
        if name in out:
            if spelled[name][0] == shown:
                raise ValueError(f"{shown} is given twice")
            raise ValueError(f"{spelled[name][1]} and {given} both set field {name!r} (two spellings of one "
                             f"setting); give one")
        spelled[name] = (shown, given)
        out[name] = value.split(";" if name in comma_fields else ",")
    return out


def grid_from_flags(tokens: list[str], config_cls: type) -> Grid:
    """Every flag becomes an axis (a single value is an axis of one, which changes nothing)."""
    types_ = config_field_types(config_cls)
    raw = parse_flag_tokens(tokens, getattr(config_cls, "COMMA_FIELDS", ()), getattr(config_cls, "FLAG_ALIASES", {}),
                            getattr(config_cls, "SHORT_FLAGS", {}))
    return Grid({}, {name: _coerce_all(name, values, types_, "command line") for name, values in raw.items()},
                config_cls)


def load_grid_toml(path: str | Path, config_cls: type) -> Grid:
    """A TOML file with a ``[base]`` table of fields and an ``[axes]`` table of lists of values."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from exc
    unknown = set(data) - {"base", "axes"}
    if unknown:
        raise ValueError(f"{path}: unknown table(s) {', '.join(sorted(unknown))}; expected [base] and [axes]")
    types_ = config_field_types(config_cls)
    aliases = getattr(config_cls, "FLAG_ALIASES", {})
    base_keys = by_field(data.get("base", {}), aliases, f"{path} [base]")
    base: dict[str, Any] = {}
    for name, (_, value) in base_keys.items():
        base[name] = _coerce_all(name, [value], types_, f"{path} [base]")[0]
    axes: dict[str, tuple[Any, ...]] = {}
    for name, (key, values) in by_field(data.get("axes", {}), aliases, f"{path} [axes]").items():
        if not isinstance(values, list):
            raise ValueError(f"{path} [axes]: field {key!r} must be a list of values, got {values!r}")
        if name in base:
            spellings = "" if base_keys[name][0] == key else f" (as {base_keys[name][0]!r} and {key!r})"
            raise ValueError(f"{path}: field {name!r} is in both [base] and [axes]{spellings}")
        axes[name] = _coerce_all(name, values, types_, f"{path} [axes]")
    return Grid(base, axes, config_cls)
