"""`kvsim calibrate` writes to the user's directory, never over kvsim's shipped tables, and `kvsim run` finds
what it wrote: the whole calibrate -> run loop works on a machine without a GPU (``--gpu cpu``)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.kernel.calibration_store import SHIPPED_DIR as SHIPPED


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def run_json(*args: str) -> dict:
    result = CliRunner().invoke(main, ["run", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_calibrate_without_out_writes_the_user_directory_and_run_picks_it_up(tmp_path, monkeypatch):
    """Guards against `kvsim calibrate --device cpu --quick` overwriting the shipped
    sim/data/calibration/cpu/llama-3-8b.json, and the CPU table it wrote could drive nothing."""
    pytest.importorskip("torch")
    home = tmp_path / "home"
    monkeypatch.setenv("KVSIM_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    before = digests(SHIPPED)
    result = CliRunner().invoke(main, ["calibrate", "--model", "llama-3-8b", "--device", "cpu", "--quick"])
    assert result.exit_code == 0, result.output
    written = home / "calibration" / "cpu" / "llama-3-8b.json"
    assert written.is_file() and written.with_suffix(".csv").is_file()
    assert f"wrote {written}" in result.stdout
    assert "kvsim run --gpu cpu --model llama-3-8b" in result.stdout
    assert digests(SHIPPED) == before, "kvsim calibrate changed a shipped calibration table"

    summary = run_json("--gpu", "cpu", "--model", "llama-3-8b", "--num-requests", "20")
    assert summary["gpu"] == "cpu" and summary["completed"] == 20
    assert summary["cost_model"] == "calibrated (llama-3-8b.json)"


def test_run_prefers_explicit_then_user_then_shipped_tables(tmp_path, monkeypatch):
    """The search order `kvsim run` documents: --calibration, then $KVSIM_HOME's table, then the shipped one.
    A user table with a 1 s step overhead must slow the run down; an explicit table must win over it."""
    home = tmp_path / "home"
    monkeypatch.setenv("KVSIM_HOME", str(home))
    args = ("--gpu", "cpu", "--model", "llama-3-8b", "--num-requests", "10")
    shipped = run_json(*args)
    user_table = home / "calibration" / "cpu" / "llama-3-8b.json"
    user_table.parent.mkdir(parents=True)
    table = json.loads((SHIPPED / "cpu" / "llama-3-8b.json").read_text())
    table["coefficients"]["step_overhead_s"] = 1.0
    user_table.write_text(json.dumps(table))
    slowed = run_json(*args)
    assert slowed["sim_time_s"] > shipped["sim_time_s"] + 10
    explicit = tmp_path / "explicit.json"
    shutil.copy(SHIPPED / "cpu" / "llama-3-8b.json", explicit)
    assert run_json(*args, "--calibration", str(explicit))["sim_time_s"] == shipped["sim_time_s"]


def test_cpu_is_a_labelled_catalog_entry():
    """`--gpu cpu` is a catalog entry whose source says it is the host CPU, not an accelerator."""
    from allocators.catalog import get_gpu

    cpu = get_gpu("cpu")
    assert "not an accelerator" in cpu.source and cpu.hbm_bandwidth_gb_s < 100
