"""The block size a run's pool hands out: ``--block-size`` when given, else the one vLLM would choose.

Why: vLLM serves an MLA model (DeepSeek's latent KV) with the attention backend its GPU and KV dtype call for,
and without a ``--block-size`` takes that backend's block size (`allocators.mla_backends`: 64 for FLASHMLA,
which an H100 or H200 runs with fp8 KV). A ``paged`` run at 16 there would report block counts, last-block
waste and prefix-cache granularity that no vLLM server has. vLLM tells a given block size from none at all,
whatever its value (vllm 0.33.0 ``CacheConfig._apply_block_size_default`` sets ``user_specified_block_size``
for any given one, 16 included; ``v1/attention/selector.py`` asks the backends about the block size only then,
and ``Platform.update_block_size_for_backend`` replaces it with the backend's only when it was not given), so
kvsim does too: ``block_size`` None (the default) is vLLM's choice, 16 (``CacheConfig.DEFAULT_BLOCK_SIZE``)
or the MLA backend's; a given one, 16 included, is kept whenever a backend takes it (``--block-size 16`` with
fp8 latents on an H100: TRITON_MLA, in blocks of 16); where none does vLLM refuses to start
(`block_size_refusal`), and kvsim runs it as given. Only the allocators whose blocks are vLLM's follow the
backend (`follows_vllm_block_size`), on GPUs whose compute capability is known.

TurboQuant KV (``--kv-cache-dtype turboquant_*``) keeps its boundary layers at the model dtype, and vLLM raises
the block size, given or not, until a packed page covers one of theirs
(`allocators.kv_formats.turboquant_block_size`): 48 tokens for Llama-3-8B at turboquant_k8v4. A hybrid Mamba
model's attention block, given or not, is raised until its page holds a Mamba state
(`allocators.mamba_layout.hybrid_block_size`): 1,040 tokens for Nemotron-H-8B.
"""

from __future__ import annotations

from typing import Protocol

from allocators.catalog import GpuSpec, ModelSpec
from allocators.kv_formats import TURBOQUANT, gqa_layer_bytes, turboquant_block_size
from allocators.mla_backends import (
    DEFAULT_BLOCK_SIZE,
    FP8,
    INDEXER_KERNEL_BLOCK_SIZES,
    TRITON_MLA,
    MlaBackend,
    indexer_takes,
    kv_cache_dtype_name,
    mla_backend,
    mla_head_size,
    priority,
)
from allocators.option_use import follows_vllm_block_size


class BlockSizeConfig(Protocol):
    """What these rules read of a `sim.kernel.config.SimConfig` (not imported: it validates --over-length,
    whose module reports refusals from here)."""

    allocator: str
    block_size: int | None
    decode_context_parallel_size: int


def _applies(config: BlockSizeConfig, model: ModelSpec, gpu: GpuSpec) -> bool:
    return (bool(model.kv_lora_rank) and gpu.compute_capability is not None
            and follows_vllm_block_size(config.allocator))


def run_block_size(config: BlockSizeConfig, model: ModelSpec | None = None, gpu: GpuSpec | None = None) -> int:
    """The tokens per block of a run of ``config`` serving ``model`` (at its KV dtype) on ``gpu``: the given
    ``block_size``, else vLLM's choice (the MLA backend's where `_applies`, else 16). Without a model and GPU,
    a block size not given is vLLM's default. TurboQuant's, given or not, as vLLM raises it (`_turboquant`)."""
    if model is not None and (raised := _turboquant(config, model)) is not None:
        return raised
    if model is not None and model.mamba is not None:  # raised until a page holds a Mamba state
        from allocators.mamba_layout import KERNEL_BLOCK, block_alignment, model_block_size

        align = block_alignment(model.mamba, getattr(config, "prefix_caching", True),  # vLLM's default: on
                                None if gpu is None else gpu.compute_capability)
        return model_block_size(model, getattr(config, "tensor_parallel", 1), config.block_size or KERNEL_BLOCK,
                                align)
    if config.block_size is not None:
        return config.block_size
    if model is None or gpu is None or not _applies(config, model, gpu):
        return DEFAULT_BLOCK_SIZE
    backend = mla_backend(model, gpu, None)
    return DEFAULT_BLOCK_SIZE if backend is None else backend.preferred_block_size(model)


def _turboquant(config: BlockSizeConfig, model: ModelSpec) -> int | None:
    """The block size vLLM runs TurboQuant KV at (None for any other dtype, or an allocator whose blocks are not
    vLLM's): ``--block-size`` (16 when not given) raised until a packed page covers a boundary layer's."""
    if model.kv_cache_dtype not in TURBOQUANT or not follows_vllm_block_size(config.allocator):
        return None
    plain = gqa_layer_bytes("", model.num_kv_heads, model.head_dim, model.dtype_bytes)
    packed = gqa_layer_bytes(model.kv_cache_dtype, model.num_kv_heads, model.head_dim, 1)
    return turboquant_block_size(plain, packed, config.block_size or DEFAULT_BLOCK_SIZE)


def _takes(backends: list[MlaBackend]) -> str:
    sizes = sorted({s for b in backends for s in b.kernel_block_sizes})
    return "multiples of " + " or ".join(str(s) for s in sizes)


def _indexer(model: ModelSpec) -> str:
    """The sparse indexer's part of a message ("" for a dense model)."""
    if not model.sparse_attention:
        return ""
    sizes = " or ".join(str(s) for s in INDEXER_KERNEL_BLOCK_SIZES)
    return f", and its DEEPSEEK_V32_INDEXER key cache multiples of {sizes}"


def _where(model: ModelSpec, gpu: GpuSpec) -> str:
    return (f"{model.name}'s MLA layers (--kv-cache-dtype {model.kv_cache_dtype}) on {gpu.name} (compute "
            f"capability {gpu.compute_capability:.1f})")


def block_size_choice(config: BlockSizeConfig, model: ModelSpec, gpu: GpuSpec) -> str | None:
    """Why a run given no ``--block-size`` has blocks other than 16 (the setup line says it, as a run's block
    size decides its block counts and waste); None where the blocks are 16 or the size was given and kept."""
    if (raised := _turboquant(config, model)) is not None and raised != (config.block_size or DEFAULT_BLOCK_SIZE):
        return (f"blocks of {raised} tokens, as vLLM raises the block size for {model.kv_cache_dtype} KV until a "
                f"packed page covers one of the first and last two layers', which keep {model.name}'s dtype")
    if model.mamba is not None and (size := run_block_size(config, model, gpu)) != (config.block_size
                                                                                  or DEFAULT_BLOCK_SIZE):
        return (f"blocks of {size} tokens, as vLLM raises the attention block size until one page holds a "
                f"{model.mamba.label} layer's state ({model.name}'s Mamba groups' blocks are pages of that size)")
    if config.block_size is not None or not _applies(config, model, gpu):
        return None
    backend = mla_backend(model, gpu, None)
    size = DEFAULT_BLOCK_SIZE if backend is None else backend.preferred_block_size(model)
    if size == DEFAULT_BLOCK_SIZE:
        return None
    return (f"blocks of {size} tokens, as vLLM sets where --block-size is not given: it serves {_where(model, gpu)} "
            f"with its {backend.name} attention backend, whose kernels take {_takes([backend])}{_indexer(model)}")


def block_size_refusal(config: BlockSizeConfig, model: ModelSpec, gpu: GpuSpec) -> str | None:
    """Why vLLM would find no MLA attention backend for this run, and refuse to start; None when it finds one
    (or the rule does not apply: `run_block_size`)."""
    if not _applies(config, model, gpu) or mla_backend(model, gpu, config.block_size) is not None:
        return None
    backends = [b for b in priority(gpu.compute_capability, kv_cache_dtype_name(model))
                if b.sparse == model.sparse_attention]
    if without := [b for b in backends if b.serves(model, gpu.compute_capability, None)]:
        if any(b.takes_block_size(config.block_size) for b in without) and not indexer_takes(config.block_size):
            return (f"the sparse attention indexer takes no --block-size {config.block_size} for "
                    f"{_where(model, gpu)}: its DEEPSEEK_V32_INDEXER kernels take multiples of "
                    f"{' or '.join(str(s) for s in INDEXER_KERNEL_BLOCK_SIZES)}")
        kind = "sparse MLA" if model.sparse_attention else "MLA"
        return (f"no {kind} attention backend takes --block-size {config.block_size} for {_where(model, gpu)}: "
                f"{', '.join(b.name for b in without)} take {_takes(without)}{_indexer(model)}")
    dtype = kv_cache_dtype_name(model)
    if model.sparse_attention:
        if not [b for b in backends if b.runs_on(gpu.compute_capability)]:
            return (f"vLLM has no sparse MLA attention backend for {_where(model, gpu)}: they run on compute "
                    "capability 9.x, 10.x and 12.x only")
        return (f"none of vLLM's sparse MLA attention backends ({', '.join(b.name for b in backends)}) takes "
                f"{_where(model, gpu)}, a latent head size of {mla_head_size(model)} with {dtype} KV")
    fp8 = (f" (TRITON_MLA's fp8 needs compute capability {TRITON_MLA.fp8_capability:.1f})"
           if dtype in FP8 and gpu.compute_capability < TRITON_MLA.fp8_capability else "")
    return (f"none of vLLM's MLA attention backends ({', '.join(b.name for b in backends)}) takes "
            f"{_where(model, gpu)}, a latent head size of {mla_head_size(model)} with {dtype} KV{fp8}")


def scheduler_block_size(config: BlockSizeConfig, model: ModelSpec | None = None, gpu: GpuSpec | None = None) -> int:
    """The tokens per block of the pool a run's scheduler hands out: `run_block_size` (each GPU's block, vLLM's
    ``--block-size``) times ``decode_context_parallel_size``, whose GPUs each hold ``block_size`` tokens of a
    block (vllm 0.33 ``resolve_kv_cache_block_sizes``: ``cache_config.block_size * dcp``; a manager's
    ``kv_cache_spec.block_size * dcp_world_size``; `allocators.decode_context_parallel`). Prefix-cache hashes and
    hits land on these blocks too."""
    return run_block_size(config, model, gpu) * config.decode_context_parallel_size
