"""Gated DeltaNet layers (Qwen3-Next, Qwen3.5): the recurrent state each linear-attention layer keeps per request,
as vLLM 0.33 sizes it, for `allocators.mamba_layout.HybridMambaPool` to hold beside the attention layers' KV.

vLLM 0.33 keeps a gated DeltaNet layer's state in the hybrid pool as a Mamba layer's (``MambaBase``, a
``MambaSpec`` page; ``model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py``), shaped by
``MambaStateShapeCalculator.gated_delta_net_state_shape`` (``model_executor/layers/mamba/mamba_utils.py``):

* a conv state of ``conv_dim / tp x (conv_kernel - 1)`` with ``conv_dim = 2 x num_k_heads x head_k_dim +
  num_v_heads x head_v_dim`` (the q, k and v channels the short convolution runs over), at ``--mamba-cache-dtype``;
* a recurrent state of ``num_v_heads / tp x head_v_dim x head_k_dim`` (one ``d_v x d_k`` matrix per value head), at
  ``--mamba-ssm-cache-dtype`` (``gated_delta_net_state_dtype``: ``auto`` is the conv state's dtype, the model's).
  Qwen3-Next's config handler leaves ``auto`` as it is (no entry in ``MODELS_CONFIG_MAP``), so its recurrent state is
  bf16; Qwen3.5's turns ``auto`` into config.json's ``mamba_ssm_dtype`` (``Qwen3_5ForConditionalGenerationConfig``).

Both split over tensor-parallel GPUs with vLLM's ``divide`` (no group rounding as Mamba-2's ``n_groups``).

Prefix caching on (``mamba_cache_mode="align"``, vLLM's default) the layer exports the state at a block boundary
from inside a prefill only with FlashInfer's GDN prefill kernel (``get_prefill_checkpoint_alignment``: 64,
``FLASHINFER_GDN_CHECKPOINT_ALIGNMENT`` in ``v1/attention/backends/gdn_attn.py``), which
``_resolve_gdn_prefill_backend`` picks on Hopper (compute capability 9.0) with no further condition, on Blackwell
only with ``head_k_dim`` 128 and a CUDA 13 runtime, and never before Hopper (Triton/FLA: no checkpoint). Where it
exports, ``Platform._align_hybrid_block_size`` makes the attention block size a multiple of that 64, and the
scheduler's checkpoint rules are Mamba-2's (the checkpoint alignment is the block size itself, which every
block-aligned chunk start meets, ``is_mamba_prefill_checkpoint_valid``); where it does not, ``get_kv_cache_spec``
is ``MambaBase``'s (no checkpoint block, no alignment) and the scheduler ends every prompt's chunk at its last
cacheable boundary instead (``mamba_has_prefill_checkpoint_blocks`` False), as for Mamba-1 layers
(`allocators.mamba1_layout`; ``tests/sim/test_sim_gdn_nockpt_parity.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from allocators.mamba_layout import MAMBA_DTYPES, RECURRENT_FIRST, _divide, check_state_dims

FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64
"""``v1/attention/backends/gdn_attn.py``: the token grid FlashInfer's GDN prefill emits mid-prefill states on."""

HOPPER = 9.0
"""``current_platform.is_device_capability(90)``: where ``_resolve_gdn_prefill_backend`` picks FlashInfer outright."""


@dataclass(frozen=True, slots=True)
class GatedDeltaNetLayers:
    """A model's gated DeltaNet layers, from config.json: ``layers`` of them (``linear_attention`` in
    ``layer_types``), ``num_k_heads`` (``linear_num_key_heads``), ``num_v_heads`` (``linear_num_value_heads``),
    ``head_k_dim`` (``linear_key_head_dim``), ``head_v_dim`` (``linear_value_head_dim``) and ``conv_kernel``
    (``linear_conv_kernel_dim``); ``ssm_cache_dtype``: ``--mamba-ssm-cache-dtype`` as the model's config handler
    leaves it (Qwen3-Next: auto); ``groups_first``: `MambaStateLayers.groups_first` (``layer_types`` starts with
    'linear_attention': `first_layer_recurrent`)."""

    label: ClassVar[str] = "gated DeltaNet"

    layers: int
    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int
    ssm_cache_dtype: str = "auto"
    groups_first: bool = RECURRENT_FIRST

    def __post_init__(self) -> None:
        check_state_dims(self, ("layers", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim", "conv_kernel"),
                         "gated DeltaNet")

    def conv_state_bytes(self, dtype_bytes: int, tensor_parallel: int = 1) -> int:
        """One layer's conv state on one GPU: ``conv_dim / tp x (conv_kernel - 1)`` at the model's dtype."""
        conv_dim = 2 * self.num_k_heads * self.head_k_dim + self.num_v_heads * self.head_v_dim
        return _divide(conv_dim, tensor_parallel) * (self.conv_kernel - 1) * dtype_bytes

    def ssm_state_bytes(self, dtype_bytes: int, tensor_parallel: int = 1) -> int:
        """One layer's recurrent state on one GPU: ``num_v_heads / tp x head_v_dim x head_k_dim`` at
        ``ssm_cache_dtype`` (auto: the model's dtype)."""
        size = MAMBA_DTYPES[self.ssm_cache_dtype] or dtype_bytes
        return _divide(self.num_v_heads, tensor_parallel) * self.head_v_dim * self.head_k_dim * size

    def state_bytes(self, dtype_bytes: int, tensor_parallel: int = 1) -> int:
        """One layer's whole state on one GPU: ``MambaSpec.page_size_bytes`` before padding."""
        return self.conv_state_bytes(dtype_bytes, tensor_parallel) + self.ssm_state_bytes(dtype_bytes,
                                                                                          tensor_parallel)

    def prefill_checkpoint_alignment(self, compute_capability: float | None) -> int | None:
        """The token alignment of the states the layer exports from inside a prefill with prefix caching on, on
        a GPU of ``compute_capability`` (the module docstring): 64 on Hopper (FlashInfer), None before it
        (Triton/FLA exports none). A one-line ValueError where vLLM's choice depends on what kvsim does not know
        (Blackwell's CUDA runtime) or no GPU is named."""
        if compute_capability is None:
            raise ValueError("gated DeltaNet layers with prefix caching on: vLLM's GDN prefill kernel, and so the "
                             "block size, depends on the GPU's compute capability; name a --gpu that gives one (a "
                             "catalog GPU's compute_capability)")
        if compute_capability == HOPPER:
            return FLASHINFER_GDN_CHECKPOINT_ALIGNMENT
        if compute_capability < HOPPER:
            return None
        raise ValueError(f"gated DeltaNet layers on compute capability {compute_capability:.1f}: vLLM picks "
                         "FlashInfer's GDN prefill (block sizes in multiples of 64) there only with a CUDA 13 "
                         "runtime, which kvsim does not model; use --no-enable-prefix-caching")
