"""Absolute step times of one known configuration, pinned: the relative tests (paged against contiguous,
fast-forward against step-by-step) all pass if every step loses its per-step overhead or a roofline term, so
only figures like these can tell. When the cost model's defaults change on purpose, re-measure and update
`PINNED` (and the README's quoted figures, `tests/test_readme_figures.py`) in the same change."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from allocators.catalog import get_gpu, get_model
from sim.cli import main
from sim.cost_model import StepCostModel

PINNED = {
    # OPT-13B on an A100-40GB, paged blocks of 16, default roofline coefficients (3 ms step overhead)
    "decode 8 sequences x 500 tokens": 0.026825332475884246,
    "prefill 512 tokens": 0.07329283883760684,
    "prefill 2048 tokens": 0.28417135535042737,
    # `kvsim run` of one request, 512 prompt + 11 output tokens: its first token after one prefill step
    # (plus the step that samples it), its end after ten more decode steps
    "run: ttft": 0.07386529859829061,
    "run: e2e": 0.31455293846967325,
}


def model() -> StepCostModel:
    return StepCostModel(model=get_model("opt-13b"), gpu=get_gpu("a100-40gb"), block_size=16, paged=True)


def test_step_times_are_the_pinned_figures():
    m = model()
    assert m.step_time(0, 8, 8 * 500) == pytest.approx(PINNED["decode 8 sequences x 500 tokens"], rel=1e-12)
    assert m.step_time(512, 0, 512) == pytest.approx(PINNED["prefill 512 tokens"], rel=1e-12)
    assert m.step_time(2048, 0, 2048) == pytest.approx(PINNED["prefill 2048 tokens"], rel=1e-12)


def test_the_step_overhead_is_in_every_step():
    """3 ms of every step are the per-step overhead: without it the decode step is exactly 3 ms shorter."""
    bare = StepCostModel(model=get_model("opt-13b"), gpu=get_gpu("a100-40gb"), block_size=16, paged=True,
                         step_overhead_s=0.0)
    assert model().step_overhead_s == 0.003
    assert model().step_time(0, 8, 4000) - bare.step_time(0, 8, 4000) == pytest.approx(0.003, rel=1e-9)


def test_a_one_request_run_takes_the_pinned_time(tmp_path):
    trace = tmp_path / "one.csv"
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,512,11\n")
    result = CliRunner().invoke(main, ["run", str(trace), "--model", "opt-13b", "--gpu", "a100-40gb",
                                       "--kv-gib", "12", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["cost_model"] == "roofline (default coefficients)"
    assert summary["ttft_p50_s"] == pytest.approx(PINNED["run: ttft"], rel=1e-12)
    assert summary["e2e_p50_s"] == pytest.approx(PINNED["run: e2e"], rel=1e-12)
