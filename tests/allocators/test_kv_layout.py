"""KV groups: the shape other allocators code against, vLLM's --kv-cache-dtype spellings, per-layer and
per-tensor bytes, and the KV layout keys of a TOML catalog entry (with one-line errors for bad ones)."""

import dataclasses

import pytest

from allocators import catalog
from allocators.catalog import ModelSpec, get_model
from allocators.catalog_file import load_catalog_file
from allocators.kv_layout import KVGroup, kv_element_bytes

TINY = ("num_layers = 6\nhidden_size = 64\nnum_heads = 4\nnum_kv_heads = 2\nhead_dim = 16\nnum_params = 1e6\n"
        "max_seq_len = 256\nintermediate_size = 128\nvocab_size = 1000\n")


def test_kv_group_is_a_frozen_record_with_the_agreed_fields():
    assert [f.name for f in dataclasses.fields(KVGroup)] == ["name", "attention", "layers", "window",
                                                               "bytes_per_token", "indexer_bytes_per_token"]
    group = get_model("opt-13b").kv_groups()[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        group.layers = 1
    assert group.to_dict() == {"name": "full", "attention": "full", "layers": 40, "window": None,
                               "bytes_per_token": 819200}


def test_full_attention_models_are_one_full_group():
    for name in ("opt-13b", "llama-2-7b", "llama-3-8b", "qwen3-8b", "llama-3.1-8b"):
        (group,) = get_model(name).kv_groups()
        assert (group.attention, group.window) == ("full", None)
        assert group.bytes_per_token == get_model(name).kv_bytes_per_token


def test_per_layer_and_per_tensor_bytes():
    """vAttention maps pages per K/V tensor: one token of one tensor of one layer."""
    sliding, full = get_model("gpt-oss-20b").kv_groups("fp8")
    assert sliding.bytes_per_token_per_layer == 2 * 8 * 64 and sliding.bytes_per_token_per_tensor == 8 * 64
    assert full.tensors_per_layer == 2
    (mla,) = get_model("deepseek-v3").kv_groups()
    assert (mla.tensors_per_layer, mla.bytes_per_token_per_tensor) == (1, (512 + 64) * 2)


@pytest.mark.parametrize(("dtype", "size"), [("auto", 2), ("fp16", 2), ("bf16", 2), ("bfloat16", 2), ("fp8", 1),
                                             ("fp8_e4m3", 1), ("fp8_e5m2", 1), ("FP8", 1)])
def test_kv_cache_dtype_spellings(dtype, size):
    assert kv_element_bytes(dtype, 2) == size
    assert get_model("llama-3.1-8b").with_kv_cache_dtype(dtype).kv_bytes_per_token == 32 * 2 * 8 * 128 * size


def test_auto_is_the_model_dtype():
    fp32 = dataclasses.replace(get_model("opt-13b"), dtype_bytes=4)
    assert fp32.kv_groups("auto")[0].bytes_per_token == 2 * 40 * 40 * 128 * 4
    assert fp32.with_kv_cache_dtype("auto") is fp32


def test_unknown_dtype_is_a_one_line_error():
    with pytest.raises(ValueError, match="--kv-cache-dtype must be one of auto, fp16, bf16, fp8"):
        get_model("opt-13b").with_kv_cache_dtype("int4")


def test_catalog_file_declares_a_layout(tmp_path):
    path = tmp_path / "layout.toml"
    path.write_text(f"[models.hybrid]\n{TINY}sliding_window = 64\nsliding_window_layers = 4\n"
                    f"[models.latent]\n{TINY}kv_lora_rank = 32\nqk_rope_head_dim = 8\nkv_cache_dtype = \"fp8\"\n"
                    "weights_gib = 0.5\nactive_params = 2e5\n")
    models, _ = load_catalog_file(path)
    assert [g.to_dict() for g in models["hybrid"].kv_groups()] == [
        {"name": "sliding_window", "attention": "sliding_window", "layers": 4, "window": 64,
         "bytes_per_token": 4 * 2 * 2 * 16 * 2},
        {"name": "full", "attention": "full", "layers": 2, "window": None, "bytes_per_token": 2 * 2 * 2 * 16 * 2}]
    latent = models["latent"]
    assert latent.kv_bytes_per_token == 6 * (32 + 8) * 1  # fp8 stored
    assert latent.weight_bytes == 0.5 * catalog.GIB


@pytest.mark.parametrize(("extra", "message"), [
    ("sliding_window_layers = 3\n", "sliding_window_layers needs sliding_window"),
    ("sliding_window = 8\nsliding_window_layers = 7\n", r"at most num_layers \(6\)"),
    ("sliding_window = 0\n", "sliding_window must be a positive integer"),
    ("qk_rope_head_dim = 8\n", "needs kv_lora_rank"),
    ("kv_lora_rank = 8\nsliding_window = 8\n", "not both"),
    ("kv_cache_dtype = \"int4\"\n", "--kv-cache-dtype must be one of"),
    ("weights_gib = \"lots\"\n", "weights_gib must be a positive number"),
])
def test_bad_layout_keys_name_the_file_and_field(tmp_path, extra, message):
    path = tmp_path / "bad.toml"
    path.write_text(f"[models.bad]\n{TINY}{extra}")
    with pytest.raises(ValueError, match=message) as info:
        load_catalog_file(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_model_spec_keeps_positional_construction():
    """Catalog entries are built positionally up to ``source``; the layout fields come after it, defaulted."""
    spec = ModelSpec("x", 2, 64, 4, 2, 16, 1e6, 256, 128, 1000, 2, "src")
    assert spec.kv_groups() == (KVGroup("full", "full", 2, None, 2 * 2 * 2 * 16 * 2),)
