"""vLLM 0.33's packed and scaled --kv-cache-dtype formats: a token's bytes as vLLM's backends pack them (checked
against vLLM's own pool sizing, `tools/vllm_oracle/kv_dtype_pool.py`), the block size TurboQuant raises, and a
one-line refusal, with vLLM's reason, wherever vLLM stores no KV at that dtype."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from allocators.capacity import kv_capacity
from allocators.catalog import get_gpu, get_model
from allocators.kv_formats import turboquant_slot_bytes
from sim.kernel.block_size import run_block_size

ORACLE = json.loads((Path(__file__).parent / "data" / "kv_dtype_pool.json").read_text())
LLAMA = get_model("llama-3-8b")  # 32 layers, 8 KV heads of 128, bf16
H100 = get_gpu("h100-80gb")
B200 = get_gpu("b200")
PAGED = SimpleNamespace(allocator="paged", block_size=None)


def test_the_oracle_sized_the_pool_kvsim_derives():
    assert kv_capacity(LLAMA, H100).kv_bytes == ORACLE["available_bytes"]


@pytest.mark.parametrize("dtype", sorted(ORACLE["pools"]))
def test_a_token_and_the_pool_are_what_vllm_sizes(dtype):
    """Bytes per token x block size is vLLM's page summed over the 32 layers, the block size is vLLM's, and the
    pool holds vLLM's number of blocks (``get_kv_cache_configs`` in the same memory)."""
    vllm = ORACLE["pools"][dtype]
    cap = kv_capacity(LLAMA, H100, kv_cache_dtype=dtype)
    block = run_block_size(PAGED, cap.model, H100)
    assert block == vllm["block_size"]
    assert cap.model.kv_bytes_per_token * block == vllm["page_bytes_all_layers"]
    assert cap.kv_tokens // block == vllm["num_blocks"]


@pytest.mark.parametrize(("dtype", "per_layer"), [
    ("auto", 2 * 8 * 128 * 2), ("fp8", 2 * 8 * 128),  # unchanged
    ("int8_per_token_head", 8 * (2 * 128 + 2 * 4)),  # K and V bytes, one fp32 scale per head and side
    ("fp8_per_token_head", 8 * (2 * 128 + 2 * 4)),
    ("int4_per_token_head", 8 * (128 + 2 * 4)),  # two int4 a byte
    ("nvfp4", 2 * 8 * (128 // 2 + 128 // 16)),  # fp4 two a byte, one fp8 scale per 16; K and V slots apart
])
def test_bytes_per_token_per_layer(dtype, per_layer):
    assert LLAMA.with_kv_cache_dtype(dtype).kv_bytes_per_token == 32 * per_layer


def test_turboquant_slots_and_its_boundary_layers():
    """One head's key + value per token (``TurboQuantConfig.slot_size_aligned``); layers 0, 1, 30, 31 keep bf16."""
    slots = {d: turboquant_slot_bytes(d, 128) for d in
             ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc")}
    assert slots == {"turboquant_k8v4": 128 + 64 + 4, "turboquant_4bit_nc": 64 + 2 + 64 + 4,
                     "turboquant_k3v4_nc": 48 + 2 + 64 + 4, "turboquant_3bit_nc": 48 + 2 + 48 + 4}
    for dtype, slot in slots.items():
        assert LLAMA.with_kv_cache_dtype(dtype).kv_bytes_per_token == 4 * 2 * 8 * 128 * 2 + 28 * 8 * slot


@pytest.mark.parametrize(("given", "block"), [(None, 48), (16, 48), (32, 64), (128, 128)])
def test_turboquant_raises_the_block_size_given_or_not(given, block):
    model = LLAMA.with_kv_cache_dtype("turboquant_k8v4")
    assert run_block_size(SimpleNamespace(allocator="paged", block_size=given), model, H100) == block


def test_heads_split_over_tensor_parallel_gpus():
    model = get_model("llama-3-70b").with_kv_cache_dtype("nvfp4")
    assert model.kv_bytes_per_token_per_gpu(4) * 4 == model.kv_bytes_per_token == 80 * 2 * 8 * 72


def test_more_requests_fit_in_the_same_memory():
    tokens = {d: kv_capacity(LLAMA, H100, kv_cache_dtype=d).kv_tokens
              for d in ("auto", "fp8", "int8_per_token_head", "nvfp4", "int4_per_token_head")}
    assert tokens["auto"] < tokens["int8_per_token_head"] < tokens["fp8"] < tokens["nvfp4"] < tokens[
        "int4_per_token_head"]


V32 = get_model("deepseek-v3.2")
INDEXER = 128 + 4


def test_sparse_mla_records():
    """FlashMLA's fp8_ds_mla (656 bytes) asked by name is what fp8 stores on Hopper; nvfp4_ds_mla (352) is
    Blackwell's: latent fp4 two a byte, rope fp8, one fp8 scale per 16 of the latent."""
    on_h200 = kv_capacity(V32, get_gpu("h200"), tensor_parallel=8, kv_tokens=1, kv_cache_dtype="fp8_ds_mla").model
    assert on_h200.kv_bytes_per_token == 61 * (656 + INDEXER)
    on_b200 = kv_capacity(V32, B200, tensor_parallel=8, kv_tokens=1, kv_cache_dtype="nvfp4_ds_mla").model
    assert on_b200.kv_bytes_per_token == 61 * (256 + 64 + 32 + INDEXER)


@pytest.mark.parametrize(("model", "dtype", "reason"), [
    ("llama-3-8b", "fp8_inc", "Intel Gaudi"),
    ("llama-3-8b", "ultraquant_4bit", "ROCm"),
    ("llama-3-8b", "octave_k3v3_compact", "AMD"),
    ("llama-3-8b", "fp8_ds_mla", "lightning indexer"),
    ("deepseek-v3", "nvfp4_ds_mla", "lightning indexer"),
    ("deepseek-v3", "nvfp4", "validate_nvfp4_kv_cache_with_mla"),
    ("deepseek-v3.2", "int8_per_token_head", "none of its CUDA MLA backends"),
    ("deepseek-v3", "turboquant_k8v4", "TURBOQUANT, not an MLA backend"),
    ("gemma-3-12b", "turboquant_4bit_nc", "sliding-window"),
])
def test_a_model_kind_vllm_refuses_is_a_one_line_error(model, dtype, reason):
    with pytest.raises(ValueError, match=f"model '{model}': --kv-cache-dtype {dtype}: .*{reason}"):
        get_model(model).with_kv_cache_dtype(dtype)


@pytest.mark.parametrize(("model", "dtype", "gpu", "reason"), [
    ("llama-3-8b", "nvfp4_4over6", "h100-80gb", "Blackwell"),
    ("gpt-oss-20b", "nvfp4", "h100-80gb", "head size 64"),
    ("deepseek-v3.2", "nvfp4_ds_mla", "h200", "Blackwell"),
])
def test_a_gpu_vllm_refuses_is_a_one_line_error(model, dtype, gpu, reason):
    with pytest.raises(ValueError, match=f"--kv-cache-dtype {dtype} on {gpu}: .*{reason}"):
        kv_capacity(get_model(model), get_gpu(gpu), tensor_parallel=8 if "deepseek" in model else 1,
                    kv_cache_dtype=dtype)


def test_blackwell_takes_what_hopper_refuses():
    """nvfp4_4over6 is nvfp4's layout with another scale search; heads of 64 are Blackwell's too."""
    assert (kv_capacity(LLAMA, B200, kv_cache_dtype="nvfp4_4over6").model.kv_bytes_per_token
            == LLAMA.with_kv_cache_dtype("nvfp4").kv_bytes_per_token)
    assert kv_capacity(get_model("gpt-oss-20b"), B200, kv_tokens=1, kv_cache_dtype="nvfp4").kv_tokens == 1


def test_asking_a_model_for_its_groups_at_a_refused_format_is_refused_too():
    with pytest.raises(ValueError, match="--kv-cache-dtype nvfp4: vLLM refuses nvfp4 KV with MLA"):
        get_model("deepseek-v3").kv_groups("nvfp4")
