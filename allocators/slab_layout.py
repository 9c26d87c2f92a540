"""`SlabLayout`: the slots one contiguous slab takes per token, sliding-window layers kept as ring buffers.

Why: a contiguous-slab server keeps a sliding-window layer's KV in a ring buffer of the window's size, not in
a buffer of the request's whole length. Mistral's reference implementation does so (mistralai/mistral-src,
``mistral/cache.py``, `RotatingBufferCache`: ``cache_k`` of shape ``(n_layers, max_batch_size, sliding_window,
n_kv_heads, head_dim)`` per sequence, token ``p`` written at ``p % sliding_window``, the oldest overwritten), as do
HF transformers' sliding-window cache and TGI. A token attends to the window's last ``W`` tokens, itself
included, so the buffer holds the token being computed and the ``W - 1`` before it: ``W`` positions. A request
that reserves ``L`` tokens (Orca's max, pow2 or oracle length) therefore needs ``L`` positions in each
full-attention layer and ``min(L, W)`` in each window layer, and holds live KV in ``min(t, W)`` of them after
``t`` tokens (a prefill longer than the window writes only its last ``W`` tokens' KV there, as
`RotatingBufferCache` does; the activations of the chunk are not KV memory). A chunked-local layer (Llama 4's
``attention_chunk_size``) attends to at most its chunk's tokens, which a ring of the chunk's size holds: kvsim
gives it one as it does a window.

A request's slab is a slab per unit of layers (below), placed in the pool apart (`SlabLayout.pieces`), as
preallocated caches of hybrid models hold them: HF transformers' `StaticCache` (5.20,
``cache_utils.py``) builds a layer object per layer, a `StaticLayer` allocating ``keys``/``values`` of
``max_cache_len`` positions for a full-attention layer and a `StaticSlidingWindowLayer` allocating
``min(sliding_window, max_cache_len)`` for a window layer, each its own ``torch.zeros`` tensor; Mistral's
`RotatingBufferCache` is likewise a tensor of the window layers alone. No buffer spans both kinds of layer, so
each layer's buffer is sized, and under buddy placement rounded, on its own: gpt-oss-20b's Max slab is 131,072
full-layer slots and a 128-slot ring, two blocks of 131,072 and 128, where one block of their sum would round to
262,144; Gemma-3-12B's 5 ring units are five slabs (one of 5,120 slots would round a 1,024-token ring to 8,192).

One slot is one token's KV in ``unit`` bytes, the greatest common divisor of the KV groups' bytes per token
(gpt-oss-20b: 12 window and 12 full layers, so a slot is a token in 12 layers, one slot a token in each part;
Gemma-3-12B: 40 window layers and 8 full ones, 5 slots and 1). A model without window layers has no layout:
a slot is a token in every layer, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import gcd

from allocators.kv_cache_groups import LOCAL


@dataclass(frozen=True, slots=True)
class SlabLayout:
    """``full``: slots a token takes in the full-attention layers (0 for a model of window layers alone);
    ``rings``: ``(window, slots)`` per window size, slots a token takes in those layers' ring buffers."""

    full: int
    rings: tuple[tuple[int, int], ...]

    @property
    def per_token(self) -> int:
        """Slots of one token in every layer: a pool of ``k`` full tokens has ``k x per_token`` slots."""
        return self.full + sum(slots for _, slots in self.rings)

    @property
    def widest(self) -> int:
        """The largest window: a slab whose tokens reach it has every ring full, and grows by ``full`` a token."""
        return max(window for window, _ in self.rings)

    def footprint(self, tokens: int) -> int:
        """Slots that ``tokens`` positions take: every one in the full layers, at most the window in a ring."""
        return self.full * tokens + sum(slots * min(tokens, window) for window, slots in self.rings)

    def parts(self) -> tuple[tuple[int, int | None], ...]:
        """``(slots per token, positions cap)`` of each part of a slab, in the order they lie in it: the full
        layers (no cap), then each ring (its window)."""
        return ((self.full, None), *((slots, window) for window, slots in self.rings))

    def pieces(self) -> tuple[tuple[tuple[int, int | None], ...], ...]:
        """The slabs a request holds, each placed apart (see the module's docstring), as runs of `parts`: one slab
        a slot a token per unit of layers, the full layers' first (none in a model of window layers alone), then
        each ring's. A unit's slab, as a layer's own tensor, takes the reservation's positions, or the window's in a
        ring, so that buddy placement rounds each to a power of two of positions: Gemma-3-12B's 1 full and 5 ring
        units make six slabs of 1,024 slots for a 1,024-token request, where one ring slab of 5,120 would round to
        8,192."""
        return (((1, None),),) * self.full + tuple(((1, window),) for window, slots in self.rings
                                                  for _ in range(slots))


def slab_layout(kv_groups: Sequence) -> SlabLayout | None:
    """The layout of a model's KV groups (catalog `KVGroup` objects), or None where no group has a window."""
    windows = [g for g in kv_groups if g.attention in LOCAL]
    if not windows:
        return None
    unit = gcd(*(int(g.bytes_per_token) for g in kv_groups))
    rings: dict[int, int] = {}
    for g in windows:
        if g.window is None or int(g.window) <= 0:
            raise ValueError(f"KV group {g.name}: a sliding window or attention chunk must be positive, got "
                             f"{g.window!r}")
        rings[int(g.window)] = rings.get(int(g.window), 0) + int(g.bytes_per_token) // unit
    full = sum(int(g.bytes_per_token) for g in kv_groups if g.attention not in LOCAL) // unit
    return SlabLayout(full, tuple(sorted(rings.items())))


def span(parts: Sequence[tuple[int, int | None]], tokens: int) -> int:
    """Slots that ``tokens`` positions take in a run of `SlabLayout.parts` (a ring holds at most its window)."""
    return sum(per_token * (tokens if cap is None else min(tokens, cap)) for per_token, cap in parts)


def ring_options(allocator: type, model) -> dict:
    """The constructor option (``kv_groups``) that gives a contiguous allocator (``window_rings``,
    `allocators.contiguous`) the window layers of ``model`` (a catalog `ModelSpec`, at its KV dtype); none for
    other allocators or for a model without windows, so that their slots stay whole tokens. Here, not in
    `allocators.contiguous`, so that the kernel asks it without importing an allocator."""
    groups = model.kv_groups()
    if not getattr(allocator, "window_rings", False) or slab_layout(groups) is None:
        return {}
    return {"kv_groups": groups}
