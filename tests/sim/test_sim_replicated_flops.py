"""The FLOPs of the layers vLLM keeps whole on every tensor-parallel GPU (catalog ``replicated_params``:
DeepSeek's fused q_a / kv_a projection, MoE routers, norms and V3.2's lightning indexer): each GPU runs them for
every token of the step, so a token's linear FLOPs per GPU are ``2 x ((active - replicated) / tp + replicated)``,
not ``2 x active / tp``. Checked: the per-GPU figure, a compute-bound prefill step, models without the field bit
for bit as before, and the closed-form decode runs (fast-forward) equal to stepping at 16 GPUs."""

from dataclasses import replace

import pytest

from allocators import catalog, roofline
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import StepCostModel
from tests.sim.summaries import assert_fast_forward_equals_stepping, mixed_prompts

H100 = catalog.get_gpu("h100-80gb")
FLOPS_S = 0.6 * H100.bf16_tflops * 1e12


@pytest.mark.parametrize(("name", "per_gpu"), [("deepseek-v3", 6_557_974_400.0),
                                               ("deepseek-v3.2", 8_261_024_128.0)])
def test_each_gpu_does_its_share_of_the_split_layers_and_all_the_replicated(name, per_gpu):
    m = catalog.get_model(name)
    assert roofline.token_flops_per_gpu(m, 16) == 2 * ((m.active_params - m.replicated_params) / 16
                                                       + m.replicated_params) == per_gpu
    # 4.63 (V3) and 4.73 (V3.2) GFLOP a token when every layer was split: 1.93 and 3.53 more on each GPU
    assert per_gpu - roofline.token_flops(m) / 16 == pytest.approx(2 * m.replicated_params * 15 / 16)
    assert roofline.token_flops_per_gpu(m, 1) == roofline.token_flops(m)


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v3.2"])
def test_a_large_prefill_step_is_compute_bound_on_the_replicated_layers_too(name):
    m = catalog.get_model(name).with_kv_cache_dtype("fp8")
    cost = StepCostModel(model=m, gpu=H100, block_size=64, tensor_parallel=16)
    tokens, pairs = 8192, 8192 * 8193 // 2
    compute = tokens * roofline.token_flops_per_gpu(m, 16) + pairs * roofline.pair_flops(m) / 16
    if m.sparse_attention:  # attention over the top 2,048 keys a query; the replicated indexer over every key
        top = 2048 * 2049 // 2 + (tokens - 2048) * 2048
        compute += (top - pairs) * roofline.pair_flops(m) / 16 + pairs * roofline.index_pair_flops(m)
        step = cost.step_time(tokens, 0, tokens, attention_pairs=pairs, window_context=tokens, window_pairs=top)
    else:
        step = cost.step_time(tokens, 0, tokens, attention_pairs=pairs)
    assert step == pytest.approx(0.003 + compute / FLOPS_S, rel=1e-12)


@pytest.mark.parametrize("name", [n for n, m in catalog.MODELS.items() if m.replicated_params is None])
def test_models_without_replicated_params_divide_exactly_as_before(name):
    m = catalog.get_model(name)
    for tp in (1, 2, 8, 16):
        assert roofline.token_flops_per_gpu(m, tp) == roofline.token_flops(m) / tp  # bit for bit
        cost = StepCostModel(model=m, gpu=H100, tensor_parallel=tp)
        assert cost._t_token_flops == roofline.token_flops(m) / tp / FLOPS_S


@pytest.fixture
def compute_bound(monkeypatch):
    """DeepSeek-V3.2 with a top-k of 200 (decoders pass it mid-run) and every active parameter replicated, so
    at 16 GPUs decode steps of some 150 sequences or more (which read nearly every expert) are compute-bound on
    the replicated FLOPs."""
    base = catalog.MODELS["deepseek-v3.2"]
    model = replace(base, name="test-replicated-200", index_topk=200, replicated_params=base.active_params)
    monkeypatch.setitem(catalog.MODELS, model.name, model)
    return model.name


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v3.2"])
def test_fast_forward_equals_stepping_at_16_gpus(name):
    config = SimConfig(model=name, gpu="h100-80gb", tensor_parallel=16, kv_cache_dtype="fp8", block_size=64,
                       kv_tokens=40_000)
    assert_fast_forward_equals_stepping(config, mixed_prompts())


def test_fast_forward_equals_stepping_when_the_replicated_flops_bound_decode(compute_bound):
    config = SimConfig(model=compute_bound, gpu="h100-80gb", tensor_parallel=16, kv_cache_dtype="fp8",
                       block_size=64, kv_tokens=120_000)
    m = catalog.get_model(compute_bound).with_kv_cache_dtype("fp8")
    cost = StepCostModel(model=m, gpu=H100, block_size=64, tensor_parallel=16)
    small, large = cost._decode_lines(40, 40 * 300), cost._decode_lines(200, 200 * 300)
    assert small[0] < small[2] and large[0] > large[2]  # compute against memory at j = 0: both regimes
    assert_fast_forward_equals_stepping(config, mixed_prompts(count=300, gap_s=0.0005))
