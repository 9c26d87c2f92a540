"""The step-cost model: closed-form decode runs against step-by-step sums, and the calibration file."""

import json

import pytest

from allocators.catalog import get_gpu, get_model
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import CalibratedStepCost, ConstantStepCost, StepCostModel, kernel_overhead

MODEL, GPU = get_model("opt-13b"), get_gpu("a100-40gb")


@pytest.mark.parametrize("n,c0,k", [(1, 10, 7), (30, 5000, 200), (256, 400_000, 50), (200, 100, 1000)])
def test_decode_run_matches_the_sum_of_steps(n, c0, k):
    cost = StepCostModel(MODEL, GPU)
    durations = [cost.step_time(0, n, c0 + n * j) for j in range(k)]
    total, weighted = cost.decode_run(n, c0, k)
    assert total == pytest.approx(sum(durations), rel=1e-12)
    assert weighted == pytest.approx(sum(j * d for j, d in enumerate(durations)), rel=1e-12)
    starts = [sum(durations[:m]) for m in range(k)]
    horizon = starts[k // 2] + 1e-9
    assert cost.steps_starting_before(n, c0, k, horizon) == k // 2 + 1


def test_roofline_magnitudes():
    cost = StepCostModel(MODEL, GPU)
    decode = cost.step_time(0, 1, 500)  # memory bound: 26 GB of weights at 0.8 x 1555 GB/s, plus overhead
    assert 0.020 < decode < 0.030
    prefill = cost.step_time(2048, 0, 2048, attention_pairs=2048 * 2049 // 2)  # compute bound
    assert 0.25 < prefill < 0.35
    assert cost.step_time(0, 0, 0) == 0.0
    paged = StepCostModel(MODEL, GPU, paged=True).step_time(0, 100, 200_000)
    contiguous = StepCostModel(MODEL, GPU, paged=False).step_time(0, 100, 200_000)
    assert paged > contiguous
    half = StepCostModel(MODEL, GPU, tensor_parallel=2)
    assert half.step_time(0, 8, 4000) < cost.step_time(0, 8, 4000)
    assert cost.step_time(0, 8, 4000, swap_blocks=10) > cost.step_time(0, 8, 4000, copies=10)


def test_kernel_overhead_interpolates_between_block_sizes():
    table = {8: 1.3, 32: 1.1}
    assert kernel_overhead(table, 16) == pytest.approx(1.2)
    assert kernel_overhead(table, 4) == 1.3 and kernel_overhead(table, 64) == 1.1


def test_constant_step_cost():
    cost = ConstantStepCost(0.05)
    assert cost.step_time(100, 3, 1000) == 0.05
    assert cost.decode_run(5, 100, 4) == pytest.approx((0.2, 0.05 * 6))
    assert cost.steps_starting_before(5, 100, 10, 0.12) == 3


def test_calibration_file(tmp_path):
    path = tmp_path / "cal.json"
    data = {"format": "kvsim-calibration", "version": 1, "gpu": "a100-40gb", "model": "opt-13b",
            "coefficients": {"bandwidth_frac": 0.5, "flops_frac": 0.5, "step_overhead_s": 0.01,
                             "paged_kernel_overhead": {"16": 1.5}}}
    path.write_text(json.dumps(data))
    cost = CalibratedStepCost.from_file(path, MODEL, GPU)
    assert cost.bandwidth_frac == 0.5 and cost.paged_kernel_overhead == {16: 1.5}
    assert cost.step_time(0, 1, 10) > StepCostModel(MODEL, GPU).step_time(0, 1, 10)
    del data["coefficients"]["flops_frac"]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="flops_frac"):
        CalibratedStepCost.from_file(path, MODEL, GPU)
    with pytest.raises(ValueError, match="not a kvsim calibration"):
        path.write_text("[]")
        CalibratedStepCost.from_file(path, MODEL, GPU)


@pytest.mark.parametrize("bad", [dict(block_size=0), dict(scheduler="fifo"), dict(preemption="drop"),
                                 dict(kv_gib=1.0, kv_tokens=5), dict(max_num_seqs=4096), dict(watermark=1.5),
                                 dict(trace="a.csv", preset="alpaca-paper"), dict(gpu_memory_utilization=0)])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        SimConfig(**bad)


def test_config_round_trips():
    config = SimConfig(allocator="contiguous-max", kv_gib=12.0, rate=2.0)
    assert SimConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown"):
        SimConfig.from_dict({"allocatr": "paged"})
