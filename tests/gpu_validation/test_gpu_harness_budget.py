"""Review fixes in gpu_validation: the GPU script survives a failing stage and keeps to its time budget, and
the Triton helpers decide by the tensors' device rather than by whether the machine has a GPU."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from allocators.catalog import get_model
from gpu_validation import checks, run_all
from gpu_validation.checks import run_checks
from gpu_validation.features import scaled_model
from gpu_validation.harness import Grid, run_harness
from gpu_validation.triton_paged import choose_num_splits, triton_available

ROOT = Path(__file__).resolve().parents[2]


def test_split_count_follows_the_tensors_device_not_the_machine(monkeypatch):
    # a CPU run on a GPU machine used to ask the GPU for its multiprocessors (and crash without one)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert choose_num_splits(torch.device("cpu"), 1, 1, 10_000, 64) == 2
    assert choose_num_splits(torch.device("cpu"), 1, 1, 100, 64) == 1


def test_triton_runs_on_cpu_tensors_only_under_the_interpreter(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert triton_available("cuda") and triton_available() and not triton_available("cpu")
    assert "triton" not in checks.available_kernels(torch.device("cpu"), compile_flex=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert triton_available("cpu")


def test_checks_past_their_deadline_are_counted_not_run():
    frame = run_checks("cpu", block_sizes=(16,), kernels=["reference"], deadline=time.monotonic() - 1)
    assert len(frame) == 0 and frame.attrs["skipped"] == 3 * 2 * 2  # scenarios x dtypes x query lengths
    assert list(frame.columns) == ["kernel", "scenario", "dtype", "rel_error", "tolerance", "passed", "note"]


def test_a_scenario_that_cannot_be_built_fails_its_checks_and_the_rest_run(monkeypatch):
    def broken(allocator="paged-cow", **options):
        raise RuntimeError("no room")

    monkeypatch.setattr(checks, "allocator_scenario", broken)
    frame = run_checks("cpu", dtypes=(torch.float32,), block_sizes=(16,), kernels=["reference"])
    bad = frame[frame.scenario.str.startswith("paged")]
    assert len(bad) == 4 and not bad.passed.any()  # paged-cow and paged, two query lengths each
    assert bad.note.str.contains("building the scenario failed: RuntimeError: no room").all()
    assert set(bad.scenario) == {"paged-cow bs=16 q_len=1", "paged-cow bs=16 q_len=7", "paged bs=16 q_len=1",
                                 "paged bs=16 q_len=7"}
    assert frame[frame.scenario.str.startswith("random")].passed.all()


def test_harness_stops_at_its_deadline():
    grid = Grid((1,), (64,), (16,), (16,), (0,), warmup=0, repeats=1)
    model = scaled_model(get_model("llama-3-8b"), 8)
    with pytest.raises(TimeoutError, match="after 1 of 2 calibration steps"):
        run_harness(model, grid, device="cpu", dtype=torch.float32, deadline=time.monotonic() - 1)


def test_a_failing_stage_is_reported_and_the_next_one_runs(monkeypatch, tmp_path, capsys):
    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(run_all, "run_checks", boom)
    monkeypatch.setattr(run_all, "calibrate", boom)
    assert run_all.main([str(tmp_path), "--device", "cpu", "--quick"]) == 1
    out = capsys.readouterr().out
    assert "checks did not complete: RuntimeError: boom" in out
    assert "calibration did not complete: RuntimeError: boom" in out
    assert "of copy" in out  # the bandwidth point still ran
    assert {p.name for p in tmp_path.iterdir()} == {"bandwidth.csv", "whole_steps.csv", "host_transfers.csv"}


def test_summary_leaves_out_the_flex_ratio_when_flex_was_not_timed():
    row = {"batch_size": 4, "context_len": 256, "block_size": 16, "dtype": "float32", "kv_bytes": 1e6,
           "copy_gb_s": 10.0}
    bandwidth = pd.DataFrame([
        {**row, "kernel": "reference", "seconds": 1e-3, "bandwidth_gb_s": 1.0, "share_of_copy": 0.1, "error": ""},
        {**row, "kernel": "flex", "seconds": float("nan"), "bandwidth_gb_s": float("nan"),
         "share_of_copy": float("nan"), "error": "time budget spent"},
    ])
    text = run_all.summary(None, None, bandwidth, {})
    assert "x flex" not in text and "flex           not timed: time budget spent" in text
    assert not run_all.complete(None, bandwidth, {})


def test_kernels_left_unchecked_are_said(monkeypatch):
    """Without the Triton interpreter on CPU the Triton kernels cannot run: the summary says so (on a GPU the run
    counts as incomplete instead), where it once printed 24/24 passed and nothing about them."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    unchecked = run_all.triton_unchecked("cpu")
    assert unchecked.startswith("the Triton kernels were not checked or timed here (")
    assert run_all.summary(None, None, None, {}, unchecked=unchecked).endswith(f"triton: {unchecked}")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert (run_all.triton_unchecked("cpu") is None) == triton_available("cpu")


def test_watchdog_ends_a_hung_run(tmp_path):
    code = ("import time, sys; from gpu_validation import run_all; "
            "run_all.WATCHDOG_GRACE_S = 0.5; run_all.run_checks = lambda *a, **k: time.sleep(60); "
            f"sys.exit(run_all.main([{str(tmp_path)!r}, '--device', 'cpu', '--budget-s', '0.5']))")
    t0 = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "Timeout" in result.stderr
    assert time.monotonic() - t0 < 30
