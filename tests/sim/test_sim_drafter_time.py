"""A model-based drafter's GPU time (`StepCostModel.drafter_time`): its passes priced by the roofline's own terms,
scaled to the drafter's layers, plus the LM head each pass reads."""

import pytest

from allocators.catalog import get_gpu, get_model
from sim.kernel.cost_model import ConstantStepCost, StepCostModel


def _model() -> StepCostModel:
    return StepCostModel(get_model("llama-2-7b"), get_gpu("h100-80gb"))


def test_a_drafter_as_deep_as_the_model_costs_a_decode_step_and_the_lm_head():
    """A memory-bound decode of 8 sequences over 8,000 tokens: one pass of all 32 layers is the step's memory
    time (the step less its fixed overhead) plus the LM head's weights read once more."""
    cost, m = _model(), get_model("llama-2-7b")
    step = cost.step_time(0, 8, 8000) - cost.step_overhead_s
    head = m.vocab_size * m.hidden_size * m.dtype_bytes / (cost.bandwidth_frac * cost.gpu.hbm_bandwidth_gb_s * 1e9)
    assert cost.drafter_time(8, 8000, 8000, 8, 8000, passes=1, layers=32) == pytest.approx(step + head)


def test_an_eagle_layer_costs_a_layers_share_per_pass():
    """One layer: 1/32 of the layers' terms plus the LM head; k passes: the first over the step's tokens, the
    rest over one token of each drafting request."""
    cost, m = _model(), get_model("llama-2-7b")
    head = m.vocab_size * m.hidden_size * m.dtype_bytes / (cost.bandwidth_frac * cost.gpu.hbm_bandwidth_gb_s * 1e9)
    step = cost.step_time(0, 8, 8000) - cost.step_overhead_s
    one = cost.drafter_time(8, 8000, 8000, 8, 8000, passes=1, layers=1)
    assert one == pytest.approx(step / 32 + head)
    assert cost.drafter_time(8, 8000, 8000, 8, 8000, passes=3, layers=1) == pytest.approx(3 * one)
    assert cost.drafter_time(8, 8000, 8000, 0, 0, passes=3, layers=1) == 0.0  # nobody drafts
    assert cost.drafter_time(8, 8000, 8000, 8, 8000, passes=3, layers=0) == 0.0  # ngram


def test_a_given_step_time_includes_drafting():
    assert ConstantStepCost(0.01).drafter_time(8, 80, 80, 8, 80, passes=3, layers=1) == 0.0
