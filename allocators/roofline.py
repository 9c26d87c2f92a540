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
    """FLOPs of the dense layers per token (a multiply-add per parameter)."""
    return 2.0 * model.num_params


def pair_flops(model: ModelSpec) -> float:
    """FLOPs of attention per query-key pair: QK^T and PV, every layer and head."""
    return 4.0 * model.num_layers * model.num_heads * model.head_dim


def weight_bytes(model: ModelSpec, dtype_bytes: int | None = None) -> float:
    """Bytes of weights a step reads once, at ``dtype_bytes`` per element (default: the model's)."""
    return float(model.num_params * (model.dtype_bytes if dtype_bytes is None else dtype_bytes))


def kv_bytes_per_token(model: ModelSpec, dtype_bytes: int | None = None) -> int:
    """K and V of one token, every layer and KV head, at ``dtype_bytes`` per element (default: the model's)."""
    elem = model.dtype_bytes if dtype_bytes is None else dtype_bytes
    return 2 * model.num_layers * model.num_kv_heads * model.head_dim * elem
