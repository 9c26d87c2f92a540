"""The model catalog's KV bytes per token, checked against each model's published config, and KV capacity."""

import pytest

from allocators import catalog
from allocators.capacity import kv_capacity
from allocators.catalog import GIB, get_gpu, get_model
from allocators.catalog_file import register_catalog_file
from allocators.mla_backends import mla_backend
from tests.allocators.test_replicated_weights import V3_REPLICATED

KIB = 1024

# 2 (K and V) x layers x kv_heads x head_dim x 2 bytes (fp16/bf16), from each config.json
EXPECTED_KV_BYTES_PER_TOKEN = {
    "opt-13b": 800 * KIB,  # 40 layers x 40 heads x 128
    "opt-66b": 2304 * KIB,  # 64 x 72 x 128
    "opt-175b": 4608 * KIB,  # 96 x 96 x 128
    "llama-2-7b": 512 * KIB,  # 32 x 32 x 128
    "llama-2-13b": 800 * KIB,  # 40 x 40 x 128
    "llama-3-8b": 128 * KIB,  # 32 layers x 8 KV heads (GQA) x 128
    "llama-3-70b": 320 * KIB,  # 80 x 8 x 128
    "mistral-7b": 128 * KIB,  # 32 x 8 x 128
    "qwen3-8b": 144 * KIB,  # 36 x 8 x 128
    "qwen3-32b": 256 * KIB,  # 64 x 8 x 128
    "qwen3-30b-a3b": 96 * KIB,  # 48 x 4 x 128
    "qwen3-235b-a22b": 188 * KIB,  # 94 x 4 x 128
    "codellama-34b": 192 * KIB,  # 48 x 8 x 128
    "qwen2.5-7b": 56 * KIB,  # 28 x 4 x 128
    "llama-3.1-8b": 128 * KIB,  # 32 x 8 x 128
    "gemma-3-12b": 384 * KIB,  # 48 x 8 x 256 (40 sliding-window + 8 full layers)
    "gpt-oss-20b": 48 * KIB,  # 24 x 8 x 64 (12 sliding-window + 12 full layers)
    "gpt-oss-120b": 72 * KIB,  # 36 x 8 x 64 (18 sliding-window + 18 full layers)
    "deepseek-v3": 61 * (512 + 64) * 2,  # MLA: one latent of 512 + one rope key of 64 per layer, no K/V pair
    "deepseek-v3.2": 61 * ((512 + 64) * 2 + 128 + 4),  # sparse MLA: the same latent + the indexer's fp8 key + scale
    "qwen3-next-80b-a3b": 24 * KIB,  # 12 full-attention layers of 48 x 2 KV heads x 256 (gated DeltaNet: no KV)
}
CONFIG_HEAD_DIM = {"gemma-3-12b", "gpt-oss-20b", "gpt-oss-120b", "deepseek-v3", "deepseek-v3.2", "qwen3-next-80b-a3b",
                   "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b"}
"""Models whose config.json gives head_dim itself, not hidden_size / num_heads."""


@pytest.mark.parametrize("name,logged_gib", [("llama-2-7b", 12.5524), ("codellama-34b", 62.8571)])
def test_weights_are_what_vllm_loads(name, logged_gib):
    """vLLM 0.11 logs the weights it loaded (H100 runs of docs/validation.md); the catalog's num_params match."""
    assert get_model(name).weight_bytes / GIB == pytest.approx(logged_gib, rel=1e-3)


@pytest.mark.parametrize("name", sorted(EXPECTED_KV_BYTES_PER_TOKEN))
def test_kv_bytes_per_token(name):
    assert get_model(name).kv_bytes_per_token == EXPECTED_KV_BYTES_PER_TOKEN[name]


def test_every_catalog_model_is_checked_and_consistent():
    assert set(catalog.MODELS) >= set(EXPECTED_KV_BYTES_PER_TOKEN)
    for m in catalog.MODELS.values():
        assert m.name in CONFIG_HEAD_DIM or m.num_heads * m.head_dim == m.hidden_size, m.name
        assert m.source, f"{m.name}: no source"


def qwen3_parameters(layers, hidden, heads, kv_heads, mlp_width, experts=0, routed=0, vocab=151936, head_dim=128):
    """Qwen3's parameters as vLLM builds them from config.json: untied embedding and lm_head, per layer the
    attention projections with their q/k norms, a SwiGLU MLP (dense) or ``experts`` of ``mlp_width`` with
    their router (MoE; ``routed`` of them counted for the active parameters), two norms; the final norm."""
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2 + 2 * head_dim
    mlp = 3 * hidden * mlp_width
    layer = attention + 2 * hidden + (experts * mlp + hidden * experts if experts else mlp)
    active = layer - (experts - routed) * mlp if experts else layer
    return (layers * layer + 2 * vocab * hidden + hidden, layers * active + 2 * vocab * hidden + hidden)


@pytest.mark.parametrize("name,config,card_total,card_active", [
    ("qwen3-8b", dict(layers=36, hidden=4096, heads=32, kv_heads=8, mlp_width=12288), 8.2e9, 8.2e9),
    ("qwen3-32b", dict(layers=64, hidden=5120, heads=64, kv_heads=8, mlp_width=25600), 32.8e9, 32.8e9),
    ("qwen3-30b-a3b", dict(layers=48, hidden=2048, heads=32, kv_heads=4, mlp_width=768, experts=128, routed=8),
     30.5e9, 3.3e9),
    ("qwen3-235b-a22b", dict(layers=94, hidden=4096, heads=64, kv_heads=4, mlp_width=1536, experts=128, routed=8),
     235e9, 22e9),
])
def test_qwen3_parameters_are_the_configs_and_match_the_cards(name, config, card_total, card_active):
    """The catalog's counts are the config's sums (exact; qwen3-8b's is rounded to 8.19e9), which the model
    cards round (total and activated)."""
    m = get_model(name)
    total, active = qwen3_parameters(**config)
    rel = 1e-3 if name == "qwen3-8b" else 1e-12
    assert m.num_params == pytest.approx(total, rel=rel)
    assert (m.active_params or m.num_params) == pytest.approx(active, rel=rel)
    assert total == pytest.approx(card_total, rel=0.02) and active == pytest.approx(card_active, rel=0.02)


def test_b200_is_what_its_driver_reports_and_a_blackwell():
    """183,359 MiB as nvidia-smi reports it, 8 TB/s and 2.25 dense BF16 PFLOP/s; compute capability 10.0, which
    serves DeepSeek's MLA on FlashInfer in blocks of 32 (`allocators.mla_backends`)."""
    b200 = get_gpu("b200")
    assert (b200.memory_bytes, b200.hbm_bandwidth_gb_s, b200.bf16_tflops) == (183359 * 1024**2, 8000, 2250)
    assert mla_backend(get_model("deepseek-v3"), b200, None).preferred_block_size() == 32


def test_paper_capacity_opt13b_12_gib():
    cap = kv_capacity(get_model("opt-13b"), get_gpu("a100-40gb"), kv_gib=12)
    assert cap.kv_tokens == 15728 and cap.kv_bytes == 12 * GIB
    assert 2048 * get_model("opt-13b").kv_bytes_per_token / 1e9 == pytest.approx(1.68, abs=0.01)  # "1.6 GB"


def test_derived_capacity_opt13b_on_a100_40gb_is_about_11_gib():
    """OPT-13B on an A100-40GB as vLLM 0.11 sizes it: 90% of 40 GiB less weights, activations and non-torch memory
    (the paper's 2023 vLLM had 12 GiB; `kvsim reproduce paper` gives it that)."""
    cap = kv_capacity(get_model("opt-13b"), get_gpu("a100-40gb"))
    assert cap.source == "derived" and cap.kv_tokens == 14_565
    parts = (cap.weight_bytes_per_gpu + cap.activation_reserve_bytes_per_gpu + cap.non_torch_reserve_bytes_per_gpu)
    assert cap.kv_bytes == pytest.approx(0.9 * 40 * 2**30 - parts, abs=1)


def test_lookup_errors_list_valid_choices():
    with pytest.raises(KeyError, match="valid choices: opt-13b"):
        get_model("gpt-5")
    with pytest.raises(KeyError, match="valid choices: a100-40gb"):
        get_gpu("tpu")


def test_catalog_file_adds_models_and_gpus(tmp_path, restore_catalog):
    path = tmp_path / "extra.toml"
    path.write_text(
        "[models.tiny]\nnum_layers = 2\nhidden_size = 64\nnum_heads = 4\nnum_kv_heads = 2\nhead_dim = 16\n"
        "num_params = 1e6\nmax_seq_len = 256\nintermediate_size = 128\nvocab_size = 1000\n"
        "[gpus.toy]\nmemory_gib = 1\nhbm_bandwidth_gb_s = 100\nbf16_tflops = 10\npcie_gb_s = 8\n")
    register_catalog_file(path)
    assert get_model("tiny").kv_bytes_per_token == 2 * 2 * 2 * 16 * 2
    assert get_gpu("toy").memory_bytes == GIB


# --- KV layouts of the new models, and token slots on one H100-80GB, by hand from the config values -----------

MIB = 1024**2
H100_BYTES = 81559 * MIB  # the catalog's h100-80gb, as the driver reports it
GRAPHS = int(0.64 * GIB)  # vLLM's CUDA graph and non-torch reserve
BATCHED = 2048  # max_num_batched_tokens


def by_hand_tokens(*, weights, intermediate, hidden, bytes_per_token, tp=1, copies_per_gpu=1, replicated=0):
    """vLLM's sizing at --gpu-memory-utilization 0.9: 90% of each GPU minus weights (its share of the split ones,
    all of the ``replicated`` ones), the activation peak of a 2,048-token forward pass (3 x intermediate + 4 x
    hidden values, 2 bytes each) and the graph reserve."""
    per_gpu_weights = (weights - replicated) / tp + replicated if replicated else weights / tp
    per_gpu = H100_BYTES * 0.9 - per_gpu_weights - BATCHED * (3 * intermediate + 4 * hidden) * 2 / tp - GRAPHS
    return int(per_gpu * tp) // (bytes_per_token * copies_per_gpu)


# name: (weights bytes, intermediate_size, hidden_size, groups as (attention, layers, window, bytes per token
# at 2 bytes per element), tensor_parallel, copies of a token each GPU keeps relative to an even split)
NEW_MODELS = {
    "llama-3.1-8b": (8.03e9 * 2, 14336, 4096, [("full", 32, None, 2 * 32 * 8 * 128 * 2)], 1, 1),
    "mistral-7b": (7.24e9 * 2, 14336, 4096, [("sliding_window", 32, 4096, 2 * 32 * 8 * 128 * 2)], 1, 1),
    "gemma-3-12b": (12.187325040e9 * 2, 15360, 3840,
                    [("sliding_window", 40, 1024, 2 * 40 * 8 * 256 * 2), ("full", 8, None, 2 * 8 * 8 * 256 * 2)],
                    1, 1),
    "gpt-oss-20b": (12.8 * GIB, 2880, 2880,
                    [("sliding_window", 12, 128, 2 * 12 * 8 * 64 * 2), ("full", 12, None, 2 * 12 * 8 * 64 * 2)],
                    1, 1),
    # 627 GiB of FP8 weights need two 8-GPU H100 nodes; every GPU keeps the whole latent (16 copies)
    "deepseek-v3": ((671e9 + 1.96e9 + 0.16e9), 18432, 7168, [("mla", 61, None, 61 * (512 + 64) * 2)], 16, 16),
}
REPLICATED = {"deepseek-v3": V3_REPLICATED}  # bytes vLLM keeps whole on every GPU (by layer shape)


@pytest.mark.parametrize("name", sorted(NEW_MODELS))
def test_kv_groups_from_config_values(name):
    *_, groups, _, _ = NEW_MODELS[name]
    got = get_model(name).kv_groups("auto")
    assert [(g.attention, g.layers, g.window, g.bytes_per_token) for g in got] == groups
    fp8 = get_model(name).kv_groups("fp8")
    assert [g.bytes_per_token for g in fp8] == [b // 2 for *_, b in groups]
    assert get_model(name).kv_bytes_per_token == sum(b for *_, b in groups)


def test_gpt_oss_120b_has_20bs_layers_half_again():
    """gpt-oss-120b: 36 layers alternating a 128-token window and full attention (20b: 24), 8 KV heads of 64."""
    groups = get_model("gpt-oss-120b").kv_groups("auto")
    assert [(g.attention, g.layers, g.window, g.bytes_per_token) for g in groups] == [
        ("sliding_window", 18, 128, 2 * 18 * 8 * 64 * 2), ("full", 18, None, 2 * 18 * 8 * 64 * 2)]


@pytest.mark.parametrize("name", sorted(NEW_MODELS))
def test_token_slots_on_h100_by_hand(name):
    weights, intermediate, hidden, groups, tp, copies = NEW_MODELS[name]
    per_token = sum(b for *_, b in groups)
    for dtype, elem_scale in (("auto", 1), ("bf16", 1), ("fp8", 2), ("fp8_e5m2", 2)):
        cap = kv_capacity(get_model(name), get_gpu("h100-80gb"), tensor_parallel=tp, kv_cache_dtype=dtype)
        expected = by_hand_tokens(weights=weights, intermediate=intermediate, hidden=hidden, tp=tp,
                                  bytes_per_token=per_token // elem_scale, copies_per_gpu=copies,
                                  replicated=REPLICATED.get(name, 0))
        assert cap.kv_tokens == expected, (name, dtype)
        assert cap.model.kv_bytes_per_token == per_token // elem_scale


def test_published_token_slots_on_h100():
    """The numbers docs/token-cost.md and the notebook print (bf16 KV, one H100-80GB; DeepSeek-V3 on 16)."""
    slots = {name: kv_capacity(get_model(name), get_gpu("h100-80gb"), tensor_parallel=NEW_MODELS[name][4]).kv_tokens
             for name in NEW_MODELS}
    assert slots == {"llama-3.1-8b": 457597, "mistral-7b": 469652, "gemma-3-12b": 131366, "gpt-oss-20b": 1270651,
                     "deepseek-v3": 471348}


@pytest.mark.parametrize("name", ["opt-13b", "llama-3.1-8b", "gemma-3-12b", "deepseek-v3"])
def test_fp8_doubles_slots_for_the_same_memory(name):
    auto = kv_capacity(get_model(name), kv_gib=10)
    fp8 = kv_capacity(get_model(name), kv_gib=10, kv_cache_dtype="fp8")
    assert fp8.kv_bytes == auto.kv_bytes and fp8.kv_tokens in (2 * auto.kv_tokens, 2 * auto.kv_tokens + 1)
    assert get_model(name).weight_bytes == fp8.model.weight_bytes  # weights keep their dtype


def test_kv_heads_are_replicated_past_their_count():
    """More GPUs than KV heads: each GPU keeps one head, so a token costs the pool tp / kv_heads times more."""
    spec = get_model("llama-3.1-8b")  # 8 KV heads
    assert spec.kv_bytes_per_token_per_gpu(8) * 8 == spec.kv_bytes_per_token
    assert spec.kv_bytes_per_token_per_gpu(16) * 16 == 2 * spec.kv_bytes_per_token


def test_an_entrys_kv_cache_dtype_is_stored_in_lower_case():
    """As the flag's value is: a catalog's ``kv_cache_dtype = "AUTO"`` printed "stored as AUTO"."""
    from dataclasses import replace

    assert replace(get_model("llama-3-8b"), kv_cache_dtype="AUTO").kv_cache_dtype == "auto"
    assert replace(get_model("llama-3-8b"), kv_cache_dtype="FP8").kv_cache_dtype == "fp8"
