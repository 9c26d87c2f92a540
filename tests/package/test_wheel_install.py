"""The built wheel works on its own: installed (not editable) into a fresh virtual environment and run from
another folder, kvsim finds its presets' data and its calibration tables inside the installed package.

Guards against data read from the checkout: before the data became package data, a wheel shipped no trace
samples (the trace presets failed) and no calibration tables (``--gpu cpu`` silently ran uncalibrated), and
the presets looked for ``../shared/traces`` beside the source tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "allocators", "workloads", "sim", "gpu_validation")

pytestmark = pytest.mark.slow


def sh(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv (deps from this environment) holding only the wheel built from a copy of the sources."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", base / "dist", src,
       cwd=base)
    wheel = next((base / "dist").glob("kvsim-*.whl"))
    env_dir = base / "venv"
    sh(sys.executable, "-m", "venv", "--system-site-packages", env_dir, cwd=base)
    sh(env_dir / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel, cwd=base)
    return env_dir


def kvsim(venv: Path, *args: str) -> dict:
    """``kvsim ARGS --json`` run from an empty folder, without the checkout on any path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KVSIM_TRACES", "KVSIM_SHARED_TRACES")}
    env["KVSIM_HOME"] = str(venv.parent / "home")
    elsewhere = venv.parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    return json.loads(sh(venv / "bin" / "kvsim", *args, "--json", cwd=elsewhere, env=env))


def test_the_venv_imports_the_wheel_not_the_checkout(venv):
    code = "import sim, workloads; print(sim.__file__); print(workloads.__file__)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for line in sh(venv / "bin" / "python", "-c", code, cwd=venv.parent, env=env).split():
        assert Path(line).is_relative_to(venv), line


def test_compare_and_the_paper_preset(venv):
    compare = kvsim(venv, "compare")
    assert compare, "compare printed nothing"
    paper = kvsim(venv, "run", "--preset", "sharegpt-paper")
    assert paper["workload"] == "sharegpt-paper" and paper["completed"] > 0


def test_presets_read_the_shipped_samples(venv):
    for preset in ("sharegpt-etalon", "azure-conv"):
        result = kvsim(venv, "run", "--preset", preset, "--num-requests", "300", "--model", "llama-3-8b")
        assert result["requests"] == 300 and result["completed"] > 0
        assert "shipped 2000-row sample workloads/data/traces/" in result["workload_source"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KVSIM_TRACES", "KVSIM_SHARED_TRACES")}
    path, full = sh(venv / "bin" / "python", "-c",
                    "from workloads.presets import trace_file; p, f = trace_file('azure-conv'); print(p, f)",
                    cwd=venv.parent, env=env).split()
    assert Path(path).is_relative_to(venv) and full == "False", path  # the wheel's own sample, not the checkout's


def test_calibration_tables_ship_in_the_package(venv):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    shipped = sh(venv / "bin" / "python", "-c",
                 "from sim.kernel.calibration_store import SHIPPED_DIR; print(SHIPPED_DIR / 'cpu' / 'llama-3-8b.json')",
                 cwd=venv.parent, env=env).strip()
    assert Path(shipped).is_file() and Path(shipped).is_relative_to(venv)
    explicit = kvsim(venv, "run", "--calibration", shipped, "--gpu", "cpu", "--model", "llama-3-8b",
                     "--num-requests", "100")
    found = kvsim(venv, "run", "--gpu", "cpu", "--model", "llama-3-8b", "--num-requests", "100")
    for result in (explicit, found):
        assert result["cost_model"].startswith("calibrated"), result["cost_model"]
        assert result["cost_profile"] == shipped
