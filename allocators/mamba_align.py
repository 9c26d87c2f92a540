"""vLLM 0.33's rules for hybrid Mamba models with prefix caching on (``mamba_cache_mode="align"``).

With prefix caching on, vLLM gives a Mamba KV cache group the attention block size
(``MambaModelConfig.verify_and_update_config``, ``model_executor/models/config.py``) and one prefill checkpoint block
(``MambaMixer2.get_kv_cache_spec``). A sequence's Mamba table is then indexed by position like an attention
table, but holds a state, not tokens: column ``i`` is the state after ``(i + 1) * block_size`` tokens, and all but
at most three columns are the null block (``MambaManager``, ``v1/core/single_type_kv_cache_manager.py``)::

    tokens  0 .. 100, block 16:   | 0 | 0 | 0 | b4 | 0 | b9 | b11 |
                                    b4: the state the step before left (freed at the next allocation),
                                    b9: the checkpoint at 96 (the prompt's reusable state), b11: the running state

Only positions a later request can resume at are cached (``prefix_cache_retention_interval`` 0, vLLM's default:
the prompt's replay boundary and a shared-prefix junction, `window_retention.retained_blocks` with one block; a
positive interval also keeps the state ending each interval, and makes every chunk able to export its checkpoint
take a block for it, `needs_checkpoint` with ``prefill_end`` 0), and the scheduler ends prefill chunks at block
boundaries so that those states exist (`aligned_split`).
The functions here are those rules on plain tables; `HybridPagedAllocator` applies them per Mamba group.

With speculative decoding (``spec``: vLLM's ``MambaSpec.num_speculative_blocks``, the draft tokens) a table holds
``spec`` more blocks after the running one (``num_required_blocks = cdiv(num_tokens_main_model, block_size) +
num_speculative_blocks``, ``MambaManager.allocate_new_blocks``, ``v1/core/single_type_kv_cache_manager.py``
:1797-1923; ``num_tokens_main_model`` counts the drafts a verification schedules). They are taken with the first
allocation; a later one copies the state from column ``len - 1 - spec`` (the running block before the
speculative ones, :1838-1847), moves each speculative block whose column the step leaves behind to the table's end
(``_relocate_speculative_block``, :1861-1871, :1925-1934), and takes only the running block (and a checkpoint's):
each block boundary crossed one at a time reuses the first speculative block's column, so a decoding request
rests at ``1 + spec`` blocks, ``spec`` more than without drafts (with the previous running block and a checkpoint
up to ``2 + spec + checkpoint``, ``MambaSpec.max_memory_usage_bytes``, ``v1/kv_cache_interface.py``:1135-1139).
"""

from __future__ import annotations

from collections.abc import Callable

from allocators.base import cdiv


def checkpoint_position(num_tokens: int, block_size: int) -> int:
    """The last block boundary whose state a prefill of ``num_tokens`` can cache, leaving a token to recompute
    for logits (``get_mamba_prefill_checkpoint_position``, ``v1/kv_cache_interface.py``, no EAGLE)."""
    return max((num_tokens - 1) // block_size * block_size, 0)


def checkpoint_valid(start: int, end: int, checkpoint: int, block_size: int) -> bool:
    """Whether a chunk ``start .. end`` can export the state at ``checkpoint`` into a block of its own
    (``is_mamba_prefill_checkpoint_valid`` with a checkpoint alignment of 1, as Mamba-2 sets it)."""
    return (start % block_size == 0 and cdiv(end, block_size) - 2 > (start - 1) // block_size
            and start + block_size <= checkpoint and start < checkpoint < end)


def needs_checkpoint(table: list[int], start: int, end: int, prefill_end: int, block_size: int, spec: int = 0,
                     allocated: bool = False) -> bool:
    """``MambaManager._needs_internal_checkpoint``: the chunk reaching the prefill's end takes a block for the
    state at `checkpoint_position` (column ``cdiv(end) - 2``) when that column has none yet (or, once blocks were
    ``allocated``, only one of the ``spec`` speculative blocks at the table's end, :1683-1688); with
    ``prefill_end`` 0 (vLLM's coordinator passes it under a positive retention interval) any chunk that can
    export it."""
    column = cdiv(end, block_size) - 2
    return (end >= prefill_end and checkpoint_valid(start, end, checkpoint_position(end, block_size), block_size)
            and column >= 0 and (column >= len(table) or table[column] == 0
                                 or (allocated and spec > 0 and column >= len(table) - spec)))


def blocks_to_allocate(table_len: int, end: int, checkpoint: bool, block_size: int, spec: int = 0,
                       allocated: bool = True) -> int:
    """New state blocks a sequence whose table (hits included) has ``table_len`` columns takes to reach ``end``
    tokens (``MambaManager.get_num_blocks_to_allocate`` in align mode, :1733-1795): the columns missing (``spec``
    speculative ones after the running block), at most the running block and the checkpoint's, and the speculative
    ones where no block was ``allocated`` yet."""
    new = cdiv(end, block_size) + spec - table_len
    return min(new, 1 + checkpoint + (0 if allocated else spec)) if new > 0 else new


def freed_columns(table: list[int], retired: int, last: int, computed: int, block_size: int) -> tuple[list[int], int]:
    """``MambaManager.remove_skipped_blocks`` with ``computed`` tokens processed: the columns whose blocks go
    back to the pool, in vLLM's order (every live one below ``(computed - 1) // block_size``, latest first, then
    the previous running block ``last`` once a newer one runs), and the new retired mark (columns below it were
    freed already)."""
    skipped = computed - 1
    out = []
    if skipped > 0:
        stop = min(skipped // block_size, len(table))
        if retired < stop:
            out = [i for i in range(stop - 1, retired - 1, -1) if table[i]]
            retired = stop
    if 0 <= last < cdiv(computed, block_size) - 1 and table[last] and last not in out:
        out.append(last)
    return out, retired


def place_blocks(table: list[int], end: int, checkpoint: bool, allocated: bool, block_size: int,
                 pop: Callable[[int], list[int]], spec: int = 0) -> int | None:
    """``MambaManager.allocate_new_blocks`` in align mode: extend ``table`` to ``end`` tokens with nulls, move the
    ``spec`` speculative blocks the step leaves behind to the end (once blocks were ``allocated``), then take the
    checkpoint block (if any), the running block and (first allocation) the speculative ones by ``pop(count)``.
    Returns the column of the block the state is copied from (the previous running block, or a prefix hit's),
    freed at a later allocation; None where nothing was placed (the running block covers ``end``)."""
    required = cdiv(end, block_size) + spec
    if required <= len(table) and not checkpoint:
        return None
    prev = len(table)
    last = prev - 1 - spec if allocated else prev - 1 if prev > 0 else -1
    skipped = required - spec - 1
    if prev < skipped:
        table.extend([0] * (skipped - checkpoint - prev))
    if allocated:
        for i in range(prev - spec, prev):
            if i >= skipped - checkpoint:
                break
            table.append(table[i])
            table[i] = 0
    table.extend(pop(max(required - len(table), 0)))
    return last


def aligned_split(start: int, num_new: int, *, prompt: int, num_tokens: int, junction: int, block_size: int,
                  max_prefill: int, checkpoints: bool = True) -> int:
    """The tokens a prefill chunk of ``num_new`` starting at ``start`` keeps (``Scheduler.
    _mamba_block_aligned_split``, ``v1/core/sched/scheduler.py``): chunks end at block boundaries, at the last
    cacheable boundary and at a shared-prefix ``junction``, except the prompt's last chunk. ``num_tokens``: the
    request's tokens (a resumed request's include its output, replayed as prefill); ``max_prefill``: the step's
    token limit, capped by the long-prefill threshold; ``checkpoints``: whether the layers export a state from inside
    a prefill (``Scheduler.mamba_has_prefill_checkpoint_blocks``; a Mamba-1 layer does not, and then every prompt's
    chunk stops at the last cacheable boundary). 0: nothing this step (too little budget for a block)."""
    prefill_end = max(prompt, num_tokens - 1)
    if start >= prefill_end:
        return num_new
    bs = block_size
    last_cache = checkpoint_position(num_tokens, bs)
    end = start + num_new
    internal = (checkpoints and end >= prefill_end
                and checkpoint_valid(start, end, checkpoint_position(prefill_end, bs), bs))
    if internal:
        last_cache = 0
    if end < prefill_end:
        aligned = end // bs * bs
        if aligned > start or bs <= max_prefill:
            end = aligned
    stops = ((start // bs + 1) * bs if start % bs and not internal else 0, last_cache,
             start + (junction - start) // bs * bs if start < junction < end else 0)
    end = min((s for s in stops if start < s < end), default=end)
    return max(end - start, 0)
