"""Mamba-1 layers (AI21's Jamba): the recurrent state each selective-scan layer keeps per request, as vLLM 0.33 sizes
it, for `allocators.mamba_layout.HybridMambaPool` to hold beside the attention layers' KV.

vLLM 0.33 builds a Jamba Mamba layer as ``MambaMixer`` (``model_executor/layers/mamba/mamba_mixer.py``, from
``JambaMambaDecoderLayer`` in ``model_executor/models/jamba.py`` with ``intermediate_size = mamba_expand x
hidden_size``, ``ssm_state_size = mamba_d_state``, ``conv_kernel_size = mamba_d_conv``), a ``MambaBase`` whose state
is one ``MambaSpec`` page, shaped by ``MambaStateShapeCalculator.mamba1_state_shape``
(``model_executor/layers/mamba/mamba_utils.py``):

* a conv state of ``intermediate_size / tp x (conv_kernel - 1)`` (Mamba-1 convolves only the x branch: no B/C
  groups beside it, unlike Mamba-2's ``conv_dim``), at ``--mamba-cache-dtype`` (``auto``: the model's dtype);
* an SSM state of ``intermediate_size / tp x state_size``, at ``--mamba-ssm-cache-dtype``
  (``mamba1_state_dtype``: ``auto`` is the conv state's dtype). ``JambaForCausalLM`` has no entry in vLLM 0.33's
  ``MODELS_CONFIG_MAP`` (``model_executor/models/config.py``), so ``auto`` stays: the state is at the model's bf16.

Both split over tensor-parallel GPUs with vLLM's ``divide`` (an exact split, else an assertion).

Prefix caching: vLLM 0.33 enables it for Jamba as for every generative hybrid (``ModelConfig.
is_prefix_caching_supported``: ``attn_type == "hybrid"``; ``HybridAttentionMambaModelConfig`` turns it into
``mamba_cache_mode="align"``). But ``MambaMixer`` keeps ``MambaBase``'s ``get_prefill_checkpoint_alignment`` (None)
and ``get_kv_cache_spec`` (``num_prefill_checkpoint_blocks`` 0, where ``MambaMixer2`` sets 1 and an alignment of 1):
a Mamba-1 layer exports no state from inside a prefill on any GPU, so vLLM's scheduler
(``mamba_has_prefill_checkpoint_blocks`` False, ``Scheduler._mamba_block_aligned_split``) ends a prompt's chunk at
its last cacheable block boundary instead, its ``MambaManager`` reserves no checkpoint block, and the block size gets
no alignment beyond the kernel block's. kvsim runs it so (``sim.kernel.mamba_run``: `HybridQueries.checkpoints`
False, `allocators.mamba_align.aligned_split` with ``checkpoints=False``), step for step as vLLM's scheduler
(``tests/sim/test_sim_mamba1_parity.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from allocators.mamba_layout import MAMBA_DTYPES, RECURRENT_FIRST, _divide, check_state_dims


@dataclass(frozen=True, slots=True)
class Mamba1Layers:
    """A model's Mamba-1 layers, from config.json: ``layers`` of them (``mamba`` in vLLM's ``layers_block_type``,
    every layer but each ``attn_layer_period``-th from ``attn_layer_offset``), ``intermediate_size``
    (``mamba_expand x hidden_size``), ``state_size`` (``mamba_d_state``) and ``conv_kernel`` (``mamba_d_conv``);
    ``ssm_cache_dtype``: ``--mamba-ssm-cache-dtype`` as the model's config handler leaves it (Jamba: auto);
    ``groups_first``: `MambaStateLayers.groups_first` (layer 0 is Mamba unless ``attn_layer_offset`` is 0)."""

    label: ClassVar[str] = "Mamba-1"

    layers: int
    intermediate_size: int
    state_size: int
    conv_kernel: int
    ssm_cache_dtype: str = "auto"
    groups_first: bool = RECURRENT_FIRST

    def __post_init__(self) -> None:
        check_state_dims(self, ("layers", "intermediate_size", "state_size", "conv_kernel"), "Mamba-1")

    def conv_state_bytes(self, dtype_bytes: int, tensor_parallel: int = 1) -> int:
        """One layer's conv state on one GPU: ``intermediate_size / tp x (conv_kernel - 1)`` at the model's
        dtype."""
        return _divide(self.intermediate_size, tensor_parallel) * (self.conv_kernel - 1) * dtype_bytes

    def ssm_state_bytes(self, dtype_bytes: int, tensor_parallel: int = 1) -> int:
        """One layer's SSM state on one GPU: ``intermediate_size / tp x state_size`` at ``ssm_cache_dtype``
        (auto: the model's dtype)."""
        size = MAMBA_DTYPES[self.ssm_cache_dtype] or dtype_bytes
        return _divide(self.intermediate_size, tensor_parallel) * self.state_size * size

    def state_bytes(self, dtype_bytes: int, tensor_parallel: int = 1) -> int:
        """One layer's whole state on one GPU: ``MambaSpec.page_size_bytes`` before padding."""
        return self.conv_state_bytes(dtype_bytes, tensor_parallel) + self.ssm_state_bytes(dtype_bytes,
                                                                                          tensor_parallel)

    def prefill_checkpoint_alignment(self, compute_capability: float | None) -> int | None:
        """None on any GPU: ``MambaMixer`` exports no state from inside a prefill (the module docstring)."""
        return None
