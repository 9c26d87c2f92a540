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


@pytest.mark.parametrize("run", ["eager", "cuda-graph", "whole-step", "full", "final-full"])
def test_every_gpu_check_passed_as_the_page_says(run):
    frame = pd.read_csv(RUN / run / "checks.csv")
    assert len(frame) == 112 and frame.passed.all()
    assert "112/112 checks in all five full runs" in PROSE


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


def test_the_transfer_tables_are_what_the_check_prints(capsys):
    runpy.run_path(str(ROOT / "benchmarks" / "gpu_clock_check.py"))["main"](["--transfers"])
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    quoted = [line for line in PAGE.split("### KV over PCIe")[1].split("\n## ")[0].splitlines() if line.startswith("|")]
    assert printed == quoted and len(printed) == 4 + 18 + 14


def test_the_copy_latency_is_the_measured_fixed_part_of_a_block_copy():
    """`swap_copy_latency_s` is what a block copy launched by a C++ loop costs beyond its bytes at the catalog's
    PCIe bandwidth, averaged over both runs, four block shapes and both directions; each run's mean, and the
    graph floor's, are what the page says."""
    from allocators.catalog import get_gpu
    from sim.kernel.cost_model import StepCostModel

    frames = [pd.read_csv(path).assign(run=path.parent.name)
              for path in sorted((RUN / "host-transfers").glob("run*/host_transfers_*.csv"))]
    copies = pd.concat(frames, ignore_index=True).query("pattern == 'per-block' and copies == 4096")
    fixed = copies.seconds_per_copy - copies.bytes_per_copy / (get_gpu("h200").pcie_gb_s * 1e9)
    loop = fixed[copies.timing == "foreach"]
    default = StepCostModel.__dataclass_fields__["swap_copy_latency_s"].default
    assert len(loop) == 16 and default == pytest.approx(loop.mean(), abs=0.05e-6)
    by_run = (loop.groupby(copies.run).mean() * 1e6).round(1).tolist()
    floor = (fixed[copies.timing == "cuda-graph"].groupby(copies.run).mean() * 1e6).round(1).tolist()
    assert f"averaged {by_run[0]} us in the first and {by_run[1]} us in the second; the floor {floor[0]} us in both" in PROSE
    assert floor[0] == floor[1]
    assert f"{default * 1e6:.1f} us on average over both runs and directions" in PROSE
    assert f"now `swap_copy_latency_s` ({default * 1e6:.1f} us)" in PROSE
