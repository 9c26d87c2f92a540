"""Which full blocks of a sliding-window group vLLM 0.33 caches: its ``prefix_cache_retention_interval``.

A window group can only serve a hit whose last ``need = cdiv(window - 1, block_size)`` blocks are cached, so vLLM
keeps (hashes) just the blocks that could end such a hit (``SlidingWindowManager.reachable_block_mask``,
``v1/core/single_type_kv_cache_manager.py``; the setting is ``CacheConfig.prefix_cache_retention_interval``,
``config/cache.py``, copied into the engine's ``KVCacheConfig`` by ``v1/core/kv_cache_planning.py``)::

    None  dense: every full block (vLLM before 0.33; ``--prefix-cache-retention-interval None``)
    0     vLLM 0.33's default: the ``need`` blocks before each reachable boundary only
    k > 0 also the ``need`` blocks ending every k-token segment (k a multiple of the block size)

The reachable boundaries (``KVCacheCoordinator.cache_blocks``, ``kv_cache_coordinator.py``): the replay
boundary ``num_prompt_tokens - 1`` (a resend of the prompt hits up to its last full block before it; EAGLE is not
modelled), and the request's ``shared_prefix_boundary``: at its admission, the full-attention hit when that was
longer than the hit every group gave (``HybridKVCacheCoordinator.find_longest_cache_hit``'s uncached common
prefix, ``KVCacheManager.get_computed_blocks``), a shared prefix the window group has not cached yet. Each
boundary is floored to the block size (the hit alignment of a pool whose groups share one block size). So under
0 a window group never caches a generated block, nor the blocks of a long prompt's middle.

A Mamba group in align mode (`allocators.mamba_align`) is the same rule with ``need`` 1: a hit resumes from the one
state block ending on its boundary (``MambaManager.reachable_block_mask``: block ``i`` kept where ``(i + 1)`` is a
multiple of ``k / block_size``, every block where that is 1, and the block ending at each reachable boundary).
"""

from __future__ import annotations

from collections.abc import Sequence


def retained_blocks(start: int, stop: int, *, need: int, interval: int | None, boundaries: Sequence[int],
                    block_size: int) -> list[bool] | None:
    """Per block ``start .. stop - 1`` of a window group, whether vLLM caches it once full (its
    ``reachable_block_mask`` without EAGLE); None: every block."""
    if interval is None:  # dense: a tail at every block boundary, which covers every block
        return None
    mask = [False] * (stop - start)
    if interval:
        per_segment = interval // block_size
        if need >= per_segment:
            return None
        for i in range(start, stop):
            if i % per_segment >= per_segment - need:
                mask[i - start] = True
    for boundary in boundaries:
        end = boundary // block_size
        for i in range(max(start, end - need), min(stop, end)):
            mask[i - start] = True
    return mask


def check_retention_interval(interval: int | None, block_size: int, has_window: bool, why: str = "") -> None:
    """vLLM's checks (``_validate_prefix_cache_retention_interval``, ``v1/core/kv_cache_coordinator.py``):
    non-negative, and a positive interval only on a model with a sliding-window or Mamba KV cache group
    (``has_window``), a multiple of ``block_size``: vLLM's scheduler block size, the least common multiple of its
    groups' block sizes (``resolve_kv_cache_block_sizes``), the attention block size except where a Mamba group
    without prefix caching has blocks of ``max_model_len`` tokens (`HybridQueries`, which says so in ``why``)."""
    if interval is not None and interval < 0:
        raise ValueError(f"--prefix-cache-retention-interval must be non-negative (or None), got {interval}")
    if not interval:
        return
    if not has_window:
        raise ValueError("--prefix-cache-retention-interval is set but this model has no sliding-window or Mamba KV "
                         "cache group, so retention has no effect: set it to 0 (it only applies to sliding-window "
                         "and Mamba layers)")
    if interval % block_size:
        raise ValueError(f"--prefix-cache-retention-interval ({interval}) must be a multiple of the scheduler block "
                         f"size ({block_size}, the least common multiple of the KV cache groups' block sizes{why})")
