"""The identity of a sweep point: a hash of its resolved configuration, the kvsim version and its input files.

A rerun skips a point whose id is already in the results store, so the id must change whenever the result
could: any configuration field, the simulator's version (a new release may simulate differently), and the
contents of the files a configuration points to (a trace or calibration table edited in place keeps its
name) or reads without naming (a trace preset's file, which ``$KVSIM_TRACES`` decides; the calibration table
picked up for a GPU and model). Hashing the bytes of those files costs milliseconds against a simulation's
seconds.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
from pathlib import Path
from typing import Any

FILE_FIELDS = ("trace", "calibration", "catalog")
"""Configuration fields that may name a file whose contents decide the result."""


def kvsim_version() -> str:
    """The installed kvsim's version; "unknown" when running from a tree that was never installed."""
    try:
        return importlib.metadata.version("kvsim")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def config_values(config: Any) -> dict[str, Any]:
    """A configuration's fields as a plain dict (a dataclass instance, or already a dict)."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    return dict(config)


@functools.lru_cache(maxsize=64)
def _digest_of(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_digest(value: Any) -> str | None:
    """sha256 of the file a field names, or None when it names no existing file (a preset, a built-in)."""
    if not isinstance(value, (str, Path)):
        return None
    path = Path(value)
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not path.is_file():
        return None
    return _digest_of(str(path.resolve()), st.st_size, st.st_mtime_ns)


def implicit_files(values: dict[str, Any]) -> dict[str, Path]:
    """Files a configuration reads without naming them: a trace preset's (the full trace when
    ``$KVSIM_TRACES`` holds it, else the shipped sample: the same preset name, other requests) and the
    calibration table a run picks up for its GPU and model (the user's, else a shipped one)."""
    from sim.kernel.calibration_store import picked_table
    from workloads.presets import TRACE_PRESETS, trace_file

    files: dict[str, Path] = {}
    if values.get("trace") is None and values.get("preset") in TRACE_PRESETS:
        try:
            files["preset"] = trace_file(values["preset"])[0]
        except ValueError:  # neither file is there: the run will say so
            pass
    if values.get("calibration") is None:  # one named is among FILE_FIELDS
        table = picked_table(None, values.get("cost_profile"), str(values.get("gpu")), str(values.get("model")))
        if table is not None:
            files["picked_calibration"] = Path(table)
    return files


def point_id(config: Any, version: str | None = None) -> str:
    """16 hex digits identifying a point: canonical JSON of the fields, the version and the digests of the
    files it names or reads without naming (`implicit_files`)."""
    values = config_values(config)
    digests = {name: file_digest(values.get(name)) for name in FILE_FIELDS if values.get(name) is not None}
    digests |= {name: file_digest(path) for name, path in implicit_files(values).items()}
    payload = {"config": values, "kvsim": version if version is not None else kvsim_version(),
               "files": digests}
    text = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
