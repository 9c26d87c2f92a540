"""The clock of a mixture of experts: a step reads the weights every token needs and, of the routed experts,
the share its tokens are expected to touch (`allocators.expert_routing`), so small-batch decode is cheaper
than reading the whole checkpoint, a large step reads nearly all of it, dense models do not change, the
decode runs' closed forms agree with stepping, and memory still holds every expert."""

from dataclasses import replace

import pytest

from allocators import catalog, roofline
from allocators.capacity import kv_capacity
from allocators.catalog import get_gpu, get_model
from sim.kernel.config import SimConfig
from sim.kernel.cost_profiles import make_step_cost
from tests.sim.summaries import assert_fast_forward_equals_stepping, mixed_prompts


def as_dense(name: str) -> catalog.ModelSpec:
    """The model with no experts declared: every step reads the whole checkpoint (kvsim's clock before)."""
    return replace(get_model(name), num_experts=0, num_experts_per_tok=0, expert_weight_bits=None)


def test_gpt_oss_batch_one_decode_reads_the_dense_part_and_four_of_32_experts():
    gpu = get_gpu("h100-80gb")
    model = get_model("gpt-oss-20b")
    moe, whole = make_step_cost(None, model, gpu), make_step_cost(None, as_dense("gpt-oss-20b"), gpu)
    bytes_s = moe.bandwidth_frac * gpu.hbm_bandwidth_gb_s * 1e9
    fixed, routed = roofline.step_weight_split(model)
    assert moe.weights_time(1) == pytest.approx((fixed + routed * 4 / 32) / bytes_s, rel=1e-12)
    before, after = whole.step_time(0, 1, 1000), moe.step_time(0, 1, 1000)
    # a memory-bound step: the 28 of 32 experts it does not read come off its time, nothing else
    assert before - after == pytest.approx(routed * 28 / 32 / bytes_s, rel=1e-9)
    assert after < 0.6 * before


def test_deepseek_v3_reads_nearly_everything_in_a_large_step():
    gpu = get_gpu("h200")
    moe = make_step_cost(None, get_model("deepseek-v3"), gpu, tensor_parallel=8)
    whole = make_step_cost(None, as_dense("deepseek-v3"), gpu, tensor_parallel=8)
    times = [moe.weights_time(t) for t in (1, 8, 30, 256, 2048)]
    assert times == sorted(times)
    assert times[0] < 0.1 * whole.weights_time(1)  # 8 of 256 experts and the rest
    assert times[-1] == pytest.approx(whole.weights_time(1), rel=1e-12)
    assert moe.step_time(2048, 0, 2048, attention_pairs=2048 * 2049 // 2) == pytest.approx(
        whole.step_time(2048, 0, 2048, attention_pairs=2048 * 2049 // 2), rel=1e-12)


@pytest.mark.parametrize("name", [n for n, m in catalog.MODELS.items() if not m.num_experts])
def test_dense_models_keep_their_weight_time(name):
    cost = make_step_cost(None, get_model(name), get_gpu("h100-80gb"))
    bytes_s = cost.bandwidth_frac * cost.gpu.hbm_bandwidth_gb_s * 1e9
    assert cost._t_routed == 0.0
    for tokens in (0, 1, 33, 8192):
        assert cost.weights_time(tokens) == roofline.weight_bytes(cost.model) / 1 / bytes_s


def test_a_moe_decode_run_in_closed_form_equals_its_steps():
    cost = make_step_cost(None, get_model("gpt-oss-20b"), get_gpu("h100-80gb"))
    for n, c0, k in ((1, 300, 50), (12, 4000, 80), (300, 90_000, 30)):
        steps = [cost.step_time(0, n, c0 + n * j) for j in range(k)]
        total, weighted = cost.decode_run(n, c0, k)
        assert total == pytest.approx(sum(steps), rel=1e-12)
        assert weighted == pytest.approx(sum(j * t for j, t in enumerate(steps)), rel=1e-12)
        assert cost.decode_prefix(n, c0)(k // 2) == pytest.approx(sum(steps[:k // 2]), rel=1e-12)



@pytest.mark.parametrize("options", [{}, {"kv_tokens": 3000}, {"max_num_batched_tokens": 256}])
def test_fast_forward_equals_step_by_step_on_a_moe_model(options):
    """gpt-oss-20b: batches grow and shrink, so the expert share changes from run to run but not inside one."""
    config = SimConfig(model="gpt-oss-20b", gpu="h100-80gb", **({"kv_tokens": 12_000} | options))
    assert_fast_forward_equals_stepping(config, mixed_prompts(40, 7, 0.05, (50, 600), (10, 200)))


def test_memory_still_holds_every_expert():
    for name in ("gpt-oss-20b", "deepseek-v3"):
        model = get_model(name)
        cap = kv_capacity(model, get_gpu("h200"), tensor_parallel=8)
        # every expert's slice (and DeepSeek's replicated weights whole: `ModelSpec.weight_bytes_per_gpu`)
        assert cap.weight_bytes_per_gpu == model.weight_bytes_per_gpu(8) == as_dense(name).weight_bytes_per_gpu(8)
        assert cap.weight_bytes_per_gpu >= model.weight_bytes / 8
