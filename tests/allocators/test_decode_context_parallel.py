"""Decode context parallelism in the KV capacity (vLLM's ``--decode-context-parallel-size``): each token stored on
one GPU of every N, so the same memory holds N times the tokens in as many blocks, each spanning N times the
tokens; checked against vLLM 0.33's own ``get_kv_cache_configs``; vLLM's refusals."""

import pytest

from allocators.capacity import kv_capacity, pool_bytes_per_token
from allocators.catalog import get_gpu, get_model
from allocators.decode_context_parallel import check_decode_context_parallel
from allocators.paged import PagedAllocator

DSV3, H200 = get_model("deepseek-v3"), get_gpu("h200")

VLLM_POOL = {1: (44_303, 16, 708_848), 8: (44_303, 128, 5_670_784)}
"""DCP -> (num_blocks, scheduler block size, logged KV cache size in tokens) that vLLM 0.33 computes for
DeepSeek-V3's MLA layout (61 layers, a 576-wide bf16 latent, ``MLAAttentionSpec(block_size=16)``) in 49,812,847,331
bytes per GPU (kvsim's derived pool on 8 x H200, over 8), at -tp 8: ``get_kv_cache_configs``,
``resolve_kv_cache_block_sizes`` and ``get_kv_cache_capacity`` run offline in the vLLM venv with
``decode_context_parallel_size`` set on the parallel config (``tools/vllm_dcp_oracle.py --pool``)."""


def test_the_pool_holds_n_times_the_tokens_in_vllms_blocks():
    for dcp, (blocks, block_size, tokens) in VLLM_POOL.items():
        cap = kv_capacity(DSV3, H200, tensor_parallel=8, decode_context_parallel=dcp)
        assert cap.decode_context_parallel == dcp
        assert cap.kv_bytes == 398_502_778_651  # the memory is the same: only what a token costs changes
        assert cap.kv_tokens == cap.kv_bytes // (70_272 * 8 // dcp)
        pool = PagedAllocator(cap.kv_tokens, block_size=block_size)
        assert pool.num_blocks == blocks
        assert pool.num_blocks * block_size == tokens  # vLLM's "GPU KV cache size: N tokens"


def test_one_rank_is_todays_accounting_bit_for_bit():
    for model, gpu, tp in ((DSV3, H200, 8), (get_model("llama-3-70b"), get_gpu("h100-80gb"), 16),
                           (get_model("opt-13b"), get_gpu("a100-40gb"), 1)):
        before = kv_capacity(model, gpu, tensor_parallel=tp)
        assert kv_capacity(model, gpu, tensor_parallel=tp, decode_context_parallel=1) == before
        assert pool_bytes_per_token(model, tp, decode_context_parallel=1) == pool_bytes_per_token(model, tp)


def test_sharding_undoes_the_copies_tensor_parallelism_makes():
    """MLA's latent is on all 8 GPUs at -tp 8: -dcp N stores it 8/N times; at N = 8, once (the model's own
    bytes). Llama-3-70B's 8 KV heads on 16 GPUs are each on two: -dcp 2 stores each once."""
    for dcp in (1, 2, 4, 8):
        assert pool_bytes_per_token(DSV3, 8, decode_context_parallel=dcp) == 70_272 * 8 // dcp
    assert pool_bytes_per_token(DSV3, 8, decode_context_parallel=8) == DSV3.kv_bytes_per_token
    llama = get_model("llama-3-70b")
    assert pool_bytes_per_token(llama, 16) == 2 * llama.kv_bytes_per_token
    assert pool_bytes_per_token(llama, 16, decode_context_parallel=2) == llama.kv_bytes_per_token
    given = kv_capacity(llama, None, tensor_parallel=16, kv_gib=10, decode_context_parallel=2)
    assert given.kv_tokens == 2 * kv_capacity(llama, None, tensor_parallel=16, kv_gib=10).kv_tokens


@pytest.mark.parametrize(("model", "tp", "dcp", "message"), [
    ("deepseek-v3", 8, 3, "vLLM requires tp_size=8 to be divisible by dcp_size=3"),
    ("deepseek-v3", 8, 0, "--decode-context-parallel-size must be >= 1, got 0"),
    ("llama-3-70b", 8, 2, "requires --tensor-parallel-size (8) to be greater than llama-3-70b's 8 KV heads"),
    ("llama-3-70b", 16, 4, "--decode-context-parallel-size (4) exceeds the maximum vLLM supports (2) for "
                           "--tensor-parallel-size (16) and llama-3-70b's 8 KV heads"),
    ("qwen2.5-7b", 28, 2, "query heads per KV head (7) must be divisible by it"),
    ("mistral-7b", 16, 2, "sliding-window or chunked-local layers"),
    ("deepseek-v3.2", 8, 8, "is not modelled"),
])
def test_what_vllm_refuses_is_a_one_line_error(model, tp, dcp, message):
    """vLLM 0.33's reasons (its ParallelConfig and ModelConfig checks, ``tools/vllm_dcp_oracle.py --refusals``,
    which also shows Llama-3-70B accepted at -tp 16 -dcp 2; the window one is an assertion of its KV cache
    managers); the sparse model is kvsim's refusal: not modelled."""
    with pytest.raises(ValueError) as info:
        check_decode_context_parallel(get_model(model), tp, dcp)
    assert message in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ValueError):
        kv_capacity(get_model(model), None, tensor_parallel=tp, kv_gib=1, decode_context_parallel=dcp)
