"""A decoder layer's dense work with random weights of the catalog's shapes, to time a step's non-attention
cost without downloading a model.

One layer is built and timed; a step costs ``num_layers`` times that, plus attention (timed separately on
the paged cache) and the LM head over the tokens that are sampled. The weights are random because only
their shapes matter for time. Llama-style models get a gated (SiLU) MLP, OPT-style ones a plain two-matrix
MLP (`has_gated_mlp`); norms are RMS norms for both, a negligible difference in time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from allocators.catalog import ModelSpec
from gpu_validation.features import has_gated_mlp


def _weight(rows: int, cols: int, generator: torch.Generator, dtype: torch.dtype, device: str | torch.device):
    w = torch.empty(rows, cols, dtype=dtype, device=device)
    # small values keep activations finite through SiLU in bf16; the values do not affect time
    return w.uniform_(-0.02, 0.02, generator=generator) if w.device.type == "cpu" else w.uniform_(-0.02, 0.02)


class DenseLayer:
    """Q/K/V and O projections, the MLP, two norms and residual adds of one layer (attention excluded)."""

    def __init__(self, model: ModelSpec, *, dtype: torch.dtype, device: str | torch.device,
                 generator: torch.Generator) -> None:
        h, d = model.hidden_size, model.head_dim
        self.gated = has_gated_mlp(model)
        self.qkv = _weight(h, (model.num_heads + 2 * model.num_kv_heads) * d, generator, dtype, device)
        self.out = _weight(model.num_heads * d, h, generator, dtype, device)
        self.up = _weight(h, (2 if self.gated else 1) * model.intermediate_size, generator, dtype, device)
        self.down = _weight(model.intermediate_size, h, generator, dtype, device)
        self.attn_width = model.num_heads * d

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[tokens, hidden]`` -> the layer's output; the attention output is stood in for by the
        query projection's slice of the right width (attention itself is timed on the paged cache)."""
        h = F.rms_norm(x, x.shape[-1:])
        qkv = h @ self.qkv
        x = x + qkv[:, : self.attn_width] @ self.out
        h = F.rms_norm(x, x.shape[-1:])
        up = h @ self.up
        if self.gated:
            gate, up = up.chunk(2, dim=-1)
            up = F.silu(gate) * up
        else:
            up = F.relu(up)
        return x + up @ self.down


class LMHead:
    """The final norm and the vocabulary projection, applied to the tokens that are sampled."""

    def __init__(self, model: ModelSpec, *, dtype: torch.dtype, device: str | torch.device,
                 generator: torch.Generator) -> None:
        self.weight = _weight(model.hidden_size, model.vocab_size, generator, dtype, device)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, x.shape[-1:]) @ self.weight
