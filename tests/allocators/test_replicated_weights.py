"""Weights vLLM keeps whole on every tensor-parallel GPU (catalog ``replicated_weights_gib``): DeepSeek's fused
q_a / kv_a projection, MoE routers, norms and, in V3.2, the sparse indexer. Each GPU holds them whole beside its
share of the rest, so the KV pool of a 16-GPU deployment is that much smaller, and the clock reads them whole."""

import pytest

from allocators.capacity import NON_TORCH_RESERVE_BYTES, activation_reserve_bytes, kv_capacity
from allocators.catalog import GIB, MODELS, ModelSpec, get_gpu, get_model
from allocators.catalog_file import load_catalog_file
from sim.kernel.cost_model import StepCostModel

V3, V32, H100 = get_model("deepseek-v3"), get_model("deepseek-v3.2"), get_gpu("h100-80gb")
# vLLM 0.33's replicated layers, by shape (model_executor/models/deepseek_v2.py, models/deepseek_v32/attention.py)
QKV_A = 7168 * (1536 + 576) + 17 * 56 * 4  # DeepSeekV2FusedQkvAProjLinear, disable_tp: FP8 + FP32 block scales
NORMS = (7168 + 7168 + 1536 + 512) * 2  # input, post-attention, q_a and kv_a RMSNorms, BF16
ROUTER = 7168 * 256 * 2 + 256 * 4  # GateLinear (a ReplicatedLinear), BF16, and its FP32 e_score_correction_bias
INDEXER = 1536 * 8192 + 12 * 64 * 4 + 7168 * (128 + 64) * 2 + 2 * 128 * 4  # wq_b FP8, wk_weights_proj BF16, k_norm
V3_REPLICATED = 61 * (QKV_A + NORMS) + 58 * ROUTER + 7168 * 2


def test_the_catalog_counts_what_vllm_builds_replicated():
    assert V3.replicated_weight_bytes == pytest.approx(V3_REPLICATED, abs=1e-3) and V3_REPLICATED == 1_138_633_568
    assert V32.replicated_weight_bytes == pytest.approx(V3_REPLICATED + 61 * INDEXER, abs=1e-3)
    assert V32.replicated_weight_bytes - V3.replicated_weight_bytes == pytest.approx(
        V32.weight_bytes - V3.weight_bytes)  # the whole indexer is replicated


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v3.2"])
def test_each_gpu_holds_its_share_of_the_split_weights_and_all_the_replicated(name):
    m = get_model(name)
    assert m.weight_bytes_per_gpu(1) == m.weight_bytes
    assert m.weight_bytes_per_gpu(16) == pytest.approx((m.weight_bytes - m.replicated_weight_bytes) / 16
                                                       + m.replicated_weight_bytes)
    assert m.weight_bytes_per_gpu(16) > m.weight_bytes / 16 + 0.99 * m.replicated_weight_bytes * 15 / 16


@pytest.mark.parametrize("name", [n for n, m in MODELS.items() if m.replicated_weights_gib is None])
def test_models_without_replicated_weights_divide_exactly_as_before(name):
    m = get_model(name)
    for tp in (1, 2, 8, 16):
        assert m.weight_bytes_per_gpu(tp) == m.weight_bytes / tp  # bit for bit


@pytest.mark.parametrize(("name", "tokens"), [("deepseek-v3", 942_696), ("deepseek-v3.2", 669_610)])
def test_the_16_gpu_pool_is_smaller_by_the_replicated_weights(name, tokens):
    m = get_model(name)
    cap = kv_capacity(m, H100, tensor_parallel=16, kv_cache_dtype="fp8")
    per_gpu = (H100.memory_bytes * 0.9 - ((m.weight_bytes - m.replicated_weight_bytes) / 16
                                          + m.replicated_weight_bytes)
               - activation_reserve_bytes(m, 2048, 16) - NON_TORCH_RESERVE_BYTES)
    assert cap.kv_bytes == int(per_gpu * 16) and cap.weight_bytes_per_gpu == m.weight_bytes_per_gpu(16)
    assert cap.kv_tokens == tokens  # 973,077 and 710,068 when every weight was split


def test_the_clock_reads_the_replicated_weights_whole_on_every_gpu():
    fp8 = V32.with_kv_cache_dtype("fp8")
    bytes_s = 0.8 * H100.hbm_bandwidth_gb_s * 1e9
    one = StepCostModel(model=fp8, gpu=H100, block_size=64, tensor_parallel=1)
    sixteen = StepCostModel(model=fp8, gpu=H100, block_size=64, tensor_parallel=16)
    routed = V32.routed_expert_bytes
    fixed = V32.weight_bytes - routed
    touched = one.weights_time(1) * bytes_s - fixed  # the routed experts one token reads: 8 of 256, split too
    assert touched == pytest.approx(routed * 8 / 256)
    assert sixteen.weights_time(1) * bytes_s == pytest.approx(
        (fixed - V32.replicated_weight_bytes) / 16 + V32.replicated_weight_bytes + touched / 16, rel=1e-12)
    dense = StepCostModel(model=get_model("llama-3-70b"), gpu=H100, tensor_parallel=4)
    assert dense.weights_time(1) == get_model("llama-3-70b").weight_bytes / 4 / bytes_s  # as before


BASE = ("num_layers = 2\nhidden_size = 64\nnum_heads = 4\nnum_kv_heads = 4\nhead_dim = 16\nnum_params = 1e9\n"
        "max_seq_len = 256\nintermediate_size = 128\nvocab_size = 1000\n")


MOE = dict(name="moe", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4, head_dim=16, max_seq_len=256,
           intermediate_size=128, vocab_size=1000, num_params=10e9, active_params=2e9, num_experts=16,
           num_experts_per_tok=2)
"""A mixture of experts: 16 experts of 8e9 / 14 parameters, 2 of them and 2e9 parameters in all per token."""


def catalog_model(tmp_path, line: str) -> ModelSpec:
    """The one model of a catalog file ``c.toml`` holding `BASE` and ``line``."""
    path = tmp_path / "c.toml"
    path.write_text("[models.m]\n" + BASE + line)
    (m,) = load_catalog_file(path)[0].values()
    return m


def test_a_catalog_file_states_replicated_weights(tmp_path):
    m = catalog_model(tmp_path, "replicated_weights_gib = 0.5\n")
    assert m.replicated_weight_bytes == 0.5 * GIB
    assert m.weight_bytes_per_gpu(4) == (2e9 - 0.5 * GIB) / 4 + 0.5 * GIB


@pytest.mark.parametrize(("value", "message"), [
    ("-1", "replicated_weights_gib must be a positive number"),
    ("'x'", "replicated_weights_gib must be a positive number"),
    ("2.0", r"replicated_weights_gib \(2\) exceeds the weights' 1.86265 GiB"),
])
def test_a_bad_replicated_weights_value_names_the_file_and_field(tmp_path, value, message):
    with pytest.raises(ValueError, match=f"c.toml: model 'm': {message}"):
        catalog_model(tmp_path, f"replicated_weights_gib = {value}\n")


def test_replicated_weights_exclude_the_routed_experts():
    # 16 experts of 8e9 / 14 parameters at 2 bytes: 18.29 GB of the 20, 1.71 GB left beside them
    ModelSpec(**MOE, replicated_weights_gib=1.7e9 / GIB)
    with pytest.raises(ValueError, match="beside the routed experts"):
        ModelSpec(**MOE, replicated_weights_gib=1.75e9 / GIB)


# their parameters (catalog ``replicated_params``), whose FLOPs every GPU does for every token of the step
QKV_A_PARAMS = 7168 * (1536 + 576)
NORM_PARAMS = 7168 + 7168 + 1536 + 512
ROUTER_PARAMS = 7168 * 256 + 256  # and e_score_correction_bias
INDEXER_PARAMS = 1536 * 64 * 128 + 7168 * 128 + 7168 * 64 + 2 * 128  # wq_b, wk, weights_proj, k_norm
V3_REPLICATED_PARAMS = 61 * (QKV_A_PARAMS + NORM_PARAMS) + 58 * ROUTER_PARAMS + 7168


def test_the_catalog_counts_the_replicated_layers_parameters():
    assert V3.replicated_params == V3_REPLICATED_PARAMS == 1_030_919_680
    assert V32.replicated_params == V3_REPLICATED_PARAMS + 61 * INDEXER_PARAMS == 1_882_444_544
    # the indexer's parameters are what V3.2 adds to V3's, all of them replicated
    assert V32.replicated_params - V3.replicated_params == V32.active_params - V3.active_params
    # the same layers as the bytes: FP8 projections (one byte a parameter and block scales), BF16 routers and
    # norms (two), FP32 biases (four), wk_weights_proj upcast to BF16 and the FP32 k_norm
    v3_bytes = (61 * (QKV_A_PARAMS + 17 * 56 * 4 + 2 * NORM_PARAMS) + 58 * (2 * 7168 * 256 + 4 * 256) + 2 * 7168)
    assert v3_bytes == V3_REPLICATED


def test_a_catalog_file_states_replicated_params(tmp_path):
    m = catalog_model(tmp_path, "replicated_params = 2.5e8\n")
    assert m.replicated_params == 2.5e8 and m.replicated_weights_gib is None


@pytest.mark.parametrize(("value", "message"), [
    ("0", "replicated_params must be a positive number"),
    ("'x'", "replicated_params must be a positive number"),
    ("true", "replicated_params must be a positive number"),
    ("2e9", r"replicated_params \(2e\+09\) exceeds the 1e\+09 parameters a token passes through"),
])
def test_a_bad_replicated_params_value_names_the_file_and_field(tmp_path, value, message):
    with pytest.raises(ValueError, match=f"c.toml: model 'm': {message}"):
        catalog_model(tmp_path, f"replicated_params = {value}\n")


def test_replicated_params_are_among_the_active_ones():
    assert ModelSpec(**MOE, replicated_params=2e9).replicated_params == 2e9  # every active one replicated
    with pytest.raises(ValueError, match=r"replicated_params \(2\.1e\+09\) exceeds the 2e\+09 parameters"):
        ModelSpec(**MOE, replicated_params=2.1e9)
