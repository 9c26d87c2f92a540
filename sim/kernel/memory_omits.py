"""What a run's KV memory model leaves out of the model it serves, each said once, never implied.

Why: ``paged`` on a sliding-window model is vLLM's hybrid KV cache manager (`allocators.hybrid`), which
frees the blocks that fall out of a window, and the contiguous slabs keep window layers in ring buffers of the
window's size (`allocators.slab_layout`). Every other allocator (vattention, paged-cow, radix) keeps every
token's KV in every layer, so on Gemma 3, gpt-oss or Mistral it holds more memory, and fits fewer requests,
than the model needs; a comparison table would otherwise read that as the allocator's own waste. The step clock reads only the window either way
(`sim.kernel.cost_model`). The summary carries the phrases as ``memory_omits`` (only when there are any) and
``kvsim run``/``compare`` print each as a note.
"""

from __future__ import annotations

from allocators.kv_cache_groups import CHUNKED, LOCAL
from sim.kernel.config import SimConfig


def memory_omits(config: SimConfig, model, *, window_rings: bool) -> tuple[str, ...]:
    """Phrases for the summary's ``memory_omits``. ``paged`` on a model with windows is vLLM's hybrid manager
    (`sim.kernel.replica.hybrid_kv_groups`), or holds full layers because vLLM's own
    ``--disable-hybrid-kv-cache-manager`` asked for them: either way nothing is left out that vLLM would keep.
    ``window_rings``: the allocator's slabs hold a window layer's ring buffer (a contiguous allocator's
    `allocators.contiguous.ring_options`; the caller, which builds allocators, asks it)."""
    local = [g for g in model.kv_groups() if g.attention in LOCAL]
    if not local or config.allocator == "paged" or window_rings:
        return ()
    windows = sorted({g.window for g in local})
    if local[0].attention == CHUNKED:
        return (f"chunked-local attention: {config.allocator} keeps every token's KV in {model.name}'s chunked "
                f"layers (chunk {', '.join(f'{w:,}' for w in windows)} tokens), where only paged, vLLM's hybrid KV "
                "cache manager, frees the blocks of the chunks before a token's",)
    return (f"sliding windows: {config.allocator} keeps every token's KV in {model.name}'s window layers "
            f"(window {', '.join(f'{w:,}' for w in windows)} tokens), where only paged, vLLM's hybrid KV cache "
            "manager, frees the blocks that leave the window",)
