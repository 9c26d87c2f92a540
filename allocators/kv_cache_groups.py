"""vLLM v1's KV cache groups: how a model's layers are cut into groups that share one block pool.

A model's KV layout is a few *attention groups* (catalog `KVGroup`: ``name``, ``attention``, ``layers``,
``window``, ``bytes_per_token``), e.g. Gemma-3-12B's 40 sliding-window layers and 8 full ones. vLLM's pool has
one page size, so it cuts every attention group into *KV cache groups* of the same layer count (the smallest
attention group's; the last cut of a larger group is padded), each with its own block table per request::

    gemma-3-12b: local 40 layers (window 1024), global 8   ->  unit 8: local.0 .. local.4, global  (6 groups)
    gpt-oss-20b: sliding 12 (window 128), full 12          ->  unit 12: sliding, full              (2 groups)
    llama-4-scout: chunked_local 36 (chunk 8192), full 12  ->  unit 12: chunked_local.0 .. .2, full (4 groups)

A block then holds ``block_size`` tokens of ``unit`` layers, whichever group holds it, so a pool of
``kv_tokens`` full tokens (every layer) has ``kv_tokens x layers / unit`` *group slots*: the unit in which the
hybrid allocator counts its memory (one token in one KV cache group). ``docs/vllm-v1.md`` says more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from allocators.base import cdiv

SLIDING = "sliding_window"
CHUNKED = "chunked_local"
LOCAL = (SLIDING, CHUNKED)
"""The attention types whose groups free what their tokens no longer attend to: vLLM's ``SlidingWindowManager``
and ``ChunkedLocalAttentionManager``, which its hybrid KV cache manager runs beside full attention."""


@dataclass(frozen=True, slots=True)
class CacheGroup:
    """One KV cache group (``name``): ``unit`` layers (``layers`` of them real, the rest padding) of one
    attention group (``group``); ``window`` is the sliding window in tokens, or with ``chunked`` the attention
    chunk (Llama 4's chunked-local attention), None for full attention (and MLA)."""

    name: str
    group: str
    window: int | None
    layers: int
    mamba: bool = False  # a group of Mamba layers: one state block per sequence (`mamba_cache_groups`)
    chunked: bool = False  # ``window`` is an attention chunk: a token attends within its own chunk only


def needs_hybrid(kv_groups: Sequence) -> bool:
    """Whether vLLM would use its hybrid manager for this layout: more than one attention group, or any
    sliding-window (or chunked-local) group (a pure sliding-window model, as Mistral-7B v0.1, frees
    out-of-window blocks too)."""
    return len(kv_groups) > 1 or any(g.attention in LOCAL for g in kv_groups)


def disable_unifies(kv_groups: Sequence) -> bool:
    """Whether vLLM's ``--disable-hybrid-kv-cache-manager`` turns this layout's window (or chunked-local) layers
    into full attention (``unify_hybrid_kv_cache_specs``): only where they meet full-attention layers. A model of
    window layers alone, as Mistral-7B v0.1, is one uniform spec, which vLLM leaves as it is: its windows still
    free."""
    windows = [g.attention in LOCAL for g in kv_groups]
    return any(windows) and not all(windows)


def uses_hybrid_manager(allocator: str, kv_groups: Sequence, disabled: bool) -> bool:
    """Whether ``allocator`` on this layout is vLLM's hybrid KV cache manager (`needs_hybrid`, and only
    ``paged`` models it), given ``--disable-hybrid-kv-cache-manager`` (``disabled``; `disable_unifies`)."""
    return allocator == "paged" and needs_hybrid(kv_groups) and not (disabled and disable_unifies(kv_groups))


def hybrid_disabled(disabled: bool, kv_groups: Sequence, drafter: bool) -> bool:
    """Whether vLLM runs without its hybrid manager: ``--disable-hybrid-kv-cache-manager`` (``disabled``), or a
    chunked-local model with a drafter that reads the target's hidden states (``drafter``: EAGLE, EAGLE-3, MTP),
    for which vLLM 0.33 disables it itself (``VllmConfig.__post_init__``: "Hybrid KV cache manager is not yet
    supported with chunked local attention + eagle"), turning the chunked layers into full attention."""
    return disabled or (drafter and any(g.attention == CHUNKED for g in kv_groups))


GROUP_SIZE_SLACK = 1.5
"""``_get_kv_cache_groups_uniform_page_size``: the larger layer count sets the group size when it is under 1.5
times the smaller (fewer padding layers), else the smaller does."""


def kv_cache_group_size(*layer_counts: int) -> int:
    """Layers per KV cache group, given each attention type's layer count (`GROUP_SIZE_SLACK`)."""
    low, high = min(layer_counts), max(layer_counts)
    return high if high < low * GROUP_SIZE_SLACK else low


def split_kv_groups(kv_groups: Sequence) -> tuple[int, tuple[CacheGroup, ...]]:
    """``(unit, cache groups)``: vLLM's grouping by the smallest attention group's layer count, or by the largest
    where that is under 1.5 times the smallest (``_get_kv_cache_groups_uniform_page_size``: fewer padding layers;
    gpt-oss-20b with an EAGLE drafter's layer, 12 sliding and 13 full, is two groups of 13, the sliding one
    padded). Every layer must cost the same bytes per token (vLLM's one page size); a one-line ValueError
    otherwise."""
    if not kv_groups:
        raise ValueError("a hybrid KV pool needs at least one KV group")
    per_layer = {g.bytes_per_token / g.layers for g in kv_groups}
    if len(per_layer) > 1:
        raise ValueError("KV groups " + ", ".join(g.name for g in kv_groups) + " differ in bytes per layer per "
                         "token; one block pool needs one page size")
    unit = kv_cache_group_size(*(g.layers for g in kv_groups))
    out: list[CacheGroup] = []
    for g in kv_groups:
        window = int(g.window) if g.attention in LOCAL else None
        if window is not None and window <= 0:
            raise ValueError(f"KV group {g.name}: a sliding window or attention chunk must be positive, got "
                             f"{g.window!r}")
        count = cdiv(g.layers, unit)
        for i in range(count):
            name = g.name if count == 1 else f"{g.name}.{i}"
            out.append(CacheGroup(name, g.name, window, min(unit, g.layers - i * unit),
                                  chunked=g.attention == CHUNKED))
    return unit, tuple(out)


MAMBA = "mamba"
"""The attention-group name a hybrid Mamba pool's Mamba KV cache groups report under (`mamba_cache_groups`)."""


def mamba_cache_groups(count: int, unit: int) -> tuple[CacheGroup, ...]:
    """A hybrid Mamba model's ``count`` Mamba KV cache groups of ``unit`` layers each, which vLLM lists after
    the attention groups (``_get_kv_cache_groups_uniform_page_size``; `allocators.mamba_layout`). With
    ``mamba_cache_mode='none'`` (prefix caching off) a sequence holds one block in each for its whole life:
    ``MambaManager``'s block size is ``max_model_len``, so ``cdiv(tokens, block_size)`` is 1 and its skipped
    tokens (``num_computed_tokens - 1``) never fill a block."""
    if count < 0:
        raise ValueError(f"mamba groups must be non-negative, got {count}")
    return tuple(CacheGroup(f"{MAMBA}.{i}" if count > 1 else MAMBA, MAMBA, None, unit, mamba=True)
                 for i in range(count))


def group_slots(kv_tokens: int, kv_groups: Sequence, unit: int) -> int:
    """Group slots in a pool of ``kv_tokens`` full tokens: its bytes over the bytes of one token in ``unit``
    layers."""
    return kv_tokens * sum(g.layers for g in kv_groups) // unit


def skipped_blocks(computed: int, window: int, block_size: int, chunked: bool = False) -> int:
    """Leading blocks a sliding-window group no longer needs once ``computed`` tokens are computed: the next
    token attends to the last ``window`` tokens, itself included (vLLM's ``remove_skipped_blocks`` with
    ``SlidingWindowManager.get_num_skipped_tokens``); ``chunked``: a chunked-local group's, whose next token
    attends to its own ``window``-token chunk only, so every block of an earlier chunk is skipped
    (``ChunkedLocalAttentionManager.get_num_skipped_tokens``: ``computed // chunk x chunk``)."""
    first_needed = computed // window * window if chunked else computed - window + 1
    return first_needed // block_size if first_needed > 0 else 0


def next_skip(skipped: int, window: int, block_size: int, chunked: bool = False) -> int:
    """The fewest computed tokens at which a group that skips ``skipped`` blocks (`skipped_blocks`) skips more:
    a window's first token past the next block, a chunked group's next chunk boundary past it."""
    end = (skipped + 1) * block_size
    return cdiv(end, window) * window if chunked else end + window - 1
