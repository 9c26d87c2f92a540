"""Hybrid attention/Mamba-2 models (NVIDIA Nemotron-H, IBM Granite-4.0-H): the recurrent state each Mamba layer
keeps per request and how vLLM 0.33 fits it into the attention layers' block pool.

A Mamba-2 layer keeps no per-token KV: each request holds one fixed-size state per layer, a convolution state
(the last ``conv_kernel - 1`` inputs of the ``conv_dim = heads x head_dim + 2 x n_groups x state_size`` channels)
and an SSM state (``heads x head_dim x state_size``). vLLM 0.33 (``model_executor/layers/mamba/mamba_utils.py``,
``MambaStateShapeCalculator.mamba2_state_shape``) splits both over tensor-parallel GPUs, with ``n_groups`` first
rounded up to a multiple of the GPUs when it does not split (``extra_groups_for_head_shards``); the conv state is
stored at ``--mamba-cache-dtype`` (``auto``: the model's dtype), the SSM state at ``--mamba-ssm-cache-dtype``,
which ``NemotronHForCausalLMConfig`` turns from ``auto`` into the config's ``mamba_ssm_cache_dtype`` or float32
(``model_executor/models/config.py``).

One pool, one page size (`HybridMambaPool`): ``Platform._align_hybrid_block_size`` (``platforms/interface.py``)
raises the attention block size to the smallest multiple of the kernel block (FlashAttention's ``MultipleOf(16)``)
whose page, ``block_size x`` one token of one attention layer, holds a Mamba state, and pads the Mamba page to
exactly that (``mamba_page_size_padded``). ``_get_kv_cache_groups_uniform_page_size``
(``v1/core/kv_cache_planning.py``) then cuts the attention layers and the Mamba layers into KV cache groups of
``group_size`` layers (the smaller count, or the larger where it is under 1.5 times it), and the pool has
``available_memory // (group_size x page)`` blocks (``get_kv_cache_config_from_groups``), block 0 the null block.

A request holds ``cdiv(tokens, block_size)`` blocks in each attention group and one block in each Mamba group
(``MambaManager`` in ``v1/core/single_type_kv_cache_manager.py``): with ``mamba_cache_mode="none"`` the Mamba
block size is ``max_model_len`` (``MambaModelConfig.verify_and_update_config``), so one block covers any request;
with ``"align"`` the Mamba block size is the attention one and the running state moves into a new block each
time the request crosses a block boundary, the previous one freed at the next step (``remove_skipped_blocks``),
and cached for prefix hits when a step ends on a boundary. vLLM 0.33's default for a generative hybrid model is
``"align"``: ``ModelConfig.is_prefix_caching_supported`` is True for ``attn_type == "hybrid"``
(``config/model.py``) and ``MambaModelConfig`` turns prefix caching into ``mamba_cache_mode="align"``.
With speculative decoding a request holds ``1 + num_speculative_tokens`` state blocks per Mamba group
(`mamba_state_blocks`; with prefix caching on, at rest, the speculative ones after its running state:
`allocators.mamba_align.place_blocks`), modelled as `check_mamba_speculation` says; an MTP drafter's attention
layer (Qwen3-Next's) joins the attention layers in the planner's groups (`hybrid_mamba_pool`'s ``drafter_layers``).
kvsim sizes the pool and counts what requests hold at rest (`HybridMambaPool.blocks_per_request`, the same in
both modes), and simulates runs in both modes (``sim.kernel.mamba_run``; ``"align"``: ``allocators.mamba_align``).

Gated DeltaNet layers (Qwen3-Next, `allocators.gdn_layout.GatedDeltaNetLayers`) and Mamba-1 layers (Jamba,
`allocators.mamba1_layout.Mamba1Layers`) are held the same way: vLLM 0.33 gives them a ``MambaSpec`` page too. The pool reads either kind through `MambaStateLayers` (the state's bytes and the
prefill checkpoint alignment that, with prefix caching on, ``_align_hybrid_block_size`` also aligns the block to).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import lcm
from typing import ClassVar, Protocol

from allocators.base import cdiv
from allocators.kv_cache_groups import kv_cache_group_size

MAMBA_DTYPES: dict[str, int | None] = {"auto": None, "float32": 4, "bfloat16": 2, "float16": 2}
"""Bytes of one state element by vLLM's ``--mamba-cache-dtype`` / ``--mamba-ssm-cache-dtype`` name (``auto``:
the model's dtype; ``config/cache.py`` ``MambaDType``)."""

KERNEL_BLOCK = 16
"""FlashAttention's kernel block, ``MultipleOf(16)`` (``v1/attention/backends/flash_attn.py``,
``get_supported_kernel_block_sizes``), and vLLM's default ``--block-size`` (``CacheConfig.DEFAULT_BLOCK_SIZE``):
the granularity ``_align_hybrid_block_size`` raises the attention block size in."""


class MambaStateLayers(Protocol):
    """What the pool reads of a model's recurrent layers, whichever their kind (`Mamba2Layers`,
    `allocators.gdn_layout.GatedDeltaNetLayers`, `allocators.mamba1_layout.Mamba1Layers`): vLLM 0.33 keeps each kind's per-request state as one
    ``MambaSpec`` page and schedules them all with ``MambaManager``, so only the state's size and the block-size
    alignment its prefill checkpoints need differ."""

    label: ClassVar[str]
    layers: int
    groups_first: bool
    """Whether vLLM's planner lists the model's recurrent KV cache groups before its attention group: a property
    of the model, not of the kind of layer (`RECURRENT_FIRST`), as it is the order of the layers themselves.
    ``_get_kv_cache_groups_uniform_page_size`` (``v1/core/kv_cache_planning.py``) makes one bucket per layer spec
    in the order it first meets each in ``kv_cache_spec``, and that dict is in the model's layer order:
    ``GPUModelRunner.get_kv_cache_spec`` walks ``get_layers_from_vllm_config``, i.e. the
    ``static_forward_context`` dict, into which every attention and Mamba layer puts itself as it is built
    (``Attention.__init__``, ``MambaMixer2.__init__``: ``static_forward_context[prefix] = self``), and
    ``make_layers`` builds the layers in index order; ``get_global_kv_cache_groups`` merges the workers' dicts
    keeping that order. So the groups come first iff layer 0 is recurrent. The groups' order is the order
    ``KVCacheCoordinator`` allocates a request's blocks in and frees them in, group by group (which cached
    blocks join the free queue, and so are evicted, first)."""

    def state_bytes(self, dtype_bytes: int, tensor_parallel: int = 1) -> int:
        """One layer's whole state on one GPU, before padding."""
        ...

    def prefill_checkpoint_alignment(self, compute_capability: float | None) -> int | None:
        """``get_prefill_checkpoint_alignment`` with prefix caching on, on a GPU of ``compute_capability``
        (None: the layer exports no state from inside a prefill)."""
        ...


RECURRENT_FIRST = True
"""`MambaStateLayers.groups_first` where the model's layer pattern is not given (a catalog file's table without
one): the recurrent groups first, as every hybrid whose config kvsim reads starts with a recurrent layer:
Nemotron-H-8B (``hybrid_override_pattern`` 'M-M-M-M*-...'), Qwen3-Next and Qwen3.5 (``layer_types``: every
``full_attention_interval``-th layer full, the first three linear), and transformers' defaults for Jamba
(``attn_layer_offset`` 4), Bamba and Granite-4.0-H (every layer Mamba unless told otherwise)."""


def first_layer_recurrent(pattern: str | list[str], recurrent: str) -> bool:
    """`MambaStateLayers.groups_first` from a model's layer pattern: whether its layer 0 is ``recurrent`` (the
    pattern a string of one letter a layer, Nemotron-H's ``hybrid_override_pattern`` 'M', or a list of names,
    ``layer_types``' 'linear_attention')."""
    return len(pattern) > 0 and pattern[0] == recurrent


def check_state_dims(layers, dims: tuple[str, ...], kind: str) -> None:
    """What every kind of recurrent layer checks of its config.json dims: each of ``dims`` a positive integer, a
    ``conv_kernel`` of at least 2 and a known ``ssm_cache_dtype``; a ValueError starting with ``kind``. (And
    ``groups_first`` a bool, not a pattern.)"""
    if type(layers.groups_first) is not bool:
        raise ValueError(f"{kind} groups_first must be True or False, got {layers.groups_first!r}")
    for f in dims:
        value = getattr(layers, f)
        if type(value) is not int or value <= 0:
            raise ValueError(f"{kind} {f} must be a positive integer, got {value!r}")
    if layers.conv_kernel < 2:
        raise ValueError(f"{kind} conv_kernel must be at least 2 (the state keeps conv_kernel - 1 inputs), "
                         f"got {layers.conv_kernel}")
    if layers.ssm_cache_dtype not in MAMBA_DTYPES:
        raise ValueError(f"{kind} ssm_cache_dtype must be one of {', '.join(MAMBA_DTYPES)}, "
                         f"got {layers.ssm_cache_dtype!r}")


@dataclass(frozen=True, slots=True)
class Mamba2Layers:
    """A model's Mamba-2 layers, from config.json: ``layers`` of them (``M`` in Nemotron-H's
    ``hybrid_override_pattern``), ``num_heads`` (``mamba_num_heads``), ``head_dim`` (``mamba_head_dim``),
    ``state_size`` (``ssm_state_size``), ``n_groups`` and ``conv_kernel``; ``ssm_cache_dtype``: vLLM's
    ``--mamba-ssm-cache-dtype`` as the model's config handler leaves it (Nemotron-H: float32); ``groups_first``:
    `MambaStateLayers.groups_first` (``hybrid_override_pattern`` starts with 'M': `first_layer_recurrent`)."""

    layers: int
    num_heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int
    ssm_cache_dtype: str = "auto"
    groups_first: bool = RECURRENT_FIRST

    label: ClassVar[str] = "Mamba-2"

    def __post_init__(self) -> None:
        check_state_dims(self, ("layers", "num_heads", "head_dim", "state_size", "n_groups", "conv_kernel"), "mamba")

    def _groups(self, tensor_parallel: int) -> int:
        """``n_groups`` as vLLM shards it: rounded up to ``tensor_parallel`` where it does not divide."""
        n = self.n_groups
        return n if n % tensor_parallel == 0 else n + (tensor_parallel - n)  # vLLM's extra groups, as written

    def conv_state_bytes(self, dtype_bytes: int, tensor_parallel: int = 1) -> int:
        """One layer's conv state on one GPU: ``conv_dim / tp x (conv_kernel - 1)`` at the model's dtype."""
        conv_dim = self.num_heads * self.head_dim + 2 * self._groups(tensor_parallel) * self.state_size
        return _divide(conv_dim, tensor_parallel) * (self.conv_kernel - 1) * dtype_bytes

    def ssm_state_bytes(self, dtype_bytes: int, tensor_parallel: int = 1) -> int:
        """One layer's SSM state on one GPU: ``heads / tp x head_dim x state_size`` at ``ssm_cache_dtype``."""
        size = MAMBA_DTYPES[self.ssm_cache_dtype] or dtype_bytes
        return _divide(self.num_heads, tensor_parallel) * self.head_dim * self.state_size * size

    def state_bytes(self, dtype_bytes: int, tensor_parallel: int = 1) -> int:
        """One layer's whole state on one GPU: ``MambaSpec.page_size_bytes`` before padding."""
        return self.conv_state_bytes(dtype_bytes, tensor_parallel) + self.ssm_state_bytes(dtype_bytes,
                                                                                          tensor_parallel)

    def prefill_checkpoint_alignment(self, compute_capability: float | None) -> int | None:
        """1 on any GPU: ``MambaMixer2.get_kv_cache_spec`` exports the state at any token position."""
        return 1


def _divide(value: int, by: int) -> int:
    """vLLM's ``divide``: an exact split, else a one-line ValueError (as vLLM asserts)."""
    if value % by:
        raise ValueError(f"{value} Mamba heads or channels do not split evenly over --tensor-parallel {by}")
    return value // by


def hybrid_block_size(attention_bytes_per_token: int, mamba_page_bytes: int, block_size: int = KERNEL_BLOCK,
                      kernel_block: int = KERNEL_BLOCK, checkpoint_alignment: int = 1) -> int:
    """vLLM's ``_align_hybrid_block_size``: the attention block size, in multiples of ``max(kernel_block,
    block_size)`` (with prefix caching on, of its lcm with the layers' ``checkpoint_alignment``,
    `block_alignment`), whose page (``attention_bytes_per_token``: one token of one attention layer) holds
    ``mamba_page_bytes``; ``block_size`` (``--block-size``) where it is larger already."""
    align = lcm(max(kernel_block, block_size), checkpoint_alignment)
    size = align * cdiv(mamba_page_bytes, align * attention_bytes_per_token)
    size = kernel_block * cdiv(size, kernel_block)
    return max(block_size, size)


@dataclass(frozen=True, slots=True)
class HybridMambaPool:
    """vLLM 0.33's block pool for a hybrid attention/Mamba model on one GPU (the module docstring).

    ``page_bytes``: one block of one layer, the attention page, to which the Mamba state
    (``mamba_state_bytes``) is padded; ``attention_groups`` and ``mamba_groups``: KV cache groups of
    ``group_size`` layers each; ``num_blocks``: the pool's blocks, the null block included."""

    block_size: int
    page_bytes: int
    mamba_state_bytes: int
    group_size: int
    attention_groups: int
    mamba_groups: int
    num_blocks: int

    @property
    def bytes_per_block(self) -> int:
        """One block id's memory: a page in each of a group's ``group_size`` layers."""
        return self.group_size * self.page_bytes

    @property
    def mamba_padding_frac(self) -> float:
        """The share of a Mamba page that is padding."""
        return 1.0 - self.mamba_state_bytes / self.page_bytes

    def blocks_per_request(self, tokens: int, state_blocks: int = 1) -> int:
        """Blocks a request of ``tokens`` tokens holds at rest: ``cdiv(tokens, block_size)`` in each attention
        group and ``state_blocks`` in each Mamba group (`mamba_state_blocks`: one, more with speculative
        decoding)."""
        return self.attention_groups * cdiv(tokens, self.block_size) + self.mamba_groups * state_blocks

    def requests_that_fit(self, tokens: int, state_blocks: int = 1) -> int:
        """Requests of ``tokens`` tokens the pool holds at once, the null block left out."""
        return max(self.num_blocks - 1, 0) // self.blocks_per_request(tokens, state_blocks)

    def to_dict(self) -> dict:
        return {"block_size": self.block_size, "page_bytes": self.page_bytes,
                "mamba_state_bytes": self.mamba_state_bytes, "mamba_padding_frac": self.mamba_padding_frac,
                "group_size": self.group_size, "attention_groups": self.attention_groups,
                "mamba_groups": self.mamba_groups, "bytes_per_block": self.bytes_per_block,
                "num_blocks": self.num_blocks}


def hybrid_mamba_pool(*, attention_layers: int, attention_bytes_per_token: int, mamba: MambaStateLayers,
                      dtype_bytes: int, available_bytes: int, tensor_parallel: int = 1,
                      block_size: int = KERNEL_BLOCK, checkpoint_alignment: int = 1,
                      drafter_layers: int = 0) -> HybridMambaPool:
    """The pool of one GPU with ``available_bytes`` of KV memory; ``attention_bytes_per_token``: one token of
    one attention layer on that GPU; ``checkpoint_alignment``: `block_alignment`'s. ``drafter_layers``: an MTP
    drafter's attention layers of the target's spec (Qwen3-Next's one full-attention MTP layer,
    ``model_executor/models/qwen3_next_mtp.py:89-96``), flagged ``is_draft`` by ``GPUModelRunner.get_kv_cache_spec``
    (``v1/worker/gpu_model_runner.py:7114-7115``), a field out of the spec's equality: they join the target's
    attention layers in the planner's groups (Qwen3-Next: 13 attention layers, groups of 13, 36 gated DeltaNet
    layers in three groups of 12 and three padding layers; ``tools/vllm_oracle/gdn_pool.py``). The block size is
    unchanged (a layer's page is)."""
    state = mamba.state_bytes(dtype_bytes, tensor_parallel)
    size = hybrid_block_size(attention_bytes_per_token, state, block_size, checkpoint_alignment=checkpoint_alignment)
    page = size * attention_bytes_per_token
    attention_layers += drafter_layers
    group = kv_cache_group_size(attention_layers, mamba.layers)
    return HybridMambaPool(block_size=size, page_bytes=page, mamba_state_bytes=state, group_size=group,
                           attention_groups=cdiv(attention_layers, group), mamba_groups=cdiv(mamba.layers, group),
                           num_blocks=available_bytes // (group * page))


def check_mamba_capacity(*, allocator: str, kv_cache_dtype: str, disable_hybrid_kv_cache_manager: bool,
                         speculative_method: str | None, model: str, decode_context_parallel_size: int = 1,
                         prefix_caching: bool = True, mamba_kind: str = Mamba2Layers.label,
                         checkpoints: bool = True) -> None:
    """A one-line ValueError naming the flag for a setting not modelled on a hybrid Mamba model (`kvsim capacity`'s
    and a run's, `sim.kernel.mamba_run`). ``--decode-context-parallel-size``: vLLM 0.33 keeps a Mamba state whole
    on every DCP rank (``v1/kv_cache_interface.py``) and ``MambaManager.find_longest_cache_hit`` asserts DCP 1
    (``v1/core/single_type_kv_cache_manager.py``); `HybridMambaPool` shards nothing. ``speculative_method``:
    ``--speculative-config``'s method, modelled only as `check_mamba_speculation` says (``mamba_kind``: the
    model's `MambaStateLayers.label`; ``checkpoints``: whether its layers export prefill checkpoints on the
    GPU)."""
    if allocator != "paged":
        raise ValueError(f"--allocator {allocator}: {model} has Mamba layers, whose per-request state only the "
                         "paged allocator (vLLM's block pool) holds in kvsim; slabs or virtual ranges for a "
                         "recurrent state are not modelled")
    if kv_cache_dtype.lower() != "auto":
        raise ValueError(f"--kv-cache-dtype {kv_cache_dtype}: not modelled for {model}'s Mamba layers (the "
                         "attention block size vLLM aligns to the Mamba page was checked at the model's dtype only)")
    if disable_hybrid_kv_cache_manager:
        raise ValueError(f"--disable-hybrid-kv-cache-manager: not modelled for {model} (vLLM's Mamba layers "
                         "need the hybrid KV cache manager's separate groups)")
    if speculative_method is not None:
        check_mamba_speculation(speculative_method, prefix_caching=prefix_caching, model=model, mamba_kind=mamba_kind,
                                checkpoints=checkpoints)
    if decode_context_parallel_size > 1:
        raise ValueError(f"--decode-context-parallel-size {decode_context_parallel_size}: not modelled for {model}'s "
                         "Mamba layers (vLLM keeps their state whole on every decode-context-parallel GPU, and its "
                         "Mamba prefix-cache lookup asserts a size of 1)")


def check_mamba_speculation(method: str, *, prefix_caching: bool, model: str, mamba_kind: str,
                            checkpoints: bool = True) -> None:
    """Speculative decoding on a hybrid Mamba model, modelled with the ngram drafter on Mamba-2 or gated DeltaNet
    layers with prefix caching off (vLLM's ``mamba_cache_mode='none'``, `mamba_state_blocks`) or on (``'align'``:
    the speculative blocks after the running one, `allocators.mamba_align.place_blocks`) where the layers export
    prefill checkpoints (``checkpoints``: Mamba-2; gated DeltaNet on Hopper, FlashInfer's prefill); the rest
    refused with the reason:

    - gated DeltaNet before Hopper with prefix caching on (Triton/FLA's prefill, no checkpoint): vLLM 0.33 runs it
      with the same ``MambaManager`` code, but kvsim's align-mode speculative tables were checked against vLLM's
      scheduler only where the layers export prefill checkpoints.
    - a model-based drafter (eagle, eagle3, mtp): its attention layers join the target's in vLLM's planner,
      whose KV cache groups of equal layer count (``_get_kv_cache_groups_uniform_page_size``) they change.
      Modelled: ``mtp`` on gated DeltaNet (Qwen3-Next's one full-attention MTP layer, ``drafter_layers`` of
      `hybrid_mamba_pool`: exact against vLLM's planner, ``tools/vllm_oracle/gdn_pool.py``), its K lookahead
      slots in the attention group at every allocation (`HybridPagedAllocator.admit`'s ``lookahead_slots``,
      ``grow_with_drafts``), with prefix caching off (``gdn_driver.py --mtp``) or on where the layers export
      prefill checkpoints (``gdn_driver.py --mtp-align``), step for step as vLLM's scheduler. With prefix caching
      on, one MTP module makes vLLM hash each block with the token after it (``num_hash_lookahead_tokens`` 1,
      ``config/vllm.py:677-692``: `sim.kernel.arrivals`' ``lookahead_hashes``), which clears
      ``use_eagle_block_drop`` (``v1/core/sched/scheduler.py:342-345``): no group drops its last hit block and
      no Mamba group its checkpoint (``v1/core/kv_cache_coordinator.py:129-182``), and its prefill lookahead of
      1 ends no chunk early; a Mamba group allocates state columns for the target's tokens only, not the
      lookahead slots (`HybridQueries._main_model_drafts`). The drop rules (``disable_lookahead_block_hashes``)
      and multi-module MTP, under which they apply, are refused by `sim.kernel.spec_decode.parse_speculative`
      and `drafter_layers`. eagle, eagle3, and mtp on Mamba-2: refused (not checked against vLLM's planner for
      those models).
    - Mamba-1 layers (Jamba): vLLM 0.33's ``MambaMixer`` (``model_executor/layers/mamba/mamba_mixer.py``) and its
      ``mamba1_attn.py`` metadata read no accepted-token count, unlike Mamba-2's and gated DeltaNet's backends."""
    if method == "mtp" and mamba_kind == "gated DeltaNet":
        if prefix_caching and not checkpoints:
            raise ValueError(f"--speculative-config with prefix caching on (vLLM's mamba_cache_mode 'align'): not "
                             f"modelled for {model}'s {mamba_kind} layers on a GPU where they export no prefill "
                             "checkpoint; give --no-enable-prefix-caching")
        return
    if method != "ngram":
        raise ValueError(f"--speculative-config: method {method!r} on {model} is not modelled (its drafter's "
                         "attention layers would change vLLM's KV cache groups of the hybrid pool); method 'ngram' "
                         "is, and 'mtp' on gated DeltaNet")
    if mamba_kind == "Mamba-1":
        raise ValueError(f"--speculative-config: not modelled for {model}'s Mamba-1 layers (vLLM 0.33's Mamba-1 "
                         "mixer reads no accepted-token count: it handles no draft tokens)")
    if prefix_caching and not checkpoints:
        raise ValueError(f"--speculative-config with prefix caching on (vLLM's mamba_cache_mode 'align'): not "
                         f"modelled for {model}'s {mamba_kind} layers on a GPU where they export no prefill "
                         "checkpoint (the speculative state blocks vLLM moves along a request's Mamba table, "
                         "MambaManager.allocate_new_blocks, v1/core/single_type_kv_cache_manager.py:1816-1923, were "
                         "checked where they do); give --no-enable-prefix-caching")


def mamba_state_blocks(num_speculative_tokens: int) -> int:
    """State blocks a request holds in each Mamba group with prefix caching off: one, plus vLLM's
    ``num_speculative_blocks``, which ``MambaBase.get_kv_cache_spec`` (``model_executor/layers/mamba/
    abstract.py``) sets to ``num_speculative_tokens`` (0 under ``--use-replayssm``, not modelled).
    ``MambaManager.get_num_blocks_to_allocate`` and ``allocate_new_blocks`` in mode ``'none'`` add ``block_size
    x num_speculative_blocks`` tokens to what the request asks for, ``block_size`` being ``max_model_len``, and
    ``KVCacheManager.allocate_slots`` caps a request's slots at ``max_model_len``: ``1 + num_speculative_tokens``
    blocks from admission to the end (``MambaSpec.max_memory_usage_bytes``: ``1 + num_speculative_blocks``
    pages). The pool's size does not change (``get_kv_cache_config_from_groups`` divides by the page)."""
    return 1 + num_speculative_tokens


def block_alignment(mamba: MambaStateLayers, prefix_caching: bool, compute_capability: float | None) -> int:
    """The alignment ``_align_hybrid_block_size`` adds to the attention block size: with prefix caching on
    (``mamba_cache_mode="align"``) the layers' prefill checkpoint alignment (1 where they export none), else 1
    (Mamba-2: 1 either way; gated DeltaNet on Hopper: 64, `allocators.gdn_layout`)."""
    if not prefix_caching:
        return 1
    return mamba.prefill_checkpoint_alignment(compute_capability) or 1


def model_block_size(model, tensor_parallel: int = 1, block_size: int = KERNEL_BLOCK,
                     checkpoint_alignment: int = 1) -> int:
    """The attention block size of a catalog ``ModelSpec`` with ``mamba`` on ``tensor_parallel`` GPUs
    (`hybrid_block_size`, as `model_pool` sizes it): the block size every group of a run's pool has."""
    per_token = model.kv_bytes_per_token_per_gpu(tensor_parallel) // model.attention_layers
    return hybrid_block_size(per_token, model.mamba.state_bytes(model.dtype_bytes, tensor_parallel), block_size,
                             checkpoint_alignment=checkpoint_alignment)


def model_pool(model, kv_bytes: int, tensor_parallel: int = 1, block_size: int = KERNEL_BLOCK,
               checkpoint_alignment: int = 1, drafter_layers: int = 0) -> HybridMambaPool:
    """`hybrid_mamba_pool` of a catalog ``ModelSpec`` with ``mamba`` whose ``tensor_parallel`` GPUs have
    ``kv_bytes`` of KV memory together (each GPU sizes its own pool from its share, as vLLM's workers do);
    ``drafter_layers``: an MTP drafter's attention layers (`sim.kernel.spec_decode.drafter_layers`)."""
    per_token = model.kv_bytes_per_token_per_gpu(tensor_parallel) // model.attention_layers
    return hybrid_mamba_pool(attention_layers=model.attention_layers, attention_bytes_per_token=per_token,
                             mamba=model.mamba, dtype_bytes=model.dtype_bytes,
                             available_bytes=kv_bytes // tensor_parallel, tensor_parallel=tensor_parallel,
                             block_size=block_size, checkpoint_alignment=checkpoint_alignment,
                             drafter_layers=drafter_layers)
