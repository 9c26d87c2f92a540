"""Runs of a hybrid attention/Mamba-2 model (Nemotron-H) or gated DeltaNet model (Qwen3-Next) as vLLM 0.33 serves
them, with prefix caching off or on.

``--no-enable-prefix-caching`` is vLLM's ``mamba_cache_mode="none"`` (``MambaModelConfig.verify_and_update_config``,
``model_executor/models/config.py``): the Mamba block size is ``max_model_len``, so ``MambaManager``
(``v1/core/single_type_kv_cache_manager.py``) gives a request one state block per Mamba KV cache group when it is
first scheduled and frees it with the request, and the scheduler splits chunks as for any model
(``Scheduler.need_mamba_block_aligned_split`` is False outside ``"align"``). The pool is `HybridMambaPool`'s
(``allocators.mamba_layout``), its attention groups and Mamba groups served by `HybridPagedAllocator`
(``mamba_groups``). vLLM's default, prefix caching on, is ``"align"``: block-aligned chunk splits
(`sim.kernel.mamba_split`), a state block per boundary crossed and states cached at reachable boundaries
(`allocators.mamba_align`), with ``--prefix-cache-retention-interval`` 0 (vLLM's default) or a positive interval
(every chunk then takes a checkpoint block, and each interval's last state is cached too) or None (dense: the
same checkpoint blocks, every full state cached; ``KVCacheCoordinator.get_num_blocks_to_allocate`` and
``MambaManager.reachable_block_mask``, ``v1/core/``). With prefix caching off vLLM accepts a positive interval that
is a multiple of its scheduler block size, lcm(block size, max_model_len), and caches nothing
(`HybridQueries`' check). Speculative decoding (``--speculative-config``, ngram) gives each request ``1 +
num_speculative_tokens`` state blocks per Mamba group (`run_state_blocks`; prefix caching on, Mamba-2 only: the
speculative ones after the running state, `allocators.mamba_align.place_blocks`); Qwen3-Next's MTP drafter
(``method`` mtp, prefix caching off or on) too, its attention layer in the pool's attention group (`run_pool`'s
``drafter_layers``) and its K lookahead slots in that group at every allocation (on, in no Mamba group:
`run_lookahead_tokens`). The settings not modelled
are refused with the reason (`mamba_run_refusals`). Gated DeltaNet layers are scheduled by the same ``MambaManager``
and scheduler rules: with prefix caching on, where vLLM exports their prefill checkpoints (FlashInfer's GDN prefill
on Hopper, whose 64-token grid also aligns the block size) as Mamba-2's, and before Hopper (Triton/FLA: no
checkpoint, no alignment beyond the kernel block's; `allocators.gdn_layout`) as Mamba-1's. Mamba-1 layers (Jamba,
`allocators.mamba1_layout`) export no prefill checkpoint on any GPU: with prefix caching on vLLM's scheduler ends
every prompt's chunk at its last cacheable boundary and no chunk takes a checkpoint block, as kvsim runs them
(`mamba_allocator`'s ``mamba_checkpoints``, from the layers' ``prefill_checkpoint_alignment`` on the run's GPU).
"""

from __future__ import annotations

from allocators.capacity import pool_bytes_per_token
from allocators.catalog import get_gpu
from allocators.hybrid import HybridPagedAllocator
from allocators.kv_cache_groups import split_kv_groups
from allocators.mamba_layout import (
    HybridMambaPool,
    block_alignment,
    check_mamba_capacity,
    mamba_state_blocks,
    model_pool,
)
from sim.kernel.spec_decode import drafter_layers, num_lookahead_tokens, parse_speculative, speculative_method


def mamba_run_refusals(config, model) -> None:
    """A one-line ValueError naming the flag for a setting of a run of ``model`` (with Mamba layers) kvsim does
    not model: the capacity report's (`check_mamba_capacity`); with prefix caching on (mamba_cache_mode 'align')
    prefill without chunks; a host tier or KV transfer (vLLM's connectors carry the Mamba state as a group of its
    own: not modelled), and swap preemption (vLLM v1 recomputes)."""
    check_mamba_capacity(allocator=config.allocator, kv_cache_dtype=config.kv_cache_dtype,
                         disable_hybrid_kv_cache_manager=config.disable_hybrid_kv_cache_manager,
                         speculative_method=speculative_method(config.speculative_config), model=model.name,
                         prefix_caching=config.prefix_caching, mamba_kind=model.mamba.label,
                         checkpoints=not config.speculative_config or _exports_checkpoints(config, model))
    if config.prefix_caching and (not config.chunked_prefill or config.scheduler != "continuous"):
        raise ValueError(f"--no-chunked-prefill / --scheduler static: {model.name}'s block-aligned Mamba chunks "
                         "(mamba_cache_mode='align') are modelled with chunked prefill on a continuous scheduler")
    if config.cpu_offload_gib > 0:
        raise ValueError(f"--cpu-offload-gib: a host tier is not modelled for {model.name}'s Mamba state blocks")
    if config.kv_transfer_config is not None or config.prefill_replicas or config.decode_replicas:
        raise ValueError(f"--kv-transfer-config: moving {model.name}'s Mamba state between replicas is not modelled")
    if config.preemption != "recompute":
        raise ValueError(f"--preemption {config.preemption}: not modelled for {model.name} (vLLM v1 recomputes)")
    if config.decode_context_parallel_size > 1:
        raise ValueError(f"--decode-context-parallel-size: vLLM does not support it with Mamba layers ({model.name})")


def _capability(config) -> float | None:
    """The compute capability of the run's ``--gpu``."""
    return get_gpu(config.gpu).compute_capability


def run_alignment(config, model) -> int:
    """The block-size alignment of a run's pool (`block_alignment`: its prefix caching and GPU)."""
    return block_alignment(model.mamba, config.prefix_caching, _capability(config))


def run_pool(config, model, kv_tokens: int, block_size: int | None = None) -> HybridMambaPool:
    """vLLM's pool for a run of ``config`` whose KV capacity is ``kv_tokens`` token slots (`kv_capacity`: its
    bytes over an attention token's): the same bytes cut into `HybridMambaPool` blocks. Exact where a KV cache
    group holds every attention layer (Nemotron-H-8B: 4 attention layers, groups of 4), as a block is then
    ``block_size`` whole tokens; ``block_size``: ``--block-size`` (default the kernel block, 16)."""
    from allocators.mamba_layout import KERNEL_BLOCK

    tp = config.tensor_parallel
    draft = drafter_layers(speculative_method(config.speculative_config), model)  # `kv_capacity`'s token slots
    return model_pool(model, kv_tokens * pool_bytes_per_token(model, tp, draft), tp,
                      KERNEL_BLOCK if block_size is None else block_size, run_alignment(config, model), draft)


def mamba_allocator(config, model, kv_tokens: int, kv_groups: tuple, options: dict) -> HybridPagedAllocator:
    """The hybrid allocator over `run_pool`'s blocks: the model's attention groups, then its Mamba groups (freed in
    vLLM's order, the Mamba groups first where the model's layer 0 is recurrent: `MambaStateLayers.groups_first`).
    ``options``: the allocator options `build_replica` gives every allocator (``block_size``: the pool's)."""
    pool = run_pool(config, model, kv_tokens, config.block_size)
    attention = len(split_kv_groups(kv_groups)[1])
    if attention != pool.attention_groups:  # vLLM's groups of `group_size` layers would cut attention otherwise
        raise ValueError(f"{model.name}: {pool.attention_groups} attention KV cache groups of {pool.group_size} "
                         f"layers in vLLM's pool but {attention} in kvsim's hybrid allocator; not modelled")
    if options["block_size"] != pool.block_size:
        raise ValueError(f"{model.name}: the run's block size {options['block_size']} is not the pool's "
                         f"{pool.block_size}")
    return HybridPagedAllocator(pool.num_blocks * pool.block_size, kv_groups=kv_groups,
                                mamba_groups=pool.mamba_groups, mamba_groups_first=model.mamba.groups_first,
                                mamba_checkpoints=_exports_checkpoints(config, model),
                                mamba_state_blocks=run_state_blocks(config),
                                lookahead_tokens=run_lookahead_tokens(config), **options)


def run_state_blocks(config) -> int:
    """State blocks a request holds in each Mamba group (`mamba_state_blocks`: 1, and one per speculative token
    with ``--speculative-config``, modelled as `check_mamba_speculation` says)."""
    spec = config.speculative_config
    return mamba_state_blocks(0 if spec is None else parse_speculative(spec)[1])


def run_lookahead_tokens(config) -> int:
    """A model-based drafter's lookahead slots (`num_lookahead_tokens`: MTP's K), which the hybrid allocator gives
    the attention groups only in align mode (`HybridQueries._main_model_drafts`)."""
    spec = config.speculative_config
    return 0 if spec is None else num_lookahead_tokens(*parse_speculative(spec))


def _exports_checkpoints(config, model) -> bool:
    """Whether the run's Mamba layers export a state from inside a prefill with prefix caching on (vLLM's
    ``num_prefill_checkpoint_blocks`` 1; Mamba-1: 0, `allocators.mamba1_layout`). Off, nothing is exported."""
    return config.prefix_caching and model.mamba.prefill_checkpoint_alignment(_capability(config)) is not None
