"""Contiguous allocators: one slab per sequence (two with windows), sized up front as the paper's Orca baselines do.

Orca (Max) reserves the model's maximum length, Orca (Pow2) the prompt plus the output rounded up to a
power of two, Orca (Oracle) exactly the final length (it is allowed to know it; nothing else may). The slab
then lives in a linear arena under a pluggable `placement` (buddy by default, as the paper assumes).

Accounting of one sequence with ``t`` tokens, final length ``f``, requested slab ``S`` and physical slab
``P`` (``P - S`` is buddy rounding)::

    |<- t: token states ->|<- min(f, S) - t: reservation ->|<- rest of S: internal ->|<- P - S: external ->|

Sliding-window layers (``kv_groups`` with a window: gpt-oss, Gemma 3, Mistral) keep their KV in ring buffers of
the window's size (`allocators.slab_layout`), so a request reserving ``L`` tokens takes ``footprint(L) = full x
L + sum(ring x min(L, W))`` slots, in a slab per unit of layers (`SlabLayout.pieces`: the KV groups' common
byte unit; gpt-oss-20b 1 full and 1 ring, Gemma-3-12B 1 and 5) placed apart in the one arena::

    | full layers: L slots per unit |     ...     | a ring: min(L, W) slots per unit | ... |

Apart, because preallocated caches keep each layer's KV in a tensor of its own (HF transformers' `StaticCache`,
Mistral's `RotatingBufferCache`: `allocators.slab_layout`); so each slab is placed, and under buddy placement
rounded, on its own, a power of two of positions. One slab of the sum would be rounded whole: gpt-oss-20b's Max
slab of 131,072 + 128 slots would take a 262,144-slot block, as many as 131,072 whole tokens took, and the rings
would fit no more requests; apart it takes 131,072 + 128. Nor one slab of all the rings: Gemma-3-12B's 1,024-token
Oracle request would round 5,120 ring slots to 8,192 (`kvsim capacity`, 512 + 512 tokens: 85 requests), where
five slabs of 1,024 round nothing (128, as many as whole tokens fit at that length). All slabs are in one arena,
not a full-layer arena and a window-layer arena: a static split of the pool would have to guess the ratio of the
two demands, which moves with the lengths against the window (a request of 4 windows' length needs 4 times as
much full-layer memory as ring memory, one shorter than the window as much of each), so one arena would refuse
requests while the other held free memory no request could use, which the breakdown would have to call free (it
is not usable) or external fragmentation (it is not the placement's doing). A request places all its slabs or
none (those placed are given back when one finds no room), and frees all; a swap moves them in a transfer each, a
fork copies each into its counterpart.

The accounting above holds in slots over the request's slabs: token states ``footprint(t)`` (a window layer's
token counts at most ``W`` tokens back), reservation ``footprint(min(f, L)) - footprint(t)``, internal the rest of
the slabs, external the placement's rounding of each; the five shares still sum to the pool exactly. A model of
window layers alone (Mistral-7B) has no full layers: its ring slabs only. A model without
windows has no layout: one slab, a slot a token in every layer, and nothing above changes.

The kernel corrects the allocator's counts by the tokens it knows better, at ``slots_per_token`` slots each
(`sim.kernel.metrics`): a lazily grown decoder's tokens since its last sync, less the token a step computes and
a prompt held whole but not computed yet (chunked prefill). A slab grows by ``full`` slots a token once every
ring is full, by more before, so `headroom` is 0 until then (the decoder is told every token while a ring
fills, as ``--step-by-step`` does) and ``slots_per_token`` is ``full``: the corrections apply to the full
layers, and a ring counts the tokens it was told, in the breakdown and the slot map alike. So a token a step is
computing counts as token states in the rings during that step (at most ``sum(ring)`` slots a decoder inside
its window, ``sum(ring) x W`` a prompt whose chunks have not reached the window yet; gpt-oss-20b: 1 slot a
token), the same with or without ``--step-by-step``, and every slot map still counts its step row's shares.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence

import numpy as np

from allocators.base import (
    FREE_OWNER,
    OVERHEAD_OWNER,
    SLOT_FREE,
    SLOT_OVERHEAD,
    Admission,
    Allocator,
    Copy,
    MemoryBreakdown,
    fill_states,
)
from allocators.placement import Placement, make_placement
from allocators.slab_layout import slab_layout, span

_WHOLE = (((1, None),),)
"""The pieces of a slab without windows: one, a slot a token (`SlabLayout.pieces` where there are windows)."""


class _Slab:
    """One sequence's slabs: ``pieces`` ``(offset, size, physical)`` each, placed apart (one without windows;
    the full layers' and the rings' with them), ``size`` and ``physical`` their sums, ``length`` positions."""

    __slots__ = ("pieces", "size", "physical", "length", "tokens", "final", "max_total", "res")

    def __init__(self, pieces: tuple[tuple[int, int, int], ...], length: int, tokens: int, final: int,
                 max_total: int | None, res: int):
        self.pieces, self.length = pieces, length
        self.size = sum(size for _, size, _ in pieces)
        self.physical = sum(physical for _, _, physical in pieces)
        self.tokens, self.final, self.max_total = tokens, final, max_total
        self.res = res  # slots of the slab the sequence will still fill


class ContiguousAllocator(Allocator):
    """Slab-per-sequence allocation; subclasses only decide the slab size (`slab_size`)."""

    kind = "contiguous"
    reserves_final_length = True  # every policy's slab holds the final length, or `never_fits` refuses it
    window_rings = True  # a window model's window layers sit in ring buffers (`allocators.slab_layout.ring_options`)

    def __init__(
        self,
        capacity_slots: int,
        *,
        block_size: int = 16,
        max_model_len: int = 2048,
        placement: str = "buddy",
        prefix_caching: bool = False,
        watermark: float = 0.0,
        kv_groups: Sequence = (),
    ) -> None:
        """``kv_groups``: the model's KV groups (catalog `KVGroup` objects, `ring_options`); where one has a sliding
        window, ``capacity_slots`` full tokens become ``capacity_slots x per_token`` slots of the model's
        `SlabLayout`, and window layers take ring buffers."""
        super().__init__(capacity_slots, block_size=block_size, max_model_len=max_model_len, placement=placement,
                         prefix_caching=prefix_caching, watermark=watermark)
        self.layout = slab_layout(kv_groups)
        self._pieces = _WHOLE  # the parts each of a request's slabs holds (`SlabLayout.pieces`)
        if self.layout is not None:
            self.capacity *= self.layout.per_token
            self.slots_per_token = self.layout.full
            self._pieces = self.layout.pieces()
        self.placement = make_placement(placement, self.capacity)
        self._seqs: dict[int, _Slab] = {}
        self._num_token_slots = 0
        self._reserved = 0
        self._requested = 0  # sum of slab sizes
        self._physical = 0  # sum of physical slab sizes

    @abstractmethod
    def slab_size(self, num_tokens: int, final_tokens: int, max_total_tokens: int | None) -> int:
        """Token positions this policy reserves for a sequence entering with ``num_tokens`` tokens (slots too,
        without windows; with them, `SlabLayout.footprint` of it)."""

    def _slots(self, tokens: int) -> int:
        """Slots that ``tokens`` positions of a slab take (`SlabLayout.footprint`; themselves without windows)."""
        return tokens if self.layout is None else self.layout.footprint(tokens)

    def _sizes(self, length: int) -> list[int]:
        """Slots of each slab a request reserving ``length`` positions holds (one without windows)."""
        return [span(parts, length) for parts in self._pieces]

    def never_fits(self, num_tokens: int, *, final_tokens: int, max_total_tokens: int | None = None) -> str | None:
        length = self.slab_size(num_tokens, final_tokens, max_total_tokens)
        need = max(num_tokens, final_tokens)
        if length < need:
            return f"{self.name}: needs {need} slots but this policy reserves a slab of only {length}"
        sizes = self._sizes(length)
        for size in sizes:
            physical = self.placement.physical_size(size)
            if physical > self.placement.largest_possible:
                rounded = f" (rounded up to {physical} by {self.placement.name} placement)" if physical != size else ""
                return (f"{self.name}: needs {size} slots{rounded} but the largest possible slab is "
                        f"{self.placement.largest_possible} in a pool of {self.capacity}")
        if len(sizes) > 1 and _place_all(make_placement(self.placement.name, self.capacity), sizes) is None:
            return (f"{self.name}: needs slabs of {' and '.join(map(str, sizes))} slots, which an empty "
                    f"{self.placement.name} arena does not hold together in a pool of {self.capacity}")
        return None

    def _place(self, seq_id: int, num_tokens: int, final: int, max_total: int | None) -> _Slab | None:
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id} is already allocated")
        if num_tokens <= 0:
            raise ValueError(f"sequence {seq_id}: num_tokens must be positive, got {num_tokens}")
        length = self.slab_size(num_tokens, final, max_total)
        if length < num_tokens:
            return None
        pieces = _place_all(self.placement, self._sizes(length))
        if pieces is None:
            return None
        res = max(0, self._slots(min(final, length)) - self._slots(num_tokens))
        slab = _Slab(pieces, length, num_tokens, final, max_total, res)
        self._seqs[seq_id] = slab
        self._num_token_slots += self._slots(num_tokens)
        self._reserved += slab.res
        self._requested += slab.size
        self._physical += slab.physical
        return slab

    def admit(
        self,
        seq_id: int,
        num_tokens: int,
        *,
        final_tokens: int,
        max_total_tokens: int | None = None,
        block_hashes: Sequence[int] = (),
    ) -> Admission | None:
        if self._place(seq_id, num_tokens, final_tokens, max_total_tokens) is None:
            return None
        return Admission()

    def grow(self, seq_id: int, num_tokens: int = 1) -> tuple[Copy, ...] | None:
        s = self._seqs[seq_id]
        if num_tokens < 0:
            raise ValueError(f"sequence {seq_id}: cannot grow by {num_tokens} tokens")
        if s.tokens + num_tokens > s.length:
            return None  # a slab cannot grow in place; the scheduler must preempt
        layout = self.layout
        slots = num_tokens if layout is None else layout.footprint(s.tokens + num_tokens) - layout.footprint(s.tokens)
        s.tokens += num_tokens
        self._num_token_slots += slots
        if s.res:
            used = min(s.res, slots)
            s.res -= used
            self._reserved -= used
        return ()  # NO_COPIES (the same object: a literal, which skips a global lookup)

    def growth_fits(self, growth: Sequence[tuple[int, int]]) -> bool:
        """`Allocator.growth_fits`: each sequence grows inside its own slab (`grow`), apart from the others."""
        seqs = self._seqs
        return all(seqs[seq_id].tokens + n <= seqs[seq_id].length for seq_id, n in growth)

    def fork(self, parent_id: int, child_id: int, *, final_tokens: int) -> tuple[Copy, ...] | None:
        """A slab cannot be shared: the child gets its own slab and the parent's tokens are copied into it."""
        parent = self._seqs[parent_id]
        child = self._place(child_id, parent.tokens, final_tokens, parent.max_total)
        if child is None:
            return None
        # the written part of each slab is copied; the rest holds nothing yet
        return tuple(Copy(src[0], dst[0], span(parts, parent.tokens))
                     for src, dst, parts in zip(parent.pieces, child.pieces, self._pieces, strict=True))

    def free(self, seq_id: int) -> int:
        s = self._seqs.pop(seq_id)
        for offset, _, _ in s.pieces:
            self.placement.release(offset)
        self._num_token_slots -= self._slots(s.tokens)
        self._reserved -= s.res
        self._requested -= s.size
        self._physical -= s.physical
        return s.physical

    def num_tokens(self, seq_id: int) -> int:
        return self._seqs[seq_id].tokens

    def headroom(self, seq_id: int) -> int:
        """The slab's free positions; with windows, 0 while a ring still fills (see the module's docstring)."""
        s = self._seqs[seq_id]
        if self.layout is not None and s.tokens < self.layout.widest:
            return 0
        return s.length - s.tokens

    def swap_extent(self, seq_id: int, pending: int = 0) -> tuple[int, int]:
        """`Allocator.swap_extent`: the slots its tokens take (a ring holds at most its window), one transfer a
        slab."""
        return self._slots(self._seqs[seq_id].tokens + pending), len(self._pieces)

    def breakdown(self, waiting: bool = False) -> MemoryBreakdown:
        free = self.capacity - self._physical
        return MemoryBreakdown(
            capacity=self.capacity,
            token_states=self._num_token_slots,
            reservation=self._reserved,
            internal_frag=self._requested - self._num_token_slots - self._reserved,
            external_frag=self._physical - self._requested + (free if waiting else 0),
            free=0 if waiting else free,
            used_blocks=self._physical,
            total_blocks=self.capacity,
        )

    def memory_map(self) -> np.ndarray:
        owners = np.full(self.capacity, FREE_OWNER, dtype=np.int64)
        for seq_id, s in self._seqs.items():
            for offset, size, physical in s.pieces:
                owners[offset:offset + size] = seq_id
                owners[offset + size:offset + physical] = OVERHEAD_OWNER
        return owners

    def slot_states(self, pending: Mapping[int, int] | None = None) -> np.ndarray:
        states = np.full(self.capacity, SLOT_FREE, dtype=np.int8)
        pending = pending or {}
        for seq_id, s in self._seqs.items():
            will = max(s.tokens, min(s.final, s.length))  # the positions it will have filled
            tokens = min(s.tokens + pending.get(seq_id, 0), will)
            for (offset, size, physical), parts in zip(s.pieces, self._pieces, strict=True):
                at = offset
                for per_token, cap in parts:  # each part of the slab: the full layers, or each ring
                    if cap is None:
                        held, filled = s.length, tokens
                    else:  # a ring counts the tokens it was told (see the module's docstring), as the step rows do
                        held = min(s.length, cap)
                        filled = min(s.tokens, held)
                    fill_states(states, np.arange(at, at + per_token * held), per_token * filled,
                                per_token * min(will, held))
                    at += per_token * held
                states[offset + size:offset + physical] = SLOT_OVERHEAD
        return states

    def check_invariants(self) -> None:
        self.placement.check()
        placed = self.placement.placed
        assert len(placed) == len(self._seqs) * len(self._pieces), \
            f"{len(placed)} slabs placed for {len(self._seqs)} sequences of {len(self._pieces)} each"
        tokens = reserved = requested = physical = 0
        for seq_id, s in self._seqs.items():
            for offset, size, held in s.pieces:
                assert placed.get(offset) == held, f"sequence {seq_id}: slab at {offset} not placed as held"
                assert 0 < size <= held, f"sequence {seq_id}: slab at {offset} sizes out of order"
            assert [size for _, size, _ in s.pieces] == self._sizes(s.length), \
                f"sequence {seq_id}: slabs not sized as its {s.length} positions"
            assert s.physical == sum(held for _, _, held in s.pieces), f"sequence {seq_id}: physical size drifted"
            assert 0 < s.tokens <= s.length, f"sequence {seq_id}: more tokens than its slab's positions"
            assert s.size == self._slots(s.length) <= s.physical, f"sequence {seq_id}: slab sizes out of order"
            assert s.res == max(0, self._slots(min(s.final, s.length)) - self._slots(s.tokens)), \
                f"sequence {seq_id}: reservation drifted"
            tokens += self._slots(s.tokens)
            reserved += s.res
            requested += s.size
            physical += s.physical
        assert (tokens, reserved, requested, physical) == (
            self._num_token_slots, self._reserved, self._requested, self._physical), "counters drifted"
        assert self.capacity - physical == self.placement.free_slots, "capacity not conserved"
        b = self.breakdown()
        assert b.token_states + b.reservation + b.internal_frag + b.external_frag + b.free == self.capacity


def _place_all(placement: Placement, sizes: Sequence[int]) -> tuple[tuple[int, int, int], ...] | None:
    """Place a slab of each of ``sizes`` in ``placement``: ``(offset, size, physical)`` each, or None with
    nothing placed (those already placed are given back, newest first, which restores the placement exactly:
    a buddy merges what it split, an extent list coalesces what it carved)."""
    pieces: list[tuple[int, int, int]] = []
    for size in sizes:
        placed = placement.place(size)
        if placed is None:
            for offset, _, _ in reversed(pieces):
                placement.release(offset)
            return None
        pieces.append((placed[0], size, placed[1]))
    return tuple(pieces)


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (0 for n <= 0): Pow2 over-reserves the output by at most 2x."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


class ContiguousMaxAllocator(ContiguousAllocator):
    """Orca (Max): every sequence reserves its maximum length (``max_total_tokens``, else ``max_model_len``)."""

    name = "contiguous-max"

    def slab_size(self, num_tokens: int, final_tokens: int, max_total_tokens: int | None) -> int:
        return max_total_tokens if max_total_tokens is not None else self.max_model_len


class ContiguousPow2Allocator(ContiguousAllocator):
    """Orca (Pow2): the tokens present plus the remaining output rounded up to a power of two (25 -> 32)."""

    name = "contiguous-pow2"

    def slab_size(self, num_tokens: int, final_tokens: int, max_total_tokens: int | None) -> int:
        size = num_tokens + next_pow2(final_tokens - num_tokens)
        return max(num_tokens, min(size, max(self.max_model_len, final_tokens)))


class ContiguousOracleAllocator(ContiguousAllocator):
    """Orca (Oracle): exactly the final length; an unreachable upper bound, as no scheduler knows it."""

    name = "contiguous-oracle"

    def slab_size(self, num_tokens: int, final_tokens: int, max_total_tokens: int | None) -> int:
        return max(num_tokens, final_tokens)
