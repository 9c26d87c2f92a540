"""docs/validation.md quotes what `benchmarks/gpu_clock_check.py` prints for the committed H200 run: the table
is compared with a fresh run of the script, so a profile or cost-model change that moves a number fails here,
and the figures in the prose around it are read off the committed measurements."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "validation.md").read_text()
RUN = ROOT / "benchmarks" / "gpu" / "h200-2026-12-04"


def quoted_table() -> list[str]:
    start = PAGE.index("| steps | n | vllm-v1 |")
    return PAGE[start:].split("\n\n")[0].splitlines()


def test_the_gpu_table_is_what_the_check_prints(capsys):
    runpy.run_path(str(ROOT / "benchmarks" / "gpu_clock_check.py"))["main"]([])
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert printed == quoted_table()


@pytest.mark.parametrize("run,checks", [("eager", 112), ("cuda-graph", 112)])
def test_every_gpu_check_passed_as_the_page_says(run, checks):
    frame = pd.read_csv(RUN / run / "checks.csv")
    assert len(frame) == checks and frame.passed.all()
    assert f"{checks}/{checks} checks in both runs" in PAGE


def test_the_quoted_coefficients_are_the_committed_tables():
    full = json.loads((RUN / "cuda-graph" / "llama-3-8b-full.json").read_text())
    c = full["coefficients"]
    assert full["timing"] == "cuda-graph" and full["fit"]["points"] == 114
    assert f"flops_frac {c['flops_frac']:.3f}" in PAGE and f"step_overhead_s {c['step_overhead_s'] * 1e3:.2f} ms" in PAGE
    eager = json.loads((RUN / "eager" / "llama-3-8b.json").read_text())
    assert f"{eager['coefficients']['step_overhead_s'] * 1e3:.2f} ms of it in the per-step constant" in PAGE
