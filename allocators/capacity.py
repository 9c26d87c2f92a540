"""KV capacity: how many token slots a deployment has, derived the way vLLM sizes its KV cache.

vLLM 0.11 takes ``gpu_memory_utilization`` of each GPU, subtracts the weights, the activation peak it
profiles over a ``max_num_batched_tokens`` forward pass, and the non-torch allocations that profiling
measures, and gives the rest to KV blocks (its CUDA graphs are captured afterwards, out of the memory left
over by ``gpu_memory_utilization``). kvsim does the same arithmetic from the catalog, or takes
the KV size directly (``--kv-gib`` / ``--kv-tokens``) when the user knows it, as the paper states 12 GiB for
OPT-13B on an A100-40GB.

Checked against vLLM 0.11's logged pools on an H100 (``docs/validation.md``): Llama-2-7B at 4,096 batched
tokens, 7,438 blocks (kvsim 7,438); CodeLlama-34B at 64, 2,790 blocks (kvsim 2,790).

With a speculative drafter of the target's KV layout (EAGLE, EAGLE-3, MTP: ``drafter_layers``), vLLM puts the
drafter's attention layers in the target's KV cache group, so one block holds every layer of both and the pool
has ``available_memory // bytes_per_block`` blocks with the drafter's pages in ``bytes_per_block``
(``v1/core/kv_cache_planning.py``: ``get_kv_cache_config_from_groups``, ``_get_kv_cache_bytes_per_block``):
a token slot costs ``num_layers + drafter_layers`` layers (`pool_bytes_per_token`). The drafter's weights are
loaded before the memory is profiled, so they come out of the memory too (`drafter_weight_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from allocators.base import Allocator
from allocators.catalog import GIB, GpuSpec, ModelSpec
from allocators.decode_context_parallel import check_decode_context_parallel
from allocators.expert_parallel import check_expert_parallel, weight_bytes_per_gpu
from allocators.kv_formats import gpu_refusal
from allocators.mla_backends import with_backend_kv_layout


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
    non_torch_reserve_bytes_per_gpu: float = 0.0
    data_parallel: int = 1
    expert_parallel: bool = False
    drafter_layers: int = 0  # a speculative drafter's KV layers, in every block beside the model's
    decode_context_parallel: int = 1  # vLLM's --decode-context-parallel-size (`allocators.decode_context_parallel`)

    @property
    def kv_gib(self) -> float:
        return self.kv_bytes / GIB


NON_TORCH_RESERVE_BYTES = int(0.64 * GIB)
"""Memory vLLM 0.11 holds outside torch's activation peak when it sizes the KV cache: non-torch allocations
(cuBLAS workspaces, the CUDA context's growth, NCCL), measured by its profiling run. The two logged H100 runs leave
655 MiB (Llama-2-7B) and 653 MiB (CodeLlama-34B) after weights and `activation_reserve_bytes`; this is their
rounded mean, fitted to those two logs. It is not CUDA-graph memory: vLLM 0.11 captures its graphs after it has
sized and allocated the KV cache, so ``--enforce-eager`` leaves the cache's size as it is (later vLLMs estimate the
graphs' memory first, ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``; kvsim sizes as 0.11 does)."""


def activation_reserve_bytes(model: ModelSpec, max_num_batched_tokens: int, tensor_parallel: int = 1) -> float:
    """Peak activation memory of vLLM's profiling forward pass over ``max_num_batched_tokens`` tokens.

    The peak is inside an MLP: the gate-and-up projection's output (2 x intermediate) and the activated
    intermediate (1 x) live together with about four hidden-size tensors (the residual, the normed input,
    the attention output and its projection), in the model's dtype, split over tensor-parallel ranks. This
    accounts for the difference of the two logged vLLM 0.11 runs (Llama-2-7B at 4,096 tokens against
    CodeLlama-34B at 64: 374 MiB modelled, 375 MiB logged).
    """
    per_token = (3 * model.intermediate_size + 4 * model.hidden_size) * model.dtype_bytes
    return max_num_batched_tokens * per_token / tensor_parallel


def pool_bytes_per_token(model: ModelSpec, tensor_parallel: int = 1, drafter_layers: int = 0,
                         decode_context_parallel: int = 1) -> int:
    """What one token takes out of the pool of all ``tensor_parallel`` GPUs together: the model's
    `kv_bytes_per_token` when KV heads split evenly, more when GPUs keep copies (MLA's latent on every GPU,
    or more GPUs than KV heads); with ``drafter_layers`` more layers of the model's layout (a speculative
    drafter's, the module docstring). With ``decode_context_parallel`` N (which divides ``tensor_parallel``,
    `check_decode_context_parallel`) each token is stored on one GPU of every N instead of on all of them: a
    rank's pages hold its own share of every request's tokens (`allocators.decode_context_parallel`). A hybrid
    Mamba model's drafter layers are attention layers (Qwen3-Next's MTP layer: `allocators.mamba_layout.model_pool`)."""
    model = with_drafter_layers(model, drafter_layers)
    return model.kv_bytes_per_token_per_gpu(tensor_parallel) * (tensor_parallel // decode_context_parallel)


def with_drafter_layers(model: ModelSpec, drafter_layers: int) -> ModelSpec:
    """The model's KV layout with a speculative drafter's ``drafter_layers`` layers added: full-attention layers
    of the target's shape (the module docstring), so on a sliding-window model its full group grows by them
    (gpt-oss-20b with EAGLE: 12 sliding, 13 full, as vLLM's planner counts them)."""
    if drafter_layers and model.attention_layers is not None:
        return replace(model, num_layers=model.num_layers + drafter_layers,
                       attention_layers=model.attention_layers + drafter_layers)
    if drafter_layers:
        return replace(model, num_layers=model.num_layers + drafter_layers)
    return model


def drafter_weight_bytes(model: ModelSpec, drafter_layers: int) -> float:
    """The weights of a drafter of ``drafter_layers`` decoder layers, each taken as the model's average layer:
    its weights less the embedding and LM head (``2 x vocab x hidden``, which EAGLE shares with the target), over
    its layers. Approximate: an EAGLE layer's input projection and EAGLE-3's own LM head are left out."""
    if not drafter_layers:
        return 0.0
    layers = model.weight_bytes - 2 * model.vocab_size * model.hidden_size * model.dtype_bytes
    return drafter_layers * max(layers, 0.0) / model.num_layers


def kv_capacity(
    model: ModelSpec,
    gpu: GpuSpec | None = None,
    *,
    tensor_parallel: int = 1,
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int = 2048,
    kv_gib: float | None = None,
    kv_tokens: int | None = None,
    kv_cache_dtype: str = "auto",
    data_parallel: int = 1,
    expert_parallel: bool = False,
    drafter_layers: int = 0,
    decode_context_parallel: int = 1,
) -> KVCapacity:
    """Return the KV capacity, from an explicit size if one is given, else derived from the GPU as vLLM 0.11
    does (weights, the activation peak and `NON_TORCH_RESERVE_BYTES` out of the utilized memory).

    ``kv_cache_dtype`` (vLLM's ``--kv-cache-dtype``) sets the bytes per stored element: fp8 halves a token's
    cost, so the same memory holds twice the tokens. The returned ``model`` carries it
    (`ModelSpec.with_kv_cache_dtype`) for everything downstream, and on a known ``gpu`` a sparse MLA latent laid
    out as its attention backend stores it (`mla_backends.with_backend_kv_layout`). A token costs
    `pool_bytes_per_token`. Each GPU holds its share of the weights and every replicated one
    (`ModelSpec.weight_bytes_per_gpu`). ``drafter_layers``: a speculative drafter's KV layers, which every slot
    holds too, and whose weights every GPU holds its share of (`drafter_weight_bytes`).
    ``decode_context_parallel`` (vLLM's ``--decode-context-parallel-size``): every token stored on one GPU of
    each group of that many (`pool_bytes_per_token`); refused where vLLM refuses it
    (`check_decode_context_parallel`). vLLM's block count is unchanged by it; each block spans that many times
    the tokens (`allocators.decode_context_parallel`).

    ``data_parallel`` (vLLM's ``--data-parallel-size``) and ``expert_parallel`` (``--enable-expert-parallel``):
    the capacity returned is one data-parallel rank's (its ``tensor_parallel`` GPUs' pool; every rank has one of
    its own), whose GPUs hold their share of a mixture of experts' routed experts over all ``data_parallel x
    tensor_parallel`` GPUs (`allocators.expert_parallel`).

    Raises ValueError with a one-line reason for negative sizes, a ``kv_gib`` larger than the GPUs' memory
    (``kv_tokens`` is the way to ask for an arbitrary pool), a size that holds no whole token slot, or a model
    that does not fit.
    """
    if kv_gib is not None and kv_tokens is not None:
        raise ValueError("give at most one of --kv-gib and --kv-tokens")
    if tensor_parallel < 1:
        raise ValueError(f"--tensor-parallel must be >= 1, got {tensor_parallel}")
    if data_parallel < 1:
        raise ValueError(f"--data-parallel-size must be >= 1, got {data_parallel}")
    check_expert_parallel(model, expert_parallel)
    if model.num_heads % tensor_parallel:  # as vLLM refuses it: each GPU takes whole attention heads
        raise ValueError(f"{model.name}: its {model.num_heads} attention heads do not split evenly over "
                         f"--tensor-parallel {tensor_parallel} (vLLM requires the heads to be divisible by it)")
    kv, tp = model.num_kv_heads, tensor_parallel
    if (kv % tp if kv >= tp else tp % kv) and any(g.attention != "mla" for g in model.kv_groups()):
        # vLLM's QKVParallelLinear splits the KV heads evenly, or copies each to the same number of GPUs
        raise ValueError(f"{model.name}: its {kv} KV heads neither split evenly over --tensor-parallel {tp} nor "
                         f"copy evenly onto it (vLLM requires one of the two to divide the other)")
    check_decode_context_parallel(model, tensor_parallel, decode_context_parallel)
    model = with_backend_kv_layout(model.with_kv_cache_dtype(kv_cache_dtype), gpu)
    if gpu is not None and gpu.compute_capability is not None and (
            refusal := gpu_refusal(model.kv_cache_dtype, gpu.compute_capability, model.head_dim)):
        raise ValueError(f"--kv-cache-dtype {model.kv_cache_dtype} on {gpu.name}: {refusal}")
    per_token = pool_bytes_per_token(model, tensor_parallel, drafter_layers, decode_context_parallel)
    common = dict(model=model, gpu=gpu, tensor_parallel=tensor_parallel, data_parallel=data_parallel,
                  expert_parallel=expert_parallel, drafter_layers=drafter_layers,
                  decode_context_parallel=decode_context_parallel)
    if not 0 < gpu_memory_utilization <= 1:  # checked whether or not it is used, as `SimConfig` checks it
        raise ValueError(f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization}")
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
        if kv_bytes < per_token:  # else the allocator's "capacity must be positive, got 0", naming no flag
            raise ValueError(f"--kv-gib {kv_gib:g} is {kv_bytes:,} bytes, which rounds to 0 token slots of {model.name} "
                             f"({per_token:,} bytes = {per_token / GIB:.3g} GiB each); give more, or size the pool "
                             "in slots with --kv-tokens")
        return KVCapacity(kv_bytes=kv_bytes, kv_tokens=kv_bytes // per_token, source="kv_gib", **common)
    if gpu is None:
        raise ValueError("a GPU is needed to derive the KV capacity (or give --kv-gib / --kv-tokens)")
    weights = (weight_bytes_per_gpu(model, tensor_parallel, data_parallel, expert_parallel)
               + drafter_weight_bytes(model, drafter_layers) / tensor_parallel)
    activations = activation_reserve_bytes(model, max_num_batched_tokens, tensor_parallel)
    non_torch = NON_TORCH_RESERVE_BYTES
    per_gpu = gpu.memory_bytes * gpu_memory_utilization - weights - activations - non_torch
    if per_gpu <= 0:
        ranks = f" per data-parallel rank (of {data_parallel})" if data_parallel > 1 else ""
        spread = (" or --data-parallel-size (a mixture of experts' routed experts split over every rank's GPUs)"
                  if model.num_experts else "")
        raise ValueError(
            f"{model.name} does not fit on {tensor_parallel} x {gpu.name}{ranks}: weights {weights / GIB:.1f} GiB per "
            f"GPU + activations {activations / GIB:.2f} GiB + non-torch memory {non_torch / GIB:.2f} GiB exceed "
            f"{gpu_memory_utilization:.0%} of "
            f"{gpu.memory_gib:.1f} GiB; raise --tensor-parallel{spread} or pick a larger GPU"
        )
    kv_bytes = int(per_gpu * tensor_parallel)
    if kv_bytes < per_token:
        raise ValueError(f"{kv_bytes:,} bytes of KV memory left on {tensor_parallel} x {gpu.name} round to 0 token "
                         f"slots of {model.name} ({per_token:,} bytes each); raise --gpu-memory-utilization or "
                         "--tensor-parallel, or give --kv-gib / --kv-tokens")
    return KVCapacity(
        kv_bytes=kv_bytes,
        kv_tokens=kv_bytes // per_token,
        source="derived",
        weight_bytes_per_gpu=weights,
        activation_reserve_bytes_per_gpu=activations,
        non_torch_reserve_bytes_per_gpu=non_torch,
        **common,
    )


def final_tokens(prompt_len: int, output_len: int) -> int:
    """The slots a request of ``prompt_len`` + ``output_len`` tokens holds when it finishes, as a run holds them:
    its last sampled token never gets one (vLLM v1 allocates slots only for the tokens a step computes)."""
    return prompt_len + max(output_len - 1, 0)


def fill_to_capacity(allocator: Allocator, prompt_len: int, output_len: int, chunk_tokens: int | None = None) -> int:
    """Admit requests of ``prompt_len`` tokens and grow each to its `final_tokens` until one does not fit;
    returns how many fit (the one that did not is taken out again). ``chunk_tokens``: prefill each prompt in
    chunks of this many tokens where the allocator allocates chunk by chunk, as a run with chunked prefill does
    (a hybrid pool's window groups free what each chunk leaves behind, so a long prompt never holds all of its
    blocks there); None: the whole prompt at admission."""
    final = final_tokens(prompt_len, output_len)
    chunk = prompt_len if chunk_tokens is None or not allocator.allocates_per_chunk else min(chunk_tokens, prompt_len)
    whole = {"full_tokens": prompt_len} if chunk < prompt_len else {}  # as a run admits: if the prompt would fit
    count = 0
    while True:
        if allocator.admit(count, chunk, final_tokens=final, **whole) is None:
            return count
        done = chunk
        while done < prompt_len and allocator.grow_chunk(count, min(chunk, prompt_len - done)) is not None:
            done += chunk
        if done < prompt_len or final > prompt_len and allocator.grow(count, final - prompt_len) is None:
            allocator.free(count)
            return count
        count += 1
