"""The step-cost model's features (FLOPs and bytes of one engine step), recomputed from the catalog.

``docs/architecture.md`` defines a step's time as
``step_overhead_s + max(flops / (flops_frac * peak_flops), bytes / (bandwidth_frac * peak_bw))`` with
``flops = 2 * params * (prefill_tokens + decode_seqs) + 4 * layers * heads * head_dim * attention_pairs`` and
``bytes = weight_bytes + kv_bytes_per_token * (context_tokens * paged_kernel_overhead[block_size]
+ prefill_tokens + decode_seqs)``, ``weight_bytes`` being what the step reads (a mixture of experts' routed
experts only as far as its tokens touch them, `roofline.step_weight_bytes`). The terms come from `allocators.roofline`, as the simulator's
(``sim/kernel/cost_model.py``) do, so the fit in `gpu_validation.fit` estimates exactly the coefficients the
simulator multiplies them by.

Quick CPU calibrations time a scaled-down copy of the model (`scaled_model`): the fitted coefficients are
fractions of peak and a per-step constant, which carry over between shapes as far as the roofline holds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from allocators import roofline
from allocators.catalog import ModelSpec


@dataclass(frozen=True, slots=True)
class StepShape:
    """What one engine step does: new prompt tokens, decoding sequences, KV tokens attention reads, the
    query-key pairs it scores (decode: one per context token; a prefill chunk: its causal triangle)."""

    prefill_tokens: int
    decode_seqs: int
    context_tokens: int
    attention_pairs: int
    block_size: int

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_seqs


def decode_step(batch_size: int, context_len: int, block_size: int) -> StepShape:
    """``batch_size`` sequences each attending ``context_len`` tokens (their new token included)."""
    ctx = batch_size * context_len
    return StepShape(0, batch_size, ctx, ctx, block_size)


def prefill_step(chunk: int, offset: int, block_size: int) -> StepShape:
    """One prompt chunk of ``chunk`` tokens after ``offset`` already cached: it reads ``offset + chunk``
    tokens and scores ``chunk * offset + chunk * (chunk + 1) / 2`` causal pairs."""
    return StepShape(chunk, 0, offset + chunk, chunk * offset + chunk * (chunk + 1) // 2, block_size)


def step_features(model: ModelSpec, step: StepShape, dtype_bytes: int | None = None) -> dict[str, float]:
    """FLOPs and the three byte terms of the formula (weights, KV read before the paging factor, KV
    written) for one step of ``model`` at ``dtype_bytes`` per element (default: the model's)."""
    kv_per_token = roofline.kv_bytes_per_token(model, dtype_bytes)
    return {
        "flops": roofline.token_flops(model) * step.tokens + roofline.pair_flops(model) * step.attention_pairs,
        "weight_bytes": roofline.step_weight_bytes(model, step.tokens, dtype_bytes),
        "kv_read_bytes": float(kv_per_token * step.context_tokens),
        "kv_write_bytes": float(kv_per_token * step.tokens),
    }


def layer_params(model: ModelSpec, gated_mlp: bool) -> int:
    """Parameters of one decoder layer's dense parts: Q, K, V, O projections and the MLP."""
    attn = model.hidden_size * (model.num_heads + 2 * model.num_kv_heads) * model.head_dim
    attn += model.num_heads * model.head_dim * model.hidden_size
    return attn + (3 if gated_mlp else 2) * model.hidden_size * model.intermediate_size


def params_from_shapes(model: ModelSpec, gated_mlp: bool) -> int:
    """All parameters: the layers plus untied input embedding and LM head."""
    return model.num_layers * layer_params(model, gated_mlp) + 2 * model.vocab_size * model.hidden_size


def has_gated_mlp(model: ModelSpec) -> bool:
    """Whether the catalog's parameter count fits a gated (three-matrix, Llama) MLP better than a plain
    two-matrix (OPT) one; the catalog does not say, but the count gives it away."""
    gated = abs(params_from_shapes(model, True) - model.num_params)
    plain = abs(params_from_shapes(model, False) - model.num_params)
    return gated <= plain


def scaled_model(model: ModelSpec, factor: int) -> ModelSpec:
    """A copy of ``model`` with heads, KV heads, MLP width and vocabulary divided by ``factor`` (head
    size, layer count and GQA grouping kept where possible); its ``num_params`` is recomputed from shapes."""
    if factor <= 1:
        return model
    kv = max(1, model.num_kv_heads // factor)
    group = model.num_heads // model.num_kv_heads
    heads = kv * group if model.num_heads // factor < kv * group else model.num_heads // factor
    heads -= heads % kv
    small = replace(
        model,
        name=f"{model.name}/{factor}",
        num_heads=heads,
        num_kv_heads=kv,
        hidden_size=heads * model.head_dim,
        intermediate_size=max(1, model.intermediate_size // factor),
        vocab_size=max(1, model.vocab_size // factor),
        source=f"{model.name} scaled down {factor}x for a quick CPU calibration",
    )
    return replace(small, num_params=float(params_from_shapes(small, has_gated_mlp(model))))
