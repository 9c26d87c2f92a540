"""How a sparse MLA model's (DeepSeek-V3.2's) fp8 latent is stored turns on the attention backend vLLM 0.33
picks on the GPU: FLASHMLA_SPARSE's 656-byte ``fp8_ds_mla`` record (Hopper's ``fp8``) or a plain 576-byte fp8
latent (FLASHINFER_MLA_SPARSE_SM90 for Hopper's ``fp8_e4m3``, FLASHINFER_MLA_SPARSE for Blackwell's fp8)."""

import dataclasses

import pytest

from allocators.capacity import kv_capacity
from allocators.catalog import get_gpu, get_model
from allocators.catalog_file import load_catalog_file
from allocators.mla_backends import mla_backend, with_backend_kv_layout

V32, V3 = get_model("deepseek-v3.2"), get_model("deepseek-v3")
H100 = get_gpu("h100-80gb")
B200 = dataclasses.replace(get_gpu("h200"), name="b200", compute_capability=10.0)
RTX = dataclasses.replace(get_gpu("l4"), name="rtx-pro-6000", compute_capability=12.0)
INDEXER = 132  # fp8 indexer key + one float32 scale, whatever the KV dtype
DS_MLA, PLAIN_FP8, BF16 = 656, 576, 1152


@pytest.mark.parametrize(("gpu", "dtype", "backend", "latent"), [
    (H100, "fp8", "FLASHMLA_SPARSE", DS_MLA),  # any quantized dtype -> fp8_ds_mla
    (H100, "fp8_e4m3", "FLASHINFER_MLA_SPARSE_SM90", PLAIN_FP8),
    (H100, "auto", "FLASH_ATTN_MLA_SPARSE", BF16),
    (B200, "fp8", "FLASHINFER_MLA_SPARSE", PLAIN_FP8),  # "Using standard fp8 KV cache format"
    (B200, "fp8_e4m3", "FLASHINFER_MLA_SPARSE", PLAIN_FP8),
    (B200, "auto", "FLASHMLA_SPARSE", BF16),
    (RTX, "auto", "FLASHINFER_MLA_SPARSE_SM120", DS_MLA),  # SM120 turns auto into fp8_ds_mla too
    (RTX, "fp8", "FLASHINFER_MLA_SPARSE_SM120", DS_MLA),
])
def test_the_backend_vllm_picks_decides_the_latents_bytes(gpu, dtype, backend, latent):
    model = with_backend_kv_layout(V32.with_kv_cache_dtype(dtype), gpu)
    assert mla_backend(model, gpu, None).name == backend
    assert model.kv_bytes_per_token == 61 * (latent + INDEXER)
    (group,) = model.kv_groups()
    assert (group.indexer_bytes_per_token, group.bytes_per_token_per_tensor) == (61 * INDEXER, latent)


def test_capacity_on_a_known_gpu_sizes_the_pool_by_the_stored_latent():
    fp8 = kv_capacity(V32, H100, tensor_parallel=16, kv_cache_dtype="fp8")
    e4m3 = kv_capacity(V32, H100, tensor_parallel=16, kv_cache_dtype="fp8_e4m3")
    assert fp8.kv_bytes == e4m3.kv_bytes  # the same memory, holding 788- or 708-byte layers
    assert fp8.kv_tokens == fp8.kv_bytes // (16 * 61 * (DS_MLA + INDEXER))
    assert e4m3.kv_tokens == e4m3.kv_bytes // (16 * 61 * (PLAIN_FP8 + INDEXER))
    assert e4m3.model.kv_bytes_per_token == 43_188 and fp8.model.kv_bytes_per_token == 48_068


@pytest.mark.parametrize("gpu", [None, get_gpu("a100-80gb"), dataclasses.replace(H100, compute_capability=None)])
def test_without_a_backend_fp8_stays_flashmlas_record(gpu):
    """No GPU, none that serves sparse MLA (vLLM refuses; `block_size_refusal` says so), or one of unknown
    capability: the layout is not chosen, and fp8 counts the record, as FLASHMLA_SPARSE stores it."""
    fp8 = V32.with_kv_cache_dtype("fp8")
    assert with_backend_kv_layout(fp8, gpu) is fp8 and fp8.kv_bytes_per_token == 61 * (DS_MLA + INDEXER)
    assert kv_capacity(V32, gpu, kv_tokens=1000, kv_cache_dtype="fp8").model.kv_bytes_per_token == 48_068


def test_dense_mla_is_untouched_by_the_sparse_layout():
    for gpu in (H100, B200):
        model = V3.with_kv_cache_dtype("fp8")
        assert with_backend_kv_layout(model, gpu) is model and model.kv_bytes_per_token == 61 * PLAIN_FP8


def test_a_catalog_file_may_state_the_layout_only_of_a_sparse_model(tmp_path):
    base = ("num_layers = 2\nhidden_size = 64\nnum_heads = 4\nnum_kv_heads = 4\nhead_dim = 16\nnum_params = 1e6\n"
            "max_seq_len = 256\nintermediate_size = 128\nvocab_size = 1000\nkv_lora_rank = 512\n"
            "qk_rope_head_dim = 64\n")
    path = tmp_path / "c.toml"
    path.write_text("[models.s]\n" + base + "index_topk = 64\nindex_head_dim = 128\nindex_n_heads = 4\n"
                    "kv_cache_dtype = 'fp8'\nfp8_ds_mla = false\n")
    (model,) = load_catalog_file(path)[0].values()
    assert model.kv_bytes_per_token == 2 * (PLAIN_FP8 + INDEXER)
    path.write_text("[models.d]\n" + base + "fp8_ds_mla = true\n")
    with pytest.raises(ValueError, match="c.toml: model 'd': fp8_ds_mla is a sparse MLA latent's layout"):
        load_catalog_file(path)
    with pytest.raises(ValueError, match="fp8_ds_mla must be true or false"):
        dataclasses.replace(V32, fp8_ds_mla="yes")
