"""The identity of a sweep point: a hash of its resolved configuration, the kvsim version and its input files.

A rerun skips a point whose id is already in the results store, so the id must change whenever the result
could: any configuration field, the simulator's version (a new release may simulate differently), and the
contents of the files a configuration points to (a trace or calibration table edited in place keeps its
name). Hashing the bytes of those files costs milliseconds against a simulation's seconds.
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


def point_id(config: Any, version: str | None = None) -> str:
    """16 hex digits identifying a point: canonical JSON of the fields, the version and file digests."""
    values = config_values(config)
    digests = {name: file_digest(values.get(name)) for name in FILE_FIELDS if values.get(name) is not None}
    payload = {"config": values, "kvsim": version if version is not None else kvsim_version(),
               "files": digests}
    text = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
