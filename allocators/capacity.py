"""KV capacity: how many token slots a deployment has, derived the way vLLM sizes its KV cache.

vLLM takes ``gpu_memory_utilization`` of each GPU, subtracts the weights and the activation peak it
profiles, and gives the rest to KV blocks. kvsim does the same arithmetic from the catalog, or takes the
KV size directly (``--kv-gib`` / ``--kv-tokens``) when the user knows it, as the paper states 12 GiB for
OPT-13B on an A100-40GB.
"""

from __future__ import annotations

from dataclasses import dataclass

from allocators.base import Allocator
from allocators.catalog import GIB, GpuSpec, ModelSpec


@dataclass(frozen=True, slots=True)
class KVCapacity:
    """The KV budget of one deployment, in bytes and in token slots, with where it came from."""

    model: ModelSpec
    kv_bytes: int
    kv_tokens: int
    source: str
    gpu: GpuSpec | None = None
    tensor_parallel: int = 1
    weight_bytes_per_gpu: float = 0.0
    activation_reserve_bytes_per_gpu: float = 0.0

    @property
    def kv_gib(self) -> float:
        return self.kv_bytes / GIB


def activation_reserve_bytes(model: ModelSpec, max_num_batched_tokens: int, tensor_parallel: int = 1) -> float:
    """Approximate peak activation memory of one forward pass over ``max_num_batched_tokens`` tokens.

    vLLM measures this by profiling; kvsim approximates it by the largest live intermediates of a layer
    (the residual stream and QKV/attention outputs, about 4 x hidden, plus the MLP's intermediate), in the
    model's dtype, split over tensor-parallel ranks. For OPT-13B at 2,048 tokens this is about 0.16 GiB, which
    with 0.9 utilization of an A100-40GB leaves the paper's 12 GiB of KV memory.
    """
    per_token = (4 * model.hidden_size + model.intermediate_size) * model.dtype_bytes
    return max_num_batched_tokens * per_token / tensor_parallel


def kv_capacity(
    model: ModelSpec,
    gpu: GpuSpec | None = None,
    *,
    tensor_parallel: int = 1,
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int = 2048,
    kv_gib: float | None = None,
    kv_tokens: int | None = None,
) -> KVCapacity:
    """Return the KV capacity, from an explicit size if one is given, else derived from the GPU.

    Raises ValueError with a one-line reason for negative sizes, a ``kv_gib`` larger than the GPUs' memory
    (``kv_tokens`` is the way to ask for an arbitrary pool), or a model that does not fit.
    """
    if kv_gib is not None and kv_tokens is not None:
        raise ValueError("give at most one of --kv-gib and --kv-tokens")
    if tensor_parallel < 1:
        raise ValueError(f"--tensor-parallel must be >= 1, got {tensor_parallel}")
    per_token = model.kv_bytes_per_token
    common = dict(model=model, gpu=gpu, tensor_parallel=tensor_parallel)
    if kv_tokens is not None:
        if kv_tokens <= 0:
            raise ValueError(f"--kv-tokens must be positive, got {kv_tokens}")
        return KVCapacity(kv_bytes=kv_tokens * per_token, kv_tokens=int(kv_tokens), source="kv_tokens", **common)
    if kv_gib is not None:
        if kv_gib <= 0:
            raise ValueError(f"--kv-gib must be positive, got {kv_gib}")
        if gpu is not None and kv_gib * GIB > gpu.memory_bytes * tensor_parallel:
            raise ValueError(f"--kv-gib {kv_gib:g} exceeds the memory of {tensor_parallel} x {gpu.name} "
                             f"({gpu.memory_gib * tensor_parallel:.1f} GiB); lower it, raise --tensor-parallel, or "
                             "give --kv-tokens to size the pool regardless of the GPU")
        kv_bytes = int(round(kv_gib * GIB))
        return KVCapacity(kv_bytes=kv_bytes, kv_tokens=kv_bytes // per_token, source="kv_gib", **common)
    if gpu is None:
        raise ValueError("a GPU is needed to derive the KV capacity (or give --kv-gib / --kv-tokens)")
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization}")
    weights = model.weight_bytes / tensor_parallel
    activations = activation_reserve_bytes(model, max_num_batched_tokens, tensor_parallel)
    per_gpu = gpu.memory_bytes * gpu_memory_utilization - weights - activations
    if per_gpu <= 0:
        raise ValueError(
            f"{model.name} does not fit on {tensor_parallel} x {gpu.name}: weights {weights / GIB:.1f} GiB per GPU "
            f"+ activations {activations / GIB:.2f} GiB exceed {gpu_memory_utilization:.0%} of "
            f"{gpu.memory_gib:.1f} GiB; raise --tensor-parallel or pick a larger GPU"
        )
    kv_bytes = int(per_gpu * tensor_parallel)
    return KVCapacity(
        kv_bytes=kv_bytes,
        kv_tokens=kv_bytes // per_token,
        source="derived",
        weight_bytes_per_gpu=weights,
        activation_reserve_bytes_per_gpu=activations,
        **common,
    )


def fill_to_capacity(allocator: Allocator, prompt_len: int, output_len: int) -> int:
    """Admit requests of ``prompt_len`` tokens and grow each by ``output_len`` until one does not fit;
    returns how many fit (the one that did not is taken out again)."""
    final = prompt_len + output_len
    count = 0
    while True:
        if allocator.admit(count, prompt_len, final_tokens=final) is None:
            return count
        if output_len and allocator.grow(count, output_len) is None:
            allocator.free(count)
            return count
        count += 1
