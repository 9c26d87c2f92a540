"""The attention backend vLLM serves an MLA model with on a GPU, and the KV block size that follows from it.

Why: vLLM does not take the block size of an MLA model (DeepSeek's latent KV) from ``--block-size`` alone.
At start-up (vllm 0.33.0, `vllm/platforms/cuda.py` ``get_valid_backends``) it walks its MLA attention backends
in its priority order for the GPU's compute capability and takes the first whose kernels accept the model's
latent head size, the ``--kv-cache-dtype`` and, only when the user gave one, the block size. Without a
``--block-size`` the block size is then that backend's preferred one (``Platform.update_block_size_for_backend``,
``AttentionBackend.get_preferred_block_size``): 16, vLLM's default, where its kernels take 16, else the least
block they take. A given ``--block-size`` is kept whenever some backend takes it (a lower-priority one if need
be); when none does, vLLM refuses to start. So on the catalog's GPUs:

| GPU (compute capability) | KV dtype | backend | block size without ``--block-size`` |
|---|---|---|---|
| H100, H200 (9.0) | 16-bit | FLASH_ATTN_MLA (multiples of 16) | 16 |
| H100, H200 (9.0) | fp8 | FLASHMLA (multiples of 64) | 64 |
| A100, A10G, L4 (8.x) | 16-bit; fp8 from 8.9 | TRITON_MLA (multiples of 16) | 16 |
| Blackwell, e.g. B200 (10.0) | 16-bit or fp8 | FLASHINFER_MLA (multiples of 32 or 64) | 32 |

A block a backend takes is a multiple of one of its kernel block sizes (vLLM splits a larger block into kernel
blocks). Left out: TOKENSPEED_MLA (Blackwell, fp8 only, a separately installed package; it takes the same
blocks as FLASHINFER_MLA ahead of it, so it never changes the block size) and the sparse MLA backends (models
with an indexer, DeepSeek-V3.2, which the catalog has no field for).
"""

from __future__ import annotations

from dataclasses import dataclass

from allocators.catalog import GpuSpec, ModelSpec

DEFAULT_BLOCK_SIZE = 16
"""vLLM's ``CacheConfig.DEFAULT_BLOCK_SIZE``: the block size a backend is asked about first."""

_COMMON_HEAD_SIZES = (320, 512, 576)
"""Latent + rope dims every MLA backend but Triton's takes (``MLACommonBackend.get_supported_head_sizes``)."""
_SIXTEEN_BIT = ("auto", "float16", "bfloat16")
FP8 = ("fp8", "fp8_e4m3")
"""The fp8 KV dtypes MLA backends store (none stores fp8_e5m2)."""
_VLLM_DTYPE = {"fp16": "float16", "half": "float16", "bf16": "bfloat16"}
"""kvsim's spellings of ``--kv-cache-dtype`` values that vLLM spells otherwise."""


@dataclass(frozen=True, slots=True)
class MlaBackend:
    """One of vLLM's MLA attention backends: where it runs and what its kernels take.

    ``capability_major``: the compute capability major it runs on (None: any); ``kernel_block_sizes``: a block
    it takes is a multiple of one of them; ``head_sizes``: latent + rope dims it takes (None: any);
    ``fp8_capability``: the least compute capability its fp8 KV needs (Triton's native fp8, else 0)."""

    name: str
    capability_major: int | None
    kv_cache_dtypes: tuple[str, ...]
    kernel_block_sizes: tuple[int, ...]
    head_sizes: tuple[int, ...] | None = _COMMON_HEAD_SIZES
    qk_nope_head_dims: tuple[int, ...] | None = None
    fp8_capability: float = 0.0

    def takes_block_size(self, block_size: int) -> bool:
        return any(block_size % size == 0 for size in self.kernel_block_sizes)

    def preferred_block_size(self) -> int:
        """The block size vLLM sets for this backend when ``--block-size`` is not given."""
        return DEFAULT_BLOCK_SIZE if self.takes_block_size(DEFAULT_BLOCK_SIZE) else min(self.kernel_block_sizes)

    def serves(self, model: ModelSpec, capability: float, block_size: int | None) -> bool:
        """Whether vLLM finds this backend valid for ``model`` (at its KV dtype) on a GPU of ``capability``,
        asked about ``block_size`` (None: not given)."""
        dtype = kv_cache_dtype_name(model)
        return ((self.capability_major is None or int(capability) == self.capability_major)
                and dtype in self.kv_cache_dtypes and (dtype not in FP8 or capability >= self.fp8_capability)
                and (self.head_sizes is None or mla_head_size(model) in self.head_sizes)
                and (self.qk_nope_head_dims is None or qk_nope_head_dim(model) in self.qk_nope_head_dims)
                and (block_size is None or self.takes_block_size(block_size)))


FLASHINFER_MLA = MlaBackend("FLASHINFER_MLA", 10, _SIXTEEN_BIT + FP8, (32, 64), qk_nope_head_dims=(64, 128, 192))
CUTLASS_MLA = MlaBackend("CUTLASS_MLA", 10, _SIXTEEN_BIT + FP8, (128,))
FLASH_ATTN_MLA = MlaBackend("FLASH_ATTN_MLA", 9, _SIXTEEN_BIT, (16,))  # FlashAttention 3: Hopper only
FLASHMLA = MlaBackend("FLASHMLA", 9, _SIXTEEN_BIT + FP8, (64,))  # dense FlashMLA: Hopper only
TRITON_MLA = MlaBackend("TRITON_MLA", None, _SIXTEEN_BIT + FP8, (16,), head_sizes=None, fp8_capability=8.9)


def priority(capability: float) -> tuple[MlaBackend, ...]:
    """vLLM's MLA backends for a GPU of ``capability``, first choice first (``_get_backend_priorities``)."""
    major = int(capability)
    if major == 10:
        return FLASHINFER_MLA, CUTLASS_MLA, FLASH_ATTN_MLA, FLASHMLA, TRITON_MLA
    if major == 12:
        return (TRITON_MLA,)
    return FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA


def kv_cache_dtype_name(model: ModelSpec) -> str:
    """``model``'s KV dtype as vLLM names it (kvsim also takes fp16, half and bf16)."""
    return _VLLM_DTYPE.get(model.kv_cache_dtype, model.kv_cache_dtype)


def mla_head_size(model: ModelSpec) -> int:
    """What vLLM calls an MLA layer's head size: the latent and the rope key, one cache entry per token."""
    return model.kv_lora_rank + model.qk_rope_head_dim


def qk_nope_head_dim(model: ModelSpec) -> int:
    """The query/key dims without rope: an MLA model's ``head_dim`` is those and the rope dims (DeepSeek-V3's
    192 = 128 + 64)."""
    return model.head_dim - model.qk_rope_head_dim


def mla_backend(model: ModelSpec, gpu: GpuSpec, block_size: int | None) -> MlaBackend | None:
    """The backend vLLM serves MLA ``model`` (at its KV dtype) with on ``gpu``, asked about ``block_size``
    (None: ``--block-size`` not given); None when none is valid, and vLLM refuses to start. ``gpu`` must
    give its compute capability."""
    return next((b for b in priority(gpu.compute_capability) if b.serves(model, gpu.compute_capability, block_size)),
                None)
