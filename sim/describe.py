"""The first line of every ``kvsim run`` and ``kvsim compare``: what is simulated, and where the KV size
comes from.

The KV capacity decides most results and has three sources (``--kv-gib``, ``--kv-tokens``, or derived from
the GPU as vLLM sizes it), so the line names the source with its numbers rather than leaving the user to
guess which applied. It goes to stderr, so ``--json`` output stays one JSON document.
"""

from __future__ import annotations

from allocators.capacity import KVCapacity
from allocators.catalog import GIB
from sim.kernel.block_size import block_size_choice
from sim.kernel.config import SimConfig


def capacity_source(cap: KVCapacity, config: SimConfig) -> str:
    """``given by --kv-gib``, ``given by --kv-tokens``, or the derivation with its terms."""
    if cap.source in ("kv_gib", "kv_tokens"):
        return f"given by --{cap.source.replace('_', '-')}"
    return (f"derived from --gpu-memory-utilization {config.gpu_memory_utilization:g} of {cap.gpu.memory_gib:.1f} "
            f"GiB per GPU minus weights ({cap.weight_bytes_per_gpu / GIB:.2f} GiB), activations "
            f"({cap.activation_reserve_bytes_per_gpu / GIB:.2f} GiB) and non-torch memory "
            f"({cap.non_torch_reserve_bytes_per_gpu / GIB:.2f} GiB)")


def setup_line(config: SimConfig, workload, cap: KVCapacity) -> str:
    """One line: workload and request count, the fleet (behind dp-lb, its API servers: `sim.kernel.api_servers`),
    model and GPU, KV capacity (with the KV dtype unless ``auto``)
    and its source, and why the blocks are not 16 where vLLM chose them (`block_size_choice`)."""
    dtype = "" if cap.model.kv_cache_dtype == "auto" else f" of {cap.model.kv_cache_dtype} KV"
    unit = "data-parallel rank" if config.data_parallel_size > 1 else "replica"  # one engine's replicas, or a fleet
    servers = config.api_servers  # behind dp-lb each balances its own share of the requests
    front = f" behind {servers} API server{'s' * (servers > 1)}" if config.router == "dp-lb" else ""
    fleet = f"{config.replicas} {unit}s{front} of " if config.replicas > 1 else ""  # capacity is each replica's own
    each = f" per {unit}" if config.replicas > 1 else ""
    choice = cap.gpu is not None and block_size_choice(config, cap.model, cap.gpu)
    dcp = cap.decode_context_parallel  # each token's KV once per that many GPUs (`allocators.decode_context_parallel`)
    sharded = f" sharded over {dcp} GPUs by decode context parallelism" if dcp > 1 else ""
    return (f"workload {getattr(workload, 'name', 'workload')} ({len(workload):,} requests); "
            f"{fleet}{cap.model.name} on {cap.tensor_parallel} x {cap.gpu.name}; KV capacity{each} "
            f"{cap.kv_gib:.2f} GiB = {cap.kv_tokens:,} token slots{dtype}{sharded}, {capacity_source(cap, config)}"
            + (f"; {choice}" if choice else ""))
