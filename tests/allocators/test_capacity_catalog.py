"""The model catalog's KV bytes per token, checked against each model's published config, and KV capacity."""

import pytest

from allocators import catalog
from allocators.capacity import kv_capacity
from allocators.catalog import GIB, get_gpu, get_model

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
    "codellama-34b": 192 * KIB,  # 48 x 8 x 128
    "qwen2.5-7b": 56 * KIB,  # 28 x 4 x 128
}


@pytest.mark.parametrize("name,logged_gib", [("llama-2-7b", 12.5524), ("codellama-34b", 62.8571)])
def test_weights_are_what_vllm_loads(name, logged_gib):
    """vLLM 0.11 logs the weights it loaded (H100 runs of docs/validation.md); the catalog's num_params match."""
    assert get_model(name).weight_bytes / GIB == pytest.approx(logged_gib, rel=1e-3)


@pytest.fixture
def restore_catalog():
    models, gpus = dict(catalog.MODELS), dict(catalog.GPUS)
    yield
    catalog.MODELS.clear()
    catalog.MODELS.update(models)
    catalog.GPUS.clear()
    catalog.GPUS.update(gpus)


@pytest.mark.parametrize("name", sorted(EXPECTED_KV_BYTES_PER_TOKEN))
def test_kv_bytes_per_token(name):
    assert get_model(name).kv_bytes_per_token == EXPECTED_KV_BYTES_PER_TOKEN[name]


def test_every_catalog_model_is_checked_and_consistent():
    assert set(catalog.MODELS) >= set(EXPECTED_KV_BYTES_PER_TOKEN)
    for m in catalog.MODELS.values():
        assert m.num_heads * m.head_dim == m.hidden_size, m.name
        assert m.source, f"{m.name}: no source"


def test_paper_capacity_opt13b_12_gib():
    cap = kv_capacity(get_model("opt-13b"), get_gpu("a100-40gb"), kv_gib=12)
    assert cap.kv_tokens == 15728 and cap.kv_bytes == 12 * GIB
    assert 2048 * get_model("opt-13b").kv_bytes_per_token / 1e9 == pytest.approx(1.68, abs=0.01)  # "1.6 GB"


def test_derived_capacity_opt13b_on_a100_40gb_is_about_12_gib():
    """The paper's vLLM ran without CUDA graphs: sized eagerly, OPT-13B on an A100-40GB has about 12 GiB."""
    cap = kv_capacity(get_model("opt-13b"), get_gpu("a100-40gb"), enforce_eager=True)
    assert cap.source == "derived" and 11.5 < cap.kv_gib < 12.5
    graphs = kv_capacity(get_model("opt-13b"), get_gpu("a100-40gb"))
    assert graphs.kv_bytes == pytest.approx(cap.kv_bytes - graphs.graph_reserve_bytes_per_gpu, abs=1)


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
    catalog.register_catalog_file(path)
    assert get_model("tiny").kv_bytes_per_token == 2 * 2 * 2 * 16 * 2
    assert get_gpu("toy").memory_bytes == GIB
