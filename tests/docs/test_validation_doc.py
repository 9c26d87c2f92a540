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
PROSE = " ".join(PAGE.split())  # the page's words, line breaks as spaces
RUN = ROOT / "benchmarks" / "gpu" / "h200-2026-12-04"


def quoted_tables() -> list[list[str]]:
    """Every table on the page whose header starts as the check's does, in page order."""
    parts = PAGE.split("| steps | n | vllm-v1 |")[1:]
    return [("| steps | n | vllm-v1 |" + part).split("\n\n")[0].splitlines() for part in parts]


@pytest.mark.parametrize("argv,which", [([], 0), (["--whole-steps"], 1)])
def test_the_gpu_tables_are_what_the_check_prints(argv, which, capsys):
    runpy.run_path(str(ROOT / "benchmarks" / "gpu_clock_check.py"))["main"](argv)
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert len(quoted_tables()) == 2 and printed == quoted_tables()[which]


@pytest.mark.parametrize("run", ["eager", "cuda-graph", "whole-step"])
def test_every_gpu_check_passed_as_the_page_says(run):
    frame = pd.read_csv(RUN / run / "checks.csv")
    assert len(frame) == 112 and frame.passed.all()
    assert "112/112 checks in all three runs" in PROSE


def test_the_quoted_whole_step_ratios_are_the_committed_ones():
    whole = pd.read_csv(RUN / "whole-step" / "whole_steps.csv").groupby("kind")["whole_over_composed"]
    low, high = whole.min(), whole.max()
    assert f"Decode steps run at {low['decode']:.2f}-{high['decode']:.2f} of their composition" in PROSE
    assert f"prefill chunks at {low['prefill']:.2f}-{high['prefill']:.2f}" in PROSE


def test_the_quoted_coefficients_are_the_committed_tables():
    full = json.loads((RUN / "cuda-graph" / "llama-3-8b-full.json").read_text())
    c = full["coefficients"]
    assert full["timing"] == "cuda-graph" and full["fit"]["points"] == 114
    assert f"flops_frac {c['flops_frac']:.3f}" in PROSE and f"step_overhead_s {c['step_overhead_s'] * 1e3:.2f} ms" in PROSE
    eager = json.loads((RUN / "eager" / "llama-3-8b.json").read_text())
    assert f"{eager['coefficients']['step_overhead_s'] * 1e3:.2f} ms of it in the per-step constant" in PROSE


def test_the_models_slope_is_what_the_check_prints(capsys):
    runpy.run_path(str(ROOT / "benchmarks" / "gpu_clock_check.py"))["main"](["--models"])
    printed = capsys.readouterr().out.split("\n", 2)[2].strip()
    assert printed in PAGE
    assert "0.90 of the data sheet's 4.8 TB/s, intercept 1.43 ms" in printed
