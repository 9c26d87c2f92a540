"""Where calibration tables live: the user's own (written by ``kvsim calibrate``) and the ones kvsim ships.

``kvsim calibrate`` writes to ``$KVSIM_HOME/calibration/<gpu>/<model>.json`` (``KVSIM_HOME`` defaulting to
``$XDG_DATA_HOME/kvsim``, else ``~/.local/share/kvsim``), never into the tables shipped inside the package
(``sim/data/calibration``, found with `importlib.resources`; each ``<gpu>/<model>.json`` with its
measurements beside it as ``.csv``): a calibration of one machine must not silently
replace the table every other user of the installation gets. ``kvsim run`` looks for a table in that order:
``--calibration FILE``, the user's, then the shipped one.

A calibration on the host CPU is labelled ``cpu`` and drives runs with ``--gpu cpu``; its fractions were
fitted against the peaks measured on that CPU, so those peaks (stored in the table) replace the catalog's
nominal ``cpu`` figures (`peaks_of`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from importlib.resources import files
from pathlib import Path

from allocators.catalog import GpuSpec

SHIPPED_DIR = Path(str(files("sim") / "data" / "calibration"))
"""The tables kvsim ships as package data, ``<gpu>/<model>.json`` (a wheel installs unzipped, so a real folder)."""


def kvsim_home() -> Path:
    """``$KVSIM_HOME``, else ``$XDG_DATA_HOME/kvsim``, else ``~/.local/share/kvsim``."""
    if os.environ.get("KVSIM_HOME"):
        return Path(os.environ["KVSIM_HOME"])
    data = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data) / "kvsim"


def user_table_path(gpu: str, model: str) -> Path:
    """Where ``kvsim calibrate`` writes a table by default."""
    return kvsim_home() / "calibration" / gpu / f"{model}.json"


def find_calibration(gpu: str, model: str) -> Path | None:
    """The user's table for this GPU and model if there is one, else the shipped one, else None."""
    for path in (user_table_path(gpu, model), SHIPPED_DIR / gpu / f"{model}.json"):
        if path.is_file():
            return path
    return None


def picked_table(calibration: str | Path | None, cost_profile: str | None, gpu: str, model: str) -> str | Path | None:
    """The calibration table a run's clock reads (`sim.kernel.replica.make_cost_model`): the one given, else,
    unless a profile is named, `find_calibration`'s; None: a profile."""
    return calibration or (None if cost_profile else find_calibration(gpu, model))


def shipped_tables(model: str, root: str | Path = SHIPPED_DIR) -> list[Path]:
    """The shipped tables of ``model``: GPU tables first (by GPU name), the CPU one last. (Here, not in
    `gpu_validation.fit`, which reads and writes the tables but never imports `sim`.)"""
    paths = sorted(Path(root).glob(f"*/{model}.json"))
    return [p for p in paths if p.parent.name != "cpu"] + [p for p in paths if p.parent.name == "cpu"]


def peaks_of(path: str | Path, gpu: GpuSpec) -> GpuSpec:
    """The ``cpu`` entry with the peaks a CPU calibration measured (its fractions are relative to them);
    any other GPU, or a table without ``peaks``, unchanged. A table that cannot be read is left for the cost
    model to report; measured peaks that are there but wrong (missing, not a number, <= 0, nan, inf) are a
    one-line ValueError naming the file, the field and the value, not a silent fall back to the nominal
    figures the fractions were not fitted against."""
    if gpu.name != "cpu":
        return gpu
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return gpu
    if not isinstance(data, dict) or "peaks" not in data:
        return gpu
    peaks = data["peaks"]
    if not isinstance(peaks, dict):
        raise ValueError(f"{path}: field 'peaks' must be an object with flops_s and bandwidth_bytes_s, "
                         f"got {peaks!r}")
    measured = {}
    for key in ("flops_s", "bandwidth_bytes_s"):
        value = peaks.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ValueError(f"{path}: field 'peaks.{key}' must be a positive finite number (the peak this "
                             f"CPU calibration measured), got {value!r}")
        measured[key] = float(value)
    return dataclasses.replace(gpu, bf16_tflops=measured["flops_s"] / 1e12,
                               hbm_bandwidth_gb_s=measured["bandwidth_bytes_s"] / 1e9)
