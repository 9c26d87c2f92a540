"""Contiguous allocators: one slab per sequence, sized up front as the paper's Orca baselines do.

Orca (Max) reserves the model's maximum length, Orca (Pow2) the prompt plus the output rounded up to a
power of two, Orca (Oracle) exactly the final length (it is allowed to know it; nothing else may). The slab
then lives in a linear arena under a pluggable `placement` (buddy by default, as the paper assumes).

Accounting of one sequence with ``t`` tokens, final length ``f``, requested slab ``S`` and physical slab
``P`` (``P - S`` is buddy rounding)::

    |<- t: token states ->|<- min(f, S) - t: reservation ->|<- rest of S: internal ->|<- P - S: external ->|
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
from allocators.placement import make_placement


class _Slab:
    __slots__ = ("offset", "size", "physical", "tokens", "final", "max_total", "res")

    def __init__(self, offset: int, size: int, physical: int, tokens: int, final: int, max_total: int | None):
        self.offset, self.size, self.physical = offset, size, physical
        self.tokens, self.final, self.max_total = tokens, final, max_total
        self.res = max(0, min(final, size) - tokens)  # slots of the slab the sequence will still fill


class ContiguousAllocator(Allocator):
    """Slab-per-sequence allocation; subclasses only decide the slab size (`slab_size`)."""

    kind = "contiguous"
    reserves_final_length = True  # every policy's slab holds the final length, or `never_fits` refuses it

    def __init__(
        self,
        capacity_slots: int,
        *,
        block_size: int = 16,
        max_model_len: int = 2048,
        placement: str = "buddy",
        prefix_caching: bool = False,
        watermark: float = 0.0,
    ) -> None:
        super().__init__(capacity_slots, block_size=block_size, max_model_len=max_model_len, placement=placement,
                         prefix_caching=prefix_caching, watermark=watermark)
        self.placement = make_placement(placement, self.capacity)
        self._seqs: dict[int, _Slab] = {}
        self._num_token_slots = 0
        self._reserved = 0
        self._requested = 0  # sum of slab sizes
        self._physical = 0  # sum of physical slab sizes

    @abstractmethod
    def slab_size(self, num_tokens: int, final_tokens: int, max_total_tokens: int | None) -> int:
        """Slots this policy reserves for a sequence entering with ``num_tokens`` tokens."""

    def never_fits(self, num_tokens: int, *, final_tokens: int, max_total_tokens: int | None = None) -> str | None:
        size = self.slab_size(num_tokens, final_tokens, max_total_tokens)
        need = max(num_tokens, final_tokens)
        if size < need:
            return f"{self.name}: needs {need} slots but this policy reserves a slab of only {size}"
        physical = self.placement.physical_size(size)
        if physical > self.placement.largest_possible:
            rounded = f" (rounded up to {physical} by {self.placement.name} placement)" if physical != size else ""
            return (f"{self.name}: needs {size} slots{rounded} but the largest possible slab is "
                    f"{self.placement.largest_possible} in a pool of {self.capacity}")
        return None

    def _place(self, seq_id: int, num_tokens: int, final: int, max_total: int | None) -> _Slab | None:
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id} is already allocated")
        if num_tokens <= 0:
            raise ValueError(f"sequence {seq_id}: num_tokens must be positive, got {num_tokens}")
        size = self.slab_size(num_tokens, final, max_total)
        if size < num_tokens:
            return None
        placed = self.placement.place(size)
        if placed is None:
            return None
        slab = _Slab(placed[0], size, placed[1], num_tokens, final, max_total)
        self._seqs[seq_id] = slab
        self._num_token_slots += num_tokens
        self._reserved += slab.res
        self._requested += size
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
        if s.tokens + num_tokens > s.size:
            return None  # a slab cannot grow in place; the scheduler must preempt
        s.tokens += num_tokens
        self._num_token_slots += num_tokens
        if s.res:
            used = min(s.res, num_tokens)
            s.res -= used
            self._reserved -= used
        return ()  # NO_COPIES (the same object: a literal, which skips a global lookup)

    def growth_fits(self, growth: Sequence[tuple[int, int]]) -> bool:
        """`Allocator.growth_fits`: each sequence grows inside its own slab (`grow`), apart from the others."""
        seqs = self._seqs
        return all(seqs[seq_id].tokens + n <= seqs[seq_id].size for seq_id, n in growth)

    def fork(self, parent_id: int, child_id: int, *, final_tokens: int) -> tuple[Copy, ...] | None:
        """A slab cannot be shared: the child gets its own slab and the parent's tokens are copied into it."""
        parent = self._seqs[parent_id]
        child = self._place(child_id, parent.tokens, final_tokens, parent.max_total)
        if child is None:
            return None
        # the written part of the slab is copied; the rest holds nothing yet
        return (Copy(parent.offset, child.offset, parent.tokens),)

    def free(self, seq_id: int) -> int:
        s = self._seqs.pop(seq_id)
        self.placement.release(s.offset)
        self._num_token_slots -= s.tokens
        self._reserved -= s.res
        self._requested -= s.size
        self._physical -= s.physical
        return s.physical

    def num_tokens(self, seq_id: int) -> int:
        return self._seqs[seq_id].tokens

    def headroom(self, seq_id: int) -> int:
        s = self._seqs[seq_id]
        return s.size - s.tokens

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
            owners[s.offset:s.offset + s.size] = seq_id
            owners[s.offset + s.size:s.offset + s.physical] = OVERHEAD_OWNER
        return owners

    def slot_states(self, pending: Mapping[int, int] | None = None) -> np.ndarray:
        states = np.full(self.capacity, SLOT_FREE, dtype=np.int8)
        pending = pending or {}
        for seq_id, s in self._seqs.items():
            tokens = min(s.tokens + pending.get(seq_id, 0), s.tokens + s.res)
            fill_states(states, np.arange(s.offset, s.offset + s.size), tokens, s.tokens + s.res)
            states[s.offset + s.size:s.offset + s.physical] = SLOT_OVERHEAD
        return states

    def check_invariants(self) -> None:
        self.placement.check()
        placed = self.placement.placed
        assert len(placed) == len(self._seqs), f"{len(placed)} slabs placed for {len(self._seqs)} sequences"
        tokens = reserved = requested = physical = 0
        for seq_id, s in self._seqs.items():
            assert placed.get(s.offset) == s.physical, f"sequence {seq_id}: slab at {s.offset} not placed as held"
            assert 0 < s.tokens <= s.size <= s.physical, f"sequence {seq_id}: tokens/slab sizes out of order"
            assert s.res == max(0, min(s.final, s.size) - s.tokens), f"sequence {seq_id}: reservation drifted"
            tokens += s.tokens
            reserved += s.res
            requested += s.size
            physical += s.physical
        assert (tokens, reserved, requested, physical) == (
            self._num_token_slots, self._reserved, self._requested, self._physical), "counters drifted"
        assert self.capacity - physical == self.placement.free_slots, "capacity not conserved"
        b = self.breakdown()
        assert b.token_states + b.reservation + b.internal_frag + b.external_frag + b.free == self.capacity


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
