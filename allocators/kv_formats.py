"""vLLM 0.33's packed and scaled ``--kv-cache-dtype`` formats: what a token costs in one layer, and where vLLM
stores each one (the rest refused with vLLM's reason).

Why: these formats exist to fit more tokens in the same memory, and a token's bytes are not ``elements x
bytes``: vLLM sizes a layer's page as ``num_head_slots x block_size x state_content_bytes``
(``AttentionSpec.page_size_bytes`` in ``v1/kv_cache_interface.py``), where the attention backend that stores
the format sets the slots and content in its ``customize_spec`` (called by ``customize_attention_spec`` in
``v1/worker/utils.py``), counting its scales and packing. Per token and layer, ``H`` KV heads of ``D`` dims:

| format | backend (CUDA) | bytes per token per layer |
|---|---|---|
| int8_per_token_head, fp8_per_token_head | TRITON_ATTN | ``H x (2D + 2 x 4)``: K and V one byte each, one fp32 scale per head and side |
| int4_per_token_head | TRITON_ATTN | ``H x (D + 2 x 4)``: two int4 a byte |
| nvfp4, nvfp4_4over6 | FLASHINFER | ``2H x (D/2 + D/16)``: fp4 data two a byte, one fp8 scale per 16 values, K and V apart |
| turboquant_* | TURBOQUANT | ``H x slot`` (`turboquant_slot_bytes`), the first and last 2 layers at the model dtype |
| fp8_ds_mla, nvfp4_ds_mla | FLASHMLA_SPARSE | a sparse MLA latent record (`allocators.kv_layout.sparse_mla_latent_bytes`) |

(``TritonAttentionBackend.customize_spec``, ``FlashInferBackend.customize_spec`` with
``utils/torch_utils.py`` ``nvfp4_kv_cache_full_dim``, ``TurboQuantAttentionBackend.customize_spec`` with
``model_executor/layers/quantization/turboquant/config.py``, ``MLAAttention.get_kv_cache_spec``.) Each was
checked against vLLM's own ``get_kv_cache_configs`` for Llama-3-8B (``tools/vllm_oracle/kv_dtype_pool.py``,
recorded in ``tests/allocators/data/kv_dtype_pool.json``).
"""

from __future__ import annotations

import math

PER_TOKEN_HEAD = ("int8_per_token_head", "fp8_per_token_head", "int4_per_token_head")
NVFP4 = ("nvfp4", "nvfp4_4over6")
TURBOQUANT = ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc")
DS_MLA = ("fp8_ds_mla", "nvfp4_ds_mla")
NOT_ON_CUDA = {
    "fp8_inc": "vLLM stores fp8_inc on Intel Gaudi (HPU) only: no CUDA attention backend lists it",
    "ultraquant_4bit": "vLLM stores ultraquant_4bit with its ULTRAQUANT backend, which only ROCm (AMD GPUs) "
                       "offers (vllm/platforms/rocm.py); kvsim's GPUs are NVIDIA's",
    **{name: f"vLLM stores {name} with its ROCM_OCTAVE backend, which runs on AMD RDNA3/CDNA3 GPUs only "
             "(RocmOctaveAttentionBackend.supports_compute_capability); kvsim's GPUs are NVIDIA's"
       for name in ("octave_k3v4", "octave_k3v3", "octave_k3v3_compact")},
}
"""Formats vLLM 0.33 accepts but stores on no NVIDIA GPU: kvsim refuses them with this reason."""
PACKED_FORMATS = PER_TOKEN_HEAD + NVFP4 + TURBOQUANT + DS_MLA + tuple(NOT_ON_CUDA)
"""Every ``--kv-cache-dtype`` beyond the 16-bit and fp8 ones (one byte of storage each: ``torch.uint8``,
``int8_per_token_head`` ``torch.int8``, ``fp8_inc`` ``float8_e4m3fn``: ``STR_DTYPE_TO_TORCH_DTYPE``)."""

SCALE_BYTES = 4
"""A per-token-head scale: fp32, one for K and one for V of each head (``TritonAttentionBackend.customize_spec``)."""
NVFP4_GROUP = 16
"""Values that share one fp8 scale in NVFP4 (``nvfp4_kv_cache_full_dim``: ``head_size // 2 + head_size // 16``)."""
TURBOQUANT_BOUNDARY_LAYERS = 2
"""Layers at each end that TurboQuant keeps at the model dtype (``get_boundary_skip_layers(n=2)``, at most half)."""
TURBOQUANT_BITS = {"turboquant_k8v4": (8, 4), "turboquant_4bit_nc": (4, 4), "turboquant_k3v4_nc": (3, 4),
                   "turboquant_3bit_nc": (3, 3)}
"""(key bits, value bits) of each preset (``TQ_PRESETS``; 8-bit keys are fp8)."""
TURBOQUANT_KERNEL_BLOCK = 16
"""The TURBOQUANT backend's least kernel block (``get_supported_kernel_block_sizes``: 16, 32, 64, 128)."""
NVFP4_HEAD_SIZES = (64, 128, 256, 512)
"""Head sizes FlashInfer takes (``FlashInferBackend.get_supported_head_sizes``)."""


def turboquant_slot_bytes(kv_cache_dtype: str, head_dim: int) -> int:
    """One KV head's key and value of one token, packed (``TurboQuantConfig.slot_size_aligned``): an fp8 key
    (``head_dim`` bytes) or Lloyd-Max codes plus an fp16 norm (``ceil(head_dim x bits / 8) + 2``), then the
    value's codes plus an fp16 scale and zero (``ceil(head_dim x bits / 8) + 4``), rounded up to even."""
    key_bits, value_bits = TURBOQUANT_BITS[kv_cache_dtype]
    key = head_dim if key_bits == 8 else math.ceil(head_dim * key_bits / 8) + 2
    slot = key + math.ceil(head_dim * value_bits / 8) + 4
    return slot + slot % 2


def turboquant_boundary_layers(num_layers: int) -> int:
    """How many of ``num_layers`` TurboQuant keeps at the model dtype: the first and last
    `TURBOQUANT_BOUNDARY_LAYERS` (``n = min(n, num_layers // 2)``)."""
    return 2 * min(TURBOQUANT_BOUNDARY_LAYERS, num_layers // 2)


def gqa_layer_bytes(kv_cache_dtype: str, num_kv_heads: int, head_dim: int, element_bytes: int) -> int:
    """One token's K and V in one attention layer of ``num_kv_heads`` heads of ``head_dim`` at
    ``kv_cache_dtype`` (``element_bytes`` per element for the unpacked ones); a TurboQuant layer that is not a
    boundary layer."""
    if kv_cache_dtype in PER_TOKEN_HEAD:
        data = head_dim if kv_cache_dtype == "int4_per_token_head" else 2 * head_dim
        return num_kv_heads * (data + 2 * SCALE_BYTES)
    if kv_cache_dtype in NVFP4:
        return 2 * num_kv_heads * (head_dim // 2 + head_dim // NVFP4_GROUP)
    if kv_cache_dtype in TURBOQUANT:
        return num_kv_heads * turboquant_slot_bytes(kv_cache_dtype, head_dim)
    return 2 * num_kv_heads * head_dim * element_bytes


def turboquant_block_size(model_page_per_token: int, packed_page_per_token: int, block_size: int) -> int:
    """The block size vLLM runs a TurboQuant model at, given ``block_size`` (16 when not given): the least
    multiple of ``max(16, block_size)`` whose packed page covers a boundary layer's page of 16 tokens
    (``Platform._align_heterogeneous_kv_block_size``, which may override ``--block-size``), so both kinds of
    layer share one pool. Llama-3-8B: 48, 64, 80, 96 tokens for k8v4, 4bit_nc, k3v4_nc, 3bit_nc."""
    alignment = max(TURBOQUANT_KERNEL_BLOCK, block_size)
    required = model_page_per_token * TURBOQUANT_KERNEL_BLOCK
    return max(block_size, alignment * -(-required // (alignment * packed_page_per_token)))


def model_kind_refusal(kv_cache_dtype: str, *, mla: bool, sparse: bool, sliding_window: bool) -> str | None:
    """Why vLLM (or kvsim) stores no KV of a model of this kind at ``kv_cache_dtype`` on an NVIDIA GPU; None
    where it does. ``mla``: latent attention; ``sparse``: with a lightning indexer; ``sliding_window``: some
    layers windowed (or chunked-local)."""
    if kv_cache_dtype in NOT_ON_CUDA:
        return NOT_ON_CUDA[kv_cache_dtype]
    if kv_cache_dtype in DS_MLA and not sparse:
        return (f"{kv_cache_dtype} is FlashMLA's sparse MLA record: only vLLM's sparse MLA backends store it "
                "(FLASHMLA_SPARSE, FLASHINFER_MLA_SPARSE_SM120), for a model with a lightning indexer "
                "(index_topk, e.g. deepseek-v3.2)")
    if not mla:
        if kv_cache_dtype in TURBOQUANT and sliding_window:
            return (f"kvsim does not place {kv_cache_dtype} on a model with sliding-window or chunked-local "
                    "layers: vLLM gives those layers a block size of their own and pads the boundary layers' pages to a shared one "
                    "(Attention.get_kv_cache_spec), which kvsim does not model")
        return None
    if kv_cache_dtype in NVFP4:
        return (f"vLLM refuses {kv_cache_dtype} KV with MLA (VllmConfig.validate_nvfp4_kv_cache_with_mla): "
                "use fp8, auto, or nvfp4_ds_mla with a sparse MLA backend")
    if kv_cache_dtype in PER_TOKEN_HEAD + TURBOQUANT:
        backend = "TURBOQUANT" if kv_cache_dtype in TURBOQUANT else "TRITON_ATTN"
        return (f"vLLM stores {kv_cache_dtype} with {backend}, not an MLA backend: none of its CUDA MLA "
                "backends lists it in supported_kv_cache_dtypes")
    return None


def gpu_refusal(kv_cache_dtype: str, compute_capability: float, head_dim: int) -> str | None:
    """Why vLLM stores no KV at ``kv_cache_dtype`` on a GPU of ``compute_capability`` (heads of ``head_dim``);
    None where it does. NVFP4 is FlashInfer's, on compute capability 8.0 to 12.1
    (``FlashInferBackend.supports_compute_capability``); on 8.x, 9.x and 12.x its FA2 path writes plain
    ``nvfp4`` only and misreads heads of 64 (``supports_kv_cache_dtype``, ``supports_combination``), so
    ``nvfp4_4over6`` needs Blackwell (10.x, TRT-LLM kernels), as FlashMLA's ``nvfp4_ds_mla`` does
    (``FlashMLASparseBackend.supports_combination``: "SM100 only")."""
    major = int(compute_capability)
    where = f"compute capability {compute_capability:.1f}"
    if kv_cache_dtype == "nvfp4_ds_mla" and major != 10:
        return f"vLLM's FLASHMLA_SPARSE stores nvfp4_ds_mla on Blackwell (compute capability 10.x) only, not {where}"
    if kv_cache_dtype not in NVFP4:
        return None
    if major not in (8, 9, 10, 12) or compute_capability > 12.1:
        return (f"vLLM stores {kv_cache_dtype} with FlashInfer on compute capability 8.x, 9.x, 10.x and 12.0 to 12.1 "
                f"only, not {where}")
    if head_dim not in NVFP4_HEAD_SIZES:
        return f"FlashInfer, which stores {kv_cache_dtype}, takes head sizes {NVFP4_HEAD_SIZES}, not {head_dim}"
    if major == 10:
        return None
    if kv_cache_dtype == "nvfp4_4over6":
        return (f"vLLM stores nvfp4_4over6 on Blackwell (compute capability 10.x) only: on {where} FlashInfer's "
                "FA2 writer has no scale search and takes plain nvfp4 alone")
    if head_dim == 64:
        return f"vLLM refuses nvfp4 at head size 64 on {where}: FlashInfer's FA2 prefill misreads it"
    return None
