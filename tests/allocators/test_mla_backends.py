"""The MLA attention backend vLLM 0.33 picks per GPU and KV dtype, and the block size that follows from it."""

import dataclasses

import pytest

from allocators.catalog import get_gpu, get_model
from allocators.mla_backends import mla_backend

DEEPSEEK = get_model("deepseek-v3")
B200 = get_gpu("b200")


@pytest.mark.parametrize(("gpu", "dtype", "backend", "block_size"), [
    ("h100-80gb", "auto", "FLASH_ATTN_MLA", 16),
    ("h200", "bf16", "FLASH_ATTN_MLA", 16),
    ("h100-80gb", "fp8", "FLASHMLA", 64),  # FlashAttention's MLA kernel stores no fp8
    ("h200", "fp8_e4m3", "FLASHMLA", 64),
    ("a100-80gb", "auto", "TRITON_MLA", 16),
    ("a10g", "fp16", "TRITON_MLA", 16),
    ("l4", "fp8", "TRITON_MLA", 16),  # Triton's fp8 needs compute capability 8.9, which the L4 has
])
def test_the_catalogs_gpus_pick_vllms_backend_and_its_block_size(gpu, dtype, backend, block_size):
    picked = mla_backend(DEEPSEEK.with_kv_cache_dtype(dtype), get_gpu(gpu), None)
    assert (picked.name, picked.preferred_block_size()) == (backend, block_size)


def test_blackwell_picks_flashinfer_and_blocks_of_32():
    picked = mla_backend(DEEPSEEK, B200, None)
    assert (picked.name, picked.preferred_block_size()) == ("FLASHINFER_MLA", 32)
    odd_nope = dataclasses.replace(DEEPSEEK, head_dim=160)  # qk_nope_head_dim 96: not a FlashInfer MLA kernel
    picked = mla_backend(odd_nope, B200, None)
    assert (picked.name, picked.preferred_block_size()) == ("CUTLASS_MLA", 128)


def test_a_given_block_size_passes_over_backends_that_do_not_take_it():
    fp8 = DEEPSEEK.with_kv_cache_dtype("fp8")
    h100 = get_gpu("h100-80gb")
    assert mla_backend(fp8, h100, 128).name == "FLASHMLA"
    assert mla_backend(fp8, h100, 32).name == "TRITON_MLA"  # a lower-priority backend keeps the given 32
    assert mla_backend(DEEPSEEK, B200, 16).name == "TRITON_MLA"
    assert mla_backend(DEEPSEEK, h100, 8) is None  # no MLA kernel takes blocks of 8: vLLM refuses to start


def test_no_backend_stores_what_none_of_their_kernels_take():
    assert mla_backend(DEEPSEEK.with_kv_cache_dtype("fp8"), get_gpu("a100-80gb"), None) is None  # fp8 needs 8.9
    assert mla_backend(DEEPSEEK.with_kv_cache_dtype("fp8_e5m2"), get_gpu("h100-80gb"), None) is None
    small_latent = dataclasses.replace(DEEPSEEK, kv_lora_rank=256)  # head size 256 + 64 = 320, a common one
    assert mla_backend(small_latent, get_gpu("h100-80gb"), None).name == "FLASH_ATTN_MLA"
    odd_latent = dataclasses.replace(DEEPSEEK, kv_lora_rank=200)  # head size 264: only Triton takes it
    assert mla_backend(odd_latent, get_gpu("h100-80gb"), None).name == "TRITON_MLA"
