"""Sparse MLA (DeepSeek-V3.2): the indexer key cache in a token's KV bytes, the fp8 latent record vLLM 0.33's
FlashMLA sparse backend stores, the sparse attention backends and the block size they and the indexer take."""

from types import SimpleNamespace

import pytest

from allocators.capacity import kv_capacity, pool_bytes_per_token
from allocators.catalog import ModelSpec, get_gpu, get_model
from allocators.catalog_file import load_catalog_file
from allocators.mla_backends import mla_backend
from allocators.vattention_pages import cache_tensors, page_geometry
from sim.kernel.block_size import block_size_refusal, run_block_size

V32 = get_model("deepseek-v3.2")
V3 = get_model("deepseek-v3")
B200 = get_gpu("b200")
INDEXER = 128 + 128 // 128 * 4  # DeepseekV32IndexerCache head_dim: fp8 key + one float32 scale per 128


def test_the_catalog_entry_is_deepseek_v3_with_an_indexer():
    assert (V32.index_topk, V32.index_head_dim, V32.index_n_heads) == (2048, 128, 64)
    assert V32.sparse_attention and not V3.sparse_attention
    for f in ("num_layers", "hidden_size", "num_heads", "head_dim", "kv_lora_rank", "qk_rope_head_dim",
              "num_experts", "num_experts_per_tok", "max_seq_len"):
        assert getattr(V32, f) == getattr(V3, f), f
    indexer_params = 1536 * 64 * 128 + 7168 * 128 + 7168 * 64 + 2 * 128
    assert V32.num_params - V3.num_params == pytest.approx(61 * indexer_params)
    assert V32.active_params - V3.active_params == pytest.approx(61 * indexer_params)
    assert V32.expert_params == pytest.approx(V3.expert_params)  # the indexer is in every token's path
    loaded = 1536 * 8192 + 12 * 64 * 4 + (7168 * 128 + 7168 * 64) * 2 + 2 * 128 * 4  # fp8 + scales, bf16, fp32
    assert V32.weight_bytes - V3.weight_bytes == pytest.approx(61 * loaded)


@pytest.mark.parametrize(("dtype", "latent"), [
    ("auto", (512 + 64) * 2), ("bf16", (512 + 64) * 2),
    ("fp8", 512 + 512 // 128 * 4 + 64 * 2),  # fp8_ds_mla: 656 bytes, vLLM's state_content_bytes
])
def test_a_token_holds_the_latent_as_the_sparse_backend_stores_it_plus_the_indexer_key(dtype, latent):
    assert latent in (1152, 656)
    (group,) = V32.kv_groups(dtype)
    assert (group.name, group.attention, group.layers) == ("mla", "mla", 61)  # one KV cache group, as vLLM's
    assert group.bytes_per_token == 61 * (latent + INDEXER)
    assert group.indexer_bytes_per_token == 61 * INDEXER == 8052
    assert group.to_dict()["indexer_bytes_per_token"] == 8052
    assert (group.tensors_per_layer, group.bytes_per_token_per_tensor) == (2, latent)
    assert "indexer_bytes_per_token" not in V3.kv_groups(dtype)[0].to_dict()  # dense models print as before


def test_every_gpu_keeps_the_whole_latent_and_indexer_key():
    fp8 = V32.with_kv_cache_dtype("fp8")
    assert pool_bytes_per_token(fp8, 16) == 16 * 61 * (656 + 132)


def test_capacity_on_16_h100_fp8_counts_the_indexer():
    v32 = kv_capacity(V32, get_gpu("h100-80gb"), tensor_parallel=16, kv_cache_dtype="fp8")
    v3 = kv_capacity(V3, get_gpu("h100-80gb"), tensor_parallel=16, kv_cache_dtype="fp8")
    assert v32.kv_tokens == v32.kv_bytes // (16 * 61 * 788)
    assert v3.kv_tokens == v3.kv_bytes // (16 * 61 * 576)
    # its indexer's weights, which vLLM replicates: whole on each of the 16 GPUs
    assert v3.kv_bytes - v32.kv_bytes == pytest.approx(16 * (V32.weight_bytes - V3.weight_bytes), abs=16)
    # 576 / 788 of the slots, less the 15 GB of replicated indexer weights (2.8% of the pool)
    assert v32.kv_tokens / v3.kv_tokens == pytest.approx(576 / 788 * (1 - 16 * 935_710_720 / v3.kv_bytes), rel=1e-5)


def test_vattention_maps_a_page_into_both_tensors_of_a_layer():
    fp8 = V32.with_kv_cache_dtype("fp8")
    assert cache_tensors(fp8) == 122
    page_tokens, _ = page_geometry(fp8, 2048, 1_000_000, tensor_parallel=16)
    assert page_tokens == 2048 * 1024 // 656


@pytest.mark.parametrize(("gpu", "dtype", "backend"), [
    ("h100-80gb", "auto", "FLASH_ATTN_MLA_SPARSE"),
    ("h200", "bf16", "FLASH_ATTN_MLA_SPARSE"),
    ("h100-80gb", "fp8", "FLASHMLA_SPARSE"),  # FlashAttention's sparse MLA stores no fp8
    ("h200", "fp8_e4m3", "FLASHINFER_MLA_SPARSE_SM90"),  # not in FLASHMLA_SPARSE's list, which names fp8 only
])
def test_hopper_picks_a_sparse_backend_and_blocks_of_64(gpu, dtype, backend):
    model = V32.with_kv_cache_dtype(dtype)
    picked = mla_backend(model, get_gpu(gpu), None)
    assert (picked.name, picked.sparse, picked.preferred_block_size(model)) == (backend, True, 64)
    config = SimpleNamespace(allocator="paged", block_size=None)  # --block-size not given
    assert run_block_size(config, model, get_gpu(gpu)) == 64 and block_size_refusal(config, model, get_gpu(gpu)) is None
    given = SimpleNamespace(allocator="paged", block_size=16)  # given, 16 is kept: no sparse backend takes it
    assert run_block_size(given, model, get_gpu(gpu)) == 16
    assert "--block-size 16" in block_size_refusal(given, model, get_gpu(gpu))


def test_dense_and_sparse_backends_never_cross():
    assert not mla_backend(V3, get_gpu("h100-80gb"), None).sparse
    assert mla_backend(V32.with_kv_cache_dtype("fp8"), get_gpu("h100-80gb"), 32) is None  # not dense FLASHMLA/Triton


def test_blackwell_block_size_is_the_indexers_64_even_where_its_backend_takes_32():
    fp8 = V32.with_kv_cache_dtype("fp8")
    picked = mla_backend(fp8, B200, None)
    assert (picked.name, picked.preferred_block_size(fp8)) == ("FLASHINFER_MLA_SPARSE", 64)
    assert mla_backend(V32, B200, None).name == "FLASHMLA_SPARSE"  # 16-bit KV: FlashMLA first
    refusal = block_size_refusal(SimpleNamespace(allocator="paged", block_size=32), fp8, B200)
    assert "indexer" in refusal and "multiples of 64" in refusal


@pytest.mark.parametrize(("gpu", "dtype", "block_size", "reason"), [
    ("a100-80gb", "auto", 16, "no sparse MLA attention backend"),
    ("l4", "fp8", 16, "9.x, 10.x and 12.x only"),
    ("h100-80gb", "fp8_e5m2", 16, "none of vLLM's sparse MLA attention backends"),
    ("h100-80gb", "fp8", 32, "multiples of 64"),
    ("h100-80gb", "auto", 96, "multiples of 64"),
])
def test_vllm_refuses_what_no_sparse_backend_or_indexer_takes(gpu, dtype, block_size, reason):
    config = SimpleNamespace(allocator="paged", block_size=block_size)
    assert reason in block_size_refusal(config, V32.with_kv_cache_dtype(dtype), get_gpu(gpu))


def test_a_given_multiple_of_64_is_kept():
    config = SimpleNamespace(allocator="paged", block_size=128)
    fp8 = V32.with_kv_cache_dtype("fp8")
    assert run_block_size(config, fp8, get_gpu("h100-80gb")) == 128
    assert block_size_refusal(config, fp8, get_gpu("h100-80gb")) is None


def test_indexer_fields_come_together_and_need_mla(tmp_path):
    base = dict(name="m", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4, head_dim=16, num_params=1e6,
                max_seq_len=256, intermediate_size=128, vocab_size=1000)
    with pytest.raises(ValueError, match="model 'm': index_head_dim must be a positive integer"):
        ModelSpec(**base, kv_lora_rank=32, qk_rope_head_dim=8, index_topk=64)
    with pytest.raises(ValueError, match="need kv_lora_rank"):
        ModelSpec(**base, index_topk=64, index_head_dim=32, index_n_heads=4)
    path = tmp_path / "c.toml"
    path.write_text("[models.sparse]\nnum_layers = 2\nhidden_size = 64\nnum_heads = 4\nnum_kv_heads = 4\n"
                    "head_dim = 16\nnum_params = 1e6\nmax_seq_len = 256\nintermediate_size = 128\n"
                    "vocab_size = 1000\nkv_lora_rank = 32\nqk_rope_head_dim = 8\nindex_topk = 64\n"
                    "index_head_dim = 32\nindex_n_heads = 4\n")
    models, _ = load_catalog_file(path)
    assert models["sparse"].kv_bytes_per_token == 2 * ((32 + 8) * 2 + 32)
