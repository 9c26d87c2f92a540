"""The roofline's terms for one model: FLOPs and bytes per unit of work, the one home of the formula.

A step of ``tokens`` new tokens (prefill and decode together) scoring ``pairs`` query-key pairs and reading
``context`` KV tokens does (a sparse MLA model, DeepSeek-V3.2, pairs and reads at most ``index_topk`` keys a
query, and adds its indexer's `index_pair_flops` over every pair: `sim.kernel.roofline_cost`)::

    flops = token_flops * tokens + pair_flops * pairs
    bytes = step_weight_bytes(tokens) + kv_bytes_per_token * (context * paged_kernel_overhead + tokens)
            + mamba_state_bytes_per_seq * seqs          (a hybrid Mamba model's state, per sequence a step)

``step_weight_bytes`` is the whole ``weight_bytes`` for a dense model; a mixture of experts reads its routed
experts only as far as the step's tokens touch them (`allocators.expert_routing`).

The simulator's step-cost model (`sim.kernel.cost_model`) divides them by fractions of the GPU's peaks; the GPU
validation (`gpu_validation.features`) puts them in each measured row so a fit estimates exactly those
fractions. Both read them here, next to the catalog they are computed from.
"""

from __future__ import annotations

from allocators.catalog import ModelSpec, per_gpu_share
from allocators.expert_routing import distinct_expert_fraction


def token_flops(model: ModelSpec) -> float:
    """FLOPs of the dense layers per token (a multiply-add per parameter a token passes through: the active
    ones of a mixture of experts)."""
    return 2.0 * model.token_params


def token_flops_per_gpu(model: ModelSpec, tensor_parallel: int = 1) -> float:
    """`token_flops` each of ``tensor_parallel`` GPUs does: its share of the split layers' and all of the
    replicated ones' (catalog ``replicated_params``: DeepSeek's MLA down-projections, routers, norms and sparse
    indexer, which vLLM builds as ``ReplicatedLinear`` or ``disable_tp=True`` and so runs on every GPU for every
    token of the step), ``2 x ((active - replicated) / tp + replicated)``. Exactly ``token_flops / tp`` for a
    model without them."""
    return per_gpu_share(token_flops(model), 2.0 * (model.replicated_params or 0.0), tensor_parallel)


def routed_token_flops(model: ModelSpec) -> float:
    """The part of `token_flops` spent in the routed experts (0 for a dense model): a multiply-add per parameter
    of the ``num_experts_per_tok`` experts a token is routed to (`ModelSpec.expert_params` each)."""
    return 2.0 * model.num_experts_per_tok * model.expert_params if model.num_experts else 0.0


def non_expert_token_flops_per_gpu(model: ModelSpec, tensor_parallel: int = 1) -> float:
    """`token_flops_per_gpu` without the routed experts': what each of a rank's ``tensor_parallel`` GPUs does per
    token of its own batch where the routed experts' work is priced apart, over the tokens every rank sends
    them (a data-parallel lock-step, `sim.kernel.roofline_cost.StepCostModel.step_time`'s ``expert_tokens``).
    The replicated layers (none of them a routed expert) are done whole on every GPU, as there."""
    return per_gpu_share(token_flops(model) - routed_token_flops(model), 2.0 * (model.replicated_params or 0.0),
                         tensor_parallel)


def pair_flops(model: ModelSpec) -> float:
    """FLOPs of attention per query-key pair: QK^T and PV, every attention layer and head (a hybrid Mamba
    model's ``attention_layers`` only: its Mamba and MLP-only layers pair no query with a key)."""
    layers = model.num_layers if model.attention_layers is None else model.attention_layers
    return 4.0 * layers * model.num_heads * model.head_dim


def mamba_state_bytes_per_seq(model: ModelSpec, tensor_parallel: int = 1) -> float:
    """Bytes each GPU moves per sequence per step for a hybrid model's Mamba-2 layers (0 without any): every
    layer reads its conv and SSM state and writes it back (`allocators.mamba_layout.Mamba2Layers.state_bytes`),
    once per step whatever the tokens the sequence has in it (a prefill chunk scans from the state it starts at).
    Approximate: the selective scan's own FLOPs (about ``heads x head_dim x state_size`` multiply-adds a token a
    layer) are not counted beside `token_flops`'s projections, nor the chunked scan's intermediate states. What
    that leaves out, by the same arithmetic: a decode token's state update and read-out, ``4 x heads x head_dim x
    state_size`` FLOPs a layer, is 0.6% of Nemotron-H-8B's 2 x 8.1e9 weight FLOPs a token (24 layers of 128 x 64 x
    128) and 1.0% of Qwen3-Next-80B-A3B's active 2 x 3.9e9 (36 layers of 32 x 128 x 128); a prefill token's share
    in Mamba-2's chunked scan (chunks of 256: about ``2 x 256 x heads x (state_size + head_dim)`` more a layer) is
    about 2% of Nemotron-H's."""
    mamba = model.mamba
    if mamba is None:
        return 0.0
    return 2.0 * mamba.layers * mamba.state_bytes(model.dtype_bytes, tensor_parallel)


def index_pair_flops(model: ModelSpec) -> float:
    """FLOPs of a sparse model's lightning indexer per query-key pair (0 without one): one multiply-add per
    element of each of its ``index_n_heads`` query heads against the ``index_head_dim``-dim key, every layer.
    The indexer scores every context key, where attention pairs a query with its top ``index_topk`` alone (the
    per-head ReLU and weighting, ``index_n_heads`` more per pair, are left out: under 1%)."""
    return 2.0 * model.num_layers * model.index_n_heads * model.index_head_dim if model.index_topk else 0.0


def weight_bytes(model: ModelSpec, dtype_bytes: int | None = None) -> float:
    """Bytes of all the weights, at ``dtype_bytes`` per element (default: what the model loads,
    `ModelSpec.weight_bytes`, which knows quantized checkpoints): what a dense model's step reads once, and
    what memory holds (every expert of a mixture of experts)."""
    return float(model.weight_bytes if dtype_bytes is None else model.num_params * dtype_bytes)


def routed_expert_bytes(model: ModelSpec, dtype_bytes: int | None = None) -> float:
    """The routed experts' part of `weight_bytes` (0 for a dense model), at ``dtype_bytes`` per element as
    there (default: as loaded, `ModelSpec.routed_expert_bytes`)."""
    if dtype_bytes is None:
        return model.routed_expert_bytes
    return model.num_experts * model.expert_params * dtype_bytes


def step_weight_split(model: ModelSpec, dtype_bytes: int | None = None) -> tuple[float, float]:
    """(bytes every step reads, routed experts' bytes read in proportion to `expert_read_fraction`): the two
    parts of `step_weight_bytes`, for callers that scale them once (`StepCostModel`)."""
    whole = weight_bytes(model, dtype_bytes)
    if not model.num_experts:
        return whole, 0.0
    routed = routed_expert_bytes(model, dtype_bytes)
    return whole - routed, routed


def expert_read_fraction(model: ModelSpec, tokens: int) -> float:
    """The share of the routed experts' bytes a step of ``tokens`` tokens reads (`allocators.expert_routing`;
    1 for a dense model, which has none)."""
    if not model.num_experts:
        return 1.0
    return distinct_expert_fraction(model.num_experts, model.num_experts_per_tok, tokens)


def step_weight_bytes(model: ModelSpec, tokens: int, dtype_bytes: int | None = None) -> float:
    """Bytes of weights a step of ``tokens`` tokens (decode and prefill) reads: everything but the routed
    experts, and those its tokens are expected to be routed to. A dense model's is `weight_bytes`, exactly."""
    fixed, routed = step_weight_split(model, dtype_bytes)
    if not routed:
        return fixed
    return fixed + routed * expert_read_fraction(model, tokens)


def kv_bytes_per_token(model: ModelSpec, dtype_bytes: int | None = None) -> int:
    """One token's KV in every layer (K and V per KV head, or MLA's latent), at ``dtype_bytes`` per element
    (default: the model's KV dtype, `ModelSpec.kv_cache_dtype`)."""
    if dtype_bytes is None:
        return model.kv_bytes_per_token
    return sum(g.bytes_per_token for g in model.kv_groups_at(dtype_bytes))
