"""The ``python -m gpu_validation...`` commands and ``run_on_gpu.sh`` answer bad surroundings with one line and exit 2,
not a traceback: ``--device cuda`` where torch sees no CUDA device (the parser's line), and no torch at all (the
line ``kvsim calibrate`` prints)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gpu_validation import host_transfer, run_all, whole_step

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ["run_all", "host_transfer", "whole_step"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
@pytest.mark.parametrize("command", [run_all, host_transfer, whole_step])
def test_cuda_without_a_device_is_one_line(command, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        command.main([str(tmp_path / "out.csv"), "--device", "cuda"])
    assert info.value.code == 2
    assert capsys.readouterr().err.strip().endswith("error: --device cuda: torch sees no CUDA device")


@pytest.mark.parametrize(("command", "args", "line"), [
    # before: int()'s ValueError, a batch of 0 failing in torch.max, the catalog's KeyError: tracebacks
    (whole_step, ["--batches", "1,x"], "argument --batches: must be a positive integer, got 'x'"),
    (whole_step, ["--batches", "0"], "argument --batches: must be a positive integer, got '0'"),
    (whole_step, ["--models", "llama-3-8b,foo"], "argument --models: unknown model 'foo'; valid choices: opt-13b"),
    (host_transfer, ["--model", "foo"], "argument --model: unknown model 'foo'; valid choices: opt-13b"),
    # before: a tensor of negative size
    (host_transfer, ["--block-size", "-3"], "argument --block-size: must be a positive integer, got '-3'"),
    # before: the watchdog's timer raised ValueError (NaN) or OverflowError (inf)
    (run_all, ["--budget-s", "nan"], "--budget-s must be positive and at most 604800 s (a week), got nan"),
    (run_all, ["--budget-s", "inf"], "--budget-s must be positive and at most 604800 s (a week), got inf"),
])
def test_bad_options_are_one_line(command, args, line, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        command.main([str(tmp_path / "out"), "--device", "cpu", *args])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith(f"python -m {command.__name__}: error: {line}"), err
    assert not (tmp_path / "out").exists()


def test_whole_steps_refuse_a_model_too_big_before_timing_any(tmp_path, capsys, monkeypatch):
    """A model whose weights do not fit ended the run with a ValueError traceback, after the models before it
    were timed; now every model is checked first."""
    monkeypatch.setattr(whole_step, "free_bytes", lambda device: 10**9)  # llama-3-8b/16's 0.3 GB fit
    with pytest.raises(SystemExit) as info:
        whole_step.main([str(tmp_path / "out.csv"), "--device", "cpu", "--models", "llama-3-8b,llama-3-70b"])
    assert info.value.code == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.splitlines()[-1] == (
        "python -m gpu_validation.whole_step: error: argument --models: llama-3-70b/16: its weights (2.6 GB) do not "
        "fit in the 1.0 GB free on cpu")


@pytest.fixture
def without_torch(tmp_path) -> dict[str, str]:
    """An environment whose python cannot import torch: a ``torch`` module first on the path that fails as a
    missing one does (``sys.modules['torch'] = None`` cannot reach a ``python -m`` child)."""
    (tmp_path / "torch.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}


def assert_needs_torch(result: subprocess.CompletedProcess, command: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        f"Error: {command} needs torch (pip install 'kvsim[gpu]'): No module named 'torch'"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_without_torch_is_one_line(command, without_torch, tmp_path):
    result = subprocess.run([sys.executable, "-m", f"gpu_validation.{command}", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120, cwd=ROOT, env=without_torch)
    assert_needs_torch(result, f"python -m gpu_validation.{command}")


def test_gpu_script_without_torch_is_one_line(without_torch, tmp_path):
    result = subprocess.run([shutil.which("bash"), str(ROOT / "gpu_validation" / "run_on_gpu.sh"), str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120, env={**without_torch, "PYTHON": sys.executable})
    assert_needs_torch(result, "python -m gpu_validation.run_all")
    assert not (tmp_path / "out").exists()


def test_clock_check_reads_committed_transfers_without_torch(without_torch):
    """``benchmarks/gpu_clock_check.py --transfers`` only reads CSVs, as its other modes do: it imported the
    torch-bound `gpu_validation.host_transfer` for the link fit and died with a traceback without torch."""
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_clock_check.py"), "--transfers"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT, env=without_torch)
    assert result.returncode == 0, result.stderr
    assert "| host-to-device |" in result.stdout


def test_calibrate_without_torch_is_the_same_line(without_torch):
    result = subprocess.run([sys.executable, "-m", "sim", "calibrate", "--model", "llama-3-8b"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT, env=without_torch)
    assert_needs_torch(result, "kvsim calibrate")


def test_importing_a_command_without_torch_still_raises(without_torch):
    """Imported (as ``kvsim calibrate`` imports gpu_validation), a module passes the ImportError on for its
    importer to word, instead of ending the importer's process."""
    result = subprocess.run([sys.executable, "-c", "import gpu_validation.run_all"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT, env=without_torch)
    assert result.returncode == 1 and result.stderr.splitlines()[-1] == "ModuleNotFoundError: No module named 'torch'"
