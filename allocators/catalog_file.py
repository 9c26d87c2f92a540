"""Catalog files: extra models and GPUs from a user's TOML (``--catalog FILE`` or ``$KVSIM_CATALOG``).

A file holds ``[models.NAME]`` and ``[gpus.NAME]`` tables whose keys are the fields of `ModelSpec` and
`GpuSpec` (``catalog.py``); every mistake (an unknown table or field, a missing one, a value out of range,
a file that is not TOML) is a one-line ValueError naming the file and the entry, so a typo never adds
nothing silently.
"""

from __future__ import annotations

import sys
from dataclasses import MISSING, fields
from pathlib import Path

from allocators.catalog import GIB, GPUS, MODELS, GpuSpec, ModelSpec, check_positive, get_model

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CATALOG_SECTIONS = ("models", "gpus")


def _spec_from_table(cls: type, section: str, name: str, table: dict, path: Path) -> object:
    known = {f.name for f in fields(cls)} - {"name"}
    unknown = set(table) - known
    if unknown:
        raise ValueError(f"{path}: [{section}.{name}]: unknown field(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(sorted(known))}")
    required = [f.name for f in fields(cls) if f.name != "name" and f.default is MISSING]
    missing = [f if f != "memory_bytes" else "memory_gib (or memory_bytes)" for f in required if f not in table]
    if missing:
        raise ValueError(f"{path}: [{section}.{name}]: missing field(s) {', '.join(missing)}")
    try:
        return cls(name=name.lower(), **table)
    except ValueError as exc:  # a field out of range: name the file too
        raise ValueError(f"{path}: {exc}") from None


def _tables(data: dict, section: str, path: Path) -> dict[str, dict]:
    """The ``[section.NAME]`` tables of a catalog file, each as a plain dict."""
    entries = data.get(section, {})
    if not isinstance(entries, dict):
        raise ValueError(f"{path}: {section} must be tables [{section}.NAME]")
    for name, table in entries.items():
        if not isinstance(table, dict):
            raise ValueError(f"{path}: {section}.{name} must be a table [{section}.{name}] of fields")
    seen: dict[str, str] = {}
    for name in entries:  # names are case-insensitive (`get_model`): a second spelling would replace the first
        if name.lower() in seen:
            raise ValueError(f"{path}: [{section}.{seen[name.lower()]}] and [{section}.{name}] are the same entry "
                             "(names are case-insensitive); keep one")
        seen[name.lower()] = name
    return {name: dict(table) for name, table in entries.items()}


def load_catalog_file(path: str | Path) -> tuple[dict[str, ModelSpec], dict[str, GpuSpec]]:
    """Read extra models and GPUs from TOML: ``[models.NAME]`` and ``[gpus.NAME]`` tables.

    GPU entries may give ``memory_gib`` instead of ``memory_bytes``. Returns only the new entries; use
    `register_catalog_file` to merge them into the catalog.
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")  # drops a BOM (Windows editors write one; TOML has none)
        data = tomllib.loads(text)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read catalog file: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a TOML catalog file (binary, or not UTF-8 text)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(CATALOG_SECTIONS))
    if unknown:  # [model.x] for [models.x] would otherwise add nothing, silently
        raise ValueError(f"{path}: unknown table(s) {', '.join(f'[{u}]' for u in unknown)}; a catalog has "
                         "[models.NAME] and [gpus.NAME] tables")
    models = {}
    for name, table in _tables(data, "models", path).items():
        models[name.lower()] = _spec_from_table(ModelSpec, "models", name, table, path)
    gpus = {}
    for name, table in _tables(data, "gpus", path).items():
        if "memory_gib" in table:
            if "memory_bytes" in table:  # one would silently win over the other
                raise ValueError(f"{path}: [gpus.{name}]: give one of memory_gib, memory_bytes, not both "
                                 f"(got memory_gib = {table['memory_gib']!r}, "
                                 f"memory_bytes = {table['memory_bytes']!r})")
            gib = table.pop("memory_gib")
            check_positive(f"{path}: gpu {name!r}", "memory_gib", gib)  # not a string times GIB
            table["memory_bytes"] = int(gib * GIB)
        gpus[name.lower()] = _spec_from_table(GpuSpec, "gpus", name, table, path)
    if not models and not gpus:
        raise ValueError(f"{path}: no [models.NAME] or [gpus.NAME] table: the catalog adds nothing")
    return models, gpus


def register_catalog_file(path: str | Path) -> None:
    """Add a file's models and GPUs to `MODELS` and `GPUS` (user entries win over built-ins)."""
    models, gpus = load_catalog_file(path)
    MODELS.update(models)
    GPUS.update(gpus)


def model_with_catalog(name: str, catalog: str | Path | None) -> ModelSpec:
    """The model ``name``, after registering ``catalog`` (a run's ``--catalog``, whose entries it may name: a sweep
    point in another process reads the file itself)."""
    if catalog is not None:
        register_catalog_file(catalog)
    return get_model(name)
