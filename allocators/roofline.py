"""The roofline's terms for one model: FLOPs and bytes per unit of work, the one home of the formula.

A step of ``tokens`` new tokens (prefill and decode together) scoring ``pairs`` query-key pairs and reading
``context`` KV tokens does::

    flops = token_flops * tokens + pair_flops * pairs
    bytes = weight_bytes + kv_bytes_per_token * (context * paged_kernel_overhead + tokens)

The simulator's step-cost model (`sim.kernel.cost_model`) divides them by fractions of the GPU's peaks; the GPU
validation (`gpu_validation.features`) puts them in each measured row so a fit estimates exactly those
fractions. Both read them here, next to the catalog they are computed from.
"""

from __future__ import annotations

from allocators.catalog import ModelSpec


def token_flops(model: ModelSpec) -> float:
    """FLOPs of the dense layers per token (a multiply-add per parameter a token passes through: the active
    ones of a mixture of experts)."""
    return 2.0 * (model.num_params if model.active_params is None else model.active_params)


def pair_flops(model: ModelSpec) -> float:
    """FLOPs of attention per query-key pair: QK^T and PV, every layer and head."""
    return 4.0 * model.num_layers * model.num_heads * model.head_dim


def weight_bytes(model: ModelSpec, dtype_bytes: int | None = None) -> float:
    """Bytes of weights a step reads once, at ``dtype_bytes`` per element (default: what the model loads,
    `ModelSpec.weight_bytes`, which knows quantized checkpoints)."""
    return float(model.weight_bytes if dtype_bytes is None else model.num_params * dtype_bytes)


def kv_bytes_per_token(model: ModelSpec, dtype_bytes: int | None = None) -> int:
    """One token's KV in every layer (K and V per KV head, or MLA's latent), at ``dtype_bytes`` per element
    (default: the model's KV dtype, `ModelSpec.kv_cache_dtype`)."""
    if dtype_bytes is None:
        return model.kv_bytes_per_token
    return sum(g.bytes_per_token for g in model.kv_groups_at(dtype_bytes))
