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
blocks as FLASHINFER_MLA ahead of it, so it never changes the block size).

Sparse MLA (a model with a lightning indexer, catalog ``index_topk``: DeepSeek-V3.2) is served only by the
sparse backends, and a dense one only by the others (``AttentionBackend.validate_configuration``: "sparse not
supported"); vLLM lists them after the dense ones. Its indexer key cache has a backend of its own,
DEEPSEEK_V32_INDEXER, whose CUDA kernels take blocks of 64 (``v1/attention/backends/mla/indexer.py``), and
vLLM picks the least block size both the MLA backend and the indexer take
(``Platform._preferred_block_size_for_backends``), so every sparse run is in blocks of 64 unless a multiple of
64 is given; any other ``--block-size`` is refused:

| GPU (compute capability) | KV dtype | sparse backend | block size without ``--block-size`` |
|---|---|---|---|
| H100, H200 (9.0) | 16-bit | FLASH_ATTN_MLA_SPARSE (multiples of 64) | 64 |
| H100, H200 (9.0) | fp8 | FLASHMLA_SPARSE (multiples of 64; stores FlashMLA's 656-byte fp8_ds_mla record) | 64 |
| H100, H200 (9.0) | fp8_e4m3 | FLASHINFER_MLA_SPARSE_SM90 (multiples of 64; FlashInfer >= 0.6.18) | 64 |
| A100, A10G, L4 (8.x) | any | none: vLLM refuses to start | - |
| Blackwell, e.g. B200 (10.0) | fp8; 16-bit | FLASHINFER_MLA_SPARSE (multiples of 32); FLASHMLA_SPARSE (64) | 64 |

Left out of the sparse ones: FLASH_ATTN_MLA_SPARSE_FA4, which Blackwell puts first for 16-bit KV at 16 or fewer
heads per GPU (multiples of 64, so the block size is the same; kvsim's priority has no heads per GPU).

The sparse backend also decides how an fp8 latent is stored (`with_backend_kv_layout`): FLASHMLA_SPARSE turns
every quantized ``--kv-cache-dtype`` into FlashMLA's 656-byte ``fp8_ds_mla`` record, FLASHINFER_MLA_SPARSE_SM120
also ``auto``; the other FlashInfer ones store a plain 576-byte fp8 latent (so Hopper's ``fp8`` is 656 bytes a
layer, its ``fp8_e4m3`` and Blackwell's ``fp8`` 576).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

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
    ``fp8_capability``: the least compute capability its fp8 KV needs (Triton's native fp8, else 0);
    ``sparse``: a sparse MLA backend (it serves models with an indexer, and only those);
    ``capability_majors``: further majors it runs on (FLASHMLA_SPARSE: Hopper and Blackwell);
    ``ds_mla_dtypes``: the KV dtypes it stores as FlashMLA's ``fp8_ds_mla`` record (`with_backend_kv_layout`)."""

    name: str
    capability_major: int | None
    kv_cache_dtypes: tuple[str, ...]
    kernel_block_sizes: tuple[int, ...]
    head_sizes: tuple[int, ...] | None = _COMMON_HEAD_SIZES
    qk_nope_head_dims: tuple[int, ...] | None = None
    fp8_capability: float = 0.0
    sparse: bool = False
    capability_majors: tuple[int, ...] = ()
    ds_mla_dtypes: tuple[str, ...] = ()

    def takes_block_size(self, block_size: int) -> bool:
        return any(block_size % size == 0 for size in self.kernel_block_sizes)

    def preferred_block_size(self, model: ModelSpec | None = None) -> int:
        """The block size vLLM sets for this backend when ``--block-size`` is not given: for a sparse ``model``
        the least one this backend and the indexer's both take (`INDEXER_KERNEL_BLOCK_SIZES`)."""
        if model is not None and model.sparse_attention:
            if self.takes_block_size(DEFAULT_BLOCK_SIZE) and indexer_takes(DEFAULT_BLOCK_SIZE):
                return DEFAULT_BLOCK_SIZE
            return min(math.lcm(s, i) for s in self.kernel_block_sizes for i in INDEXER_KERNEL_BLOCK_SIZES)
        return DEFAULT_BLOCK_SIZE if self.takes_block_size(DEFAULT_BLOCK_SIZE) else min(self.kernel_block_sizes)

    def runs_on(self, capability: float) -> bool:
        """Whether its kernels run on a GPU of compute ``capability`` (``supports_compute_capability``)."""
        major = int(capability)
        return self.capability_major is None or major == self.capability_major or major in self.capability_majors

    def serves(self, model: ModelSpec, capability: float, block_size: int | None) -> bool:
        """Whether vLLM finds this backend valid for ``model`` (at its KV dtype) on a GPU of ``capability``,
        asked about ``block_size`` (None: not given)."""
        dtype = kv_cache_dtype_name(model)
        return (self.runs_on(capability) and self.sparse == model.sparse_attention and dtype in self.kv_cache_dtypes and (dtype not in FP8 or capability >= self.fp8_capability)
                and (self.head_sizes is None or mla_head_size(model) in self.head_sizes)
                and (self.qk_nope_head_dims is None or qk_nope_head_dim(model) in self.qk_nope_head_dims)
                and (block_size is None or self.takes_block_size(block_size)))


FLASHINFER_MLA = MlaBackend("FLASHINFER_MLA", 10, _SIXTEEN_BIT + FP8, (32, 64), qk_nope_head_dims=(64, 128, 192))
CUTLASS_MLA = MlaBackend("CUTLASS_MLA", 10, _SIXTEEN_BIT + FP8, (128,))
FLASH_ATTN_MLA = MlaBackend("FLASH_ATTN_MLA", 9, _SIXTEEN_BIT, (16,))  # FlashAttention 3: Hopper only
FLASHMLA = MlaBackend("FLASHMLA", 9, _SIXTEEN_BIT + FP8, (64,))  # dense FlashMLA: Hopper only
TRITON_MLA = MlaBackend("TRITON_MLA", None, _SIXTEEN_BIT + FP8, (16,), head_sizes=None, fp8_capability=8.9)

# sparse MLA (vllm 0.33, v1/attention/backends/mla/*sparse*.py: supported_kv_cache_dtypes,
# get_supported_kernel_block_sizes, get_supported_head_sizes, supports_compute_capability)
FLASH_ATTN_MLA_SPARSE = MlaBackend("FLASH_ATTN_MLA_SPARSE", 9, _SIXTEEN_BIT, (64,), head_sizes=None, sparse=True)
FLASHMLA_SPARSE = MlaBackend("FLASHMLA_SPARSE", 9, ("auto", "bfloat16", "fp8", "fp8_ds_mla", "nvfp4_ds_mla"), (64,),
                             head_sizes=(512, 576), sparse=True, capability_majors=(10,),
                             ds_mla_dtypes=FP8 + ("fp8_ds_mla",))  # nvfp4_ds_mla on 10.x only: kv_formats
FLASHINFER_MLA_SPARSE_SM90 = MlaBackend("FLASHINFER_MLA_SPARSE_SM90", 9, ("auto", "bfloat16") + FP8, (64,),
                                        head_sizes=(512, 576), sparse=True)
FLASHINFER_MLA_SPARSE = MlaBackend("FLASHINFER_MLA_SPARSE", 10, _SIXTEEN_BIT + FP8, (32,), head_sizes=(512, 576),
                                   qk_nope_head_dims=(128, 192), sparse=True)
FLASHINFER_MLA_SPARSE_SM120 = MlaBackend("FLASHINFER_MLA_SPARSE_SM120", 12, ("auto",) + FP8 + ("fp8_ds_mla",), (64,),
                                         head_sizes=(512, 576), sparse=True,
                                         ds_mla_dtypes=("auto",) + FP8 + ("fp8_ds_mla",))

INDEXER_KERNEL_BLOCK_SIZES = (64,)
"""Block sizes the sparse indexer's key cache takes on CUDA, a block being a multiple of one of them
(``DeepseekV32IndexerBackend.get_supported_kernel_block_sizes``: ``[64]`` off ROCm)."""


def indexer_takes(block_size: int) -> bool:
    """Whether the indexer's kernels take blocks of ``block_size`` tokens."""
    return any(block_size % size == 0 for size in INDEXER_KERNEL_BLOCK_SIZES)


def priority(capability: float, kv_cache_dtype: str = "auto") -> tuple[MlaBackend, ...]:
    """vLLM's MLA backends for a GPU of ``capability``, first choice first (``_get_backend_priorities``), the
    sparse ones last (a sparse model's only candidates). Blackwell orders its sparse ones by the KV dtype
    (``kv_cache_dtype``, vLLM's name): FlashInfer's first for fp8, FlashMLA's first otherwise."""
    major = int(capability)
    if major == 10:
        sparse = ((FLASHINFER_MLA_SPARSE, FLASHMLA_SPARSE) if kv_cache_dtype in FP8
                  else (FLASHMLA_SPARSE, FLASHINFER_MLA_SPARSE))
        return (FLASHINFER_MLA, CUTLASS_MLA, FLASH_ATTN_MLA, FLASHMLA, TRITON_MLA) + sparse
    if major == 12:
        return TRITON_MLA, FLASHINFER_MLA_SPARSE_SM120
    return (FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA, FLASH_ATTN_MLA_SPARSE, FLASHMLA_SPARSE,
            FLASHINFER_MLA_SPARSE_SM90)


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
    (None: ``--block-size`` not given); None when none is valid, and vLLM refuses to start (also where a sparse
    model's indexer does not take the given block size: `indexer_takes`). ``gpu`` must give its compute
    capability."""
    if model.sparse_attention and block_size is not None and not indexer_takes(block_size):
        return None
    backends = priority(gpu.compute_capability, kv_cache_dtype_name(model))
    return next((b for b in backends if b.serves(model, gpu.compute_capability, block_size)), None)


def with_backend_kv_layout(model: ModelSpec, gpu: GpuSpec | None) -> ModelSpec:
    """``model`` with its sparse MLA latent laid out as the backend vLLM 0.33 serves it with on ``gpu`` stores it
    (`ModelSpec.fp8_ds_mla`); unchanged for a model without an indexer, a GPU of unknown compute capability, or
    one no backend serves (vLLM refuses to start; `sim.kernel.block_size` says so).

    vLLM picks the backend first (``get_attn_backend`` in ``MLAAttention.__init__``), then
    ``_canonicalize_sparse_mla_kv_cache_dtype`` (``model_executor/layers/attention/mla_attention.py``) sets the
    cache dtype: FLASHMLA_SPARSE turns a quantized one (``is_quantized_kv_cache``: fp8) into ``fp8_ds_mla``,
    FLASHINFER_MLA_SPARSE_SM120 ``auto``, ``fp8`` and ``fp8_e4m3``; every other keeps its dtype, and
    FLASHINFER_MLA_SPARSE logs "Using standard fp8 KV cache format" for fp8. ``get_kv_cache_spec`` then sizes
    a token by ``state_content_bytes={"fp8_ds_mla": 656, ...}`` where set, else ``head_size`` (576) elements of
    the dtype. The backend's choice does not turn on the block size here: every sparse backend takes the
    multiples of 64 the indexer needs, so the one asked without ``--block-size`` is the one a valid run gets."""
    if not model.sparse_attention or gpu is None or gpu.compute_capability is None:
        return model
    backend = mla_backend(model, gpu, None)
    if backend is None:
        return model
    return replace(model, fp8_ds_mla=kv_cache_dtype_name(model) in backend.ds_mla_dtypes)
