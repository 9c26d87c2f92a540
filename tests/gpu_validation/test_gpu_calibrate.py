"""`kvsim calibrate` and the GPU script run end to end on CPU, with their numbers labelled as CPU numbers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from sim.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_calibrate_quick_on_cpu_writes_a_labelled_table_and_its_measurements(tmp_path):
    out = tmp_path / "cal" / "llama.json"
    result = CliRunner().invoke(main, ["calibrate", "--model", "llama-3-8b", "--device", "cpu", "--quick",
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "CPU numbers" in result.output
    table = json.loads(out.read_text())
    assert (table["format"], table["gpu"], table["device"], table["model"]) == \
        ("kvsim-calibration", "cpu", "cpu", "llama-3-8b")
    c = table["coefficients"]
    assert 0 < c["bandwidth_frac"] <= 1 and 0 < c["flops_frac"] <= 1 and c["step_overhead_s"] >= 0
    assert set(c["paged_kernel_overhead"]) == {"8", "16", "32"}
    measurements = pd.read_csv(out.with_suffix(".csv"))
    assert len(measurements) == table["fit"]["points"] > 0
    assert set(measurements["kind"]) == {"decode", "prefill"}
    # CUDA graphs are asked for by default but exist only on a GPU: a CPU run says it timed eagerly
    assert table["timing"] == "eager" and set(measurements["timing"]) == {"eager"}
    assert (measurements["step_s"] > 0).all()
    parts = measurements["num_layers"] * (measurements["attention_s"] + measurements["dense_layer_s"])
    composed = parts + measurements["lm_head_s"]  # the CSV keeps 6 significant digits
    assert ((measurements["step_s"] - composed).abs() / composed).max() < 1e-4


@pytest.mark.parametrize("args,message", [
    (["--model", "llama-3-8b", "--device", "cpu", "--gpu", "h200"], "CPU calibrations are labelled 'cpu'"),
    (["--model", "no-such-model", "--device", "cpu"], "unknown model"),
])
def test_calibrate_bad_input_is_one_line_exit_2(args, message, tmp_path):
    result = CliRunner().invoke(main, ["calibrate", *args, "--out", str(tmp_path / "x.json")])
    assert result.exit_code == 2 and message in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output


def test_a_failed_graph_capture_is_one_line_naming_the_way_out(monkeypatch, tmp_path):
    """A capture that fails on a GPU (a kernel reading a device value on the host) ends the command with one line
    that says to time eagerly, not a CUDA traceback."""
    import torch

    from gpu_validation import calibration, timing

    def replay_of(fn):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore detail")

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "Stream", lambda: type("S", (), {"wait_stream": lambda self, s: None})())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: type("S", (), {"wait_stream": lambda self, s: None})())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: __import__("contextlib").nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: None)
    monkeypatch.setattr(torch.cuda, "graph", replay_of)
    with pytest.raises(timing.GraphCaptureError, match="operation not permitted when stream is capturing\\); time "
                                                      "eagerly with --no-cuda-graphs$"):
        timing.captured(lambda: None)

    def failing(*args, **kwargs):
        timing.captured(lambda: None)

    monkeypatch.setattr(calibration, "calibrate", failing)
    result = CliRunner().invoke(main, ["calibrate", "--model", "llama-3-8b", "--out", str(tmp_path / "x.json")])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("Error: CUDA graph capture failed")
    assert lines[0].endswith("--no-cuda-graphs"), result.output


def test_gpu_names_map_onto_the_catalog():
    from gpu_validation.calibration import match_gpu

    assert match_gpu("NVIDIA H200") == "h200"
    assert match_gpu("NVIDIA H100 80GB HBM3") == "h100-80gb"
    assert match_gpu("NVIDIA A100-SXM4-40GB") == "a100-40gb"
    assert match_gpu("NVIDIA GeForce RTX 4090") is None


def test_gpu_script_runs_its_cpu_path_end_to_end(tmp_path):
    """The script runs the interpreter it is given in $PYTHON (this one), so an unactivated venv works: PATH
    here holds no python at all."""
    bin_dir = tmp_path / "bin"  # PATH holds only what the script needs besides python
    bin_dir.mkdir()
    (bin_dir / "dirname").symlink_to(shutil.which("dirname"))
    env = {**os.environ, "PYTHON": sys.executable, "PATH": str(bin_dir)}
    result = subprocess.run([shutil.which("bash"), str(ROOT / "gpu_validation" / "run_on_gpu.sh"), str(tmp_path / "out"),
                             "--device", "cpu", "--quick"], capture_output=True, text=True, timeout=300, env=env)
    tmp_path = tmp_path / "out"
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert {p.name for p in tmp_path.iterdir()} == {"checks.csv", "bandwidth.csv", "llama-3-8b.json",
                                                    "llama-3-8b.csv", "whole_steps.csv", "host_transfers.csv"}
    whole = pd.read_csv(tmp_path / "whole_steps.csv")
    assert list(whole["kind"]) == ["decode", "decode", "prefill"] and (whole["whole_step_s"] > 0).all()
    assert whole["whole_over_composed"].to_numpy() == pytest.approx(
        (whole["whole_step_s"] / whole["composed_step_s"]).to_numpy(), rel=1e-4)
    checks = pd.read_csv(tmp_path / "checks.csv")
    assert checks["passed"].all() and {"reference", "flex"} <= set(checks["kernel"])
    assert {"float32", "bfloat16"} == set(checks["dtype"])
    summary = result.stdout[result.stdout.index("== kvsim GPU validation summary =="):]
    assert "checks: " in summary and "of copy" in summary and "calibration llama-3-8b on cpu" in summary
    assert "whole steps (eager)" in summary
    assert "host-to-device  link" in summary and "per block, eager" in summary


def test_gpu_script_needs_a_directory():
    result = subprocess.run(["bash", str(ROOT / "gpu_validation" / "run_on_gpu.sh")], capture_output=True,
                            text=True)
    assert result.returncode == 2 and "usage" in result.stderr
