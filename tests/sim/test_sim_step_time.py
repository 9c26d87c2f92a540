"""Absolute step times of one known configuration, pinned: the relative tests (paged against contiguous,
fast-forward against step-by-step) all pass if every step loses its per-step overhead or a roofline term, so
only figures like these can tell. When a cost profile's coefficients change on purpose, re-measure and update
`PINNED` (and the README's quoted figures, `tests/docs/test_readme_figures.py`) in the same change."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from allocators.catalog import get_gpu, get_model
from sim.cli import main
from sim.kernel.cost_model import StepCostModel
from sim.kernel.cost_profiles import DEFAULT_PROFILE, make_step_cost

PINNED = {
    # OPT-13B on an A100-40GB, paged blocks of 16, the default cost profile (vllm-v1: 1.8 ms step overhead)
    "decode 8 sequences x 500 tokens": 0.024472400728315198,
    "prefill 512 tokens": 0.0708701806142481,
    "prefill 2048 tokens": 0.26306538704460336,
    # `kvsim run` of one request, 512 prompt + 11 output tokens: its first token after the prefill step, its
    # end after ten more decode steps
    "run: ttft": 0.07139059857850606,
    "run: e2e": 0.29207608844795174,
    # the same decode step under StepCostModel's own defaults (the paper-era roofline, 3 ms step overhead)
    "roofline decode 8 sequences x 500 tokens": 0.026825332475884246,
}


def default_model() -> StepCostModel:
    return make_step_cost(None, get_model("opt-13b"), get_gpu("a100-40gb"), block_size=16, paged=True)


def test_step_times_are_the_pinned_figures():
    m = default_model()
    assert m.source == f"profile {DEFAULT_PROFILE}"
    assert m.step_time(0, 8, 8 * 500) == pytest.approx(PINNED["decode 8 sequences x 500 tokens"], rel=1e-12)
    assert m.step_time(512, 0, 512) == pytest.approx(PINNED["prefill 512 tokens"], rel=1e-12)
    assert m.step_time(2048, 0, 2048) == pytest.approx(PINNED["prefill 2048 tokens"], rel=1e-12)
    roofline = StepCostModel(model=get_model("opt-13b"), gpu=get_gpu("a100-40gb"), block_size=16, paged=True)
    assert roofline.step_time(0, 8, 4000) == pytest.approx(PINNED["roofline decode 8 sequences x 500 tokens"],
                                                           rel=1e-12)


def test_the_step_overhead_is_in_every_step():
    """The default profile's per-step overhead is part of every step: without it the step is that much shorter."""
    m = default_model()
    assert m.step_overhead_s > 0
    bare = dataclasses.replace(m, step_overhead_s=0.0)
    assert m.step_time(0, 8, 4000) - bare.step_time(0, 8, 4000) == pytest.approx(m.step_overhead_s, rel=1e-9)


def test_a_one_request_run_takes_the_pinned_time(tmp_path):
    trace = tmp_path / "one.csv"
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,512,11\n")
    result = CliRunner().invoke(main, ["run", str(trace), "--model", "opt-13b", "--gpu", "a100-40gb",
                                       "--kv-gib", "12", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["cost_model"] == f"profile {DEFAULT_PROFILE}"
    assert summary["ttft_p50_s"] == pytest.approx(PINNED["run: ttft"], rel=1e-12)
    assert summary["e2e_p50_s"] == pytest.approx(PINNED["run: e2e"], rel=1e-12)
