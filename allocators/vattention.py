"""vAttention (Prabhu et al., ASPLOS'25, arXiv 2405.04437): virtually contiguous KV, physical pages on demand.

Each request gets a contiguous *virtual* range for its KV in every layer's K and V tensor, sized for the
longest sequence, at no physical cost (virtual address space is plentiful); physical pages are mapped into
it with the CUDA virtual memory APIs as the request grows (``cuMemMap`` + ``cuMemSetAccess`` per page, per
layer, per K/V tensor: ``vattention/vattention.cu``, ``grow_kvcache_phys``, in microsoft/vattention). Pages
are 2 MB with the stock driver and 64/128/256 KB with the authors' driver extension (repository README,
"Using smaller page sizes"). Attention kernels read the virtual range as one dense tensor, so they need no
block table (`kind` is ``"contiguous"``: the cost model charges no paged-kernel overhead).

The unit here is a *page set*: one physical page in every layer's K and V tensor (one latent tensor per
layer for MLA), mapped together, as vAttention's ``MAP_PAGES`` does for every layer at once. It holds
``page_tokens`` tokens (the page's bytes over one token's bytes in one tensor: `page_geometry`); page set
``p`` is slots ``[p * page_tokens, (p + 1) * page_tokens)`` of the arena. The pool has ``num_pages`` of them
(the KV pool's bytes over ``page bytes x cache tensors``); the slots no page set covers (the pool's
remainder, and the bytes of each page that hold less than a whole token) are allocator overhead. Waste then
moves to the unused tail of each request's last page, in every layer and tensor: that is internal
fragmentation here.

Identities are real: page-set ids, a free list (a stack, as vAttention's ``cuda_pages`` vector: the page
freed last is mapped next), each request's list of mapped pages in virtual order (the kernel never reads
it; the allocator needs it to unmap). No sharing: vAttention maps each physical page into one request's
range, so `fork` copies (new pages for the child, every parent page copied) and there is no prefix caching
(``prefix_caching`` is accepted, validated and ignored, as contiguous allocators do).

Every call that maps pages returns a `PageMap` record beside any `Copy`, so the cost model charges the
mapping calls (`sim.kernel.roofline_cost`, ``page_map_latency_s``). `grow` maps pages mid-decode, so
``reports_growth`` is False: the decode fast-forward takes its sub-event path, which charges them exactly as
``--step-by-step`` does. Not modelled: the paper's latency hiding (mapping in a background thread while the
step computes, deferred reclamation of a finished request's pages).
"""

from __future__ import annotations

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
    PageMap,
    cdiv,
    fill_states,
)
from allocators.vattention_pages import PAGE_SIZES_KIB, cache_tensors, page_geometry

__all__ = ["PAGE_SIZES_KIB", "VAttentionAllocator", "cache_tensors", "page_geometry", "page_options"]

def page_options(allocator: type, model, page_size_kib: int, kv_tokens: int, tensor_parallel: int = 1) -> dict:
    """The constructor options (``page_tokens``, ``num_pages``) that give a vattention allocator the page
    geometry of ``model`` (a catalog `ModelSpec`); none for other allocators."""
    if not issubclass(allocator, VAttentionAllocator):
        return {}
    page_tokens, num_pages = page_geometry(model, page_size_kib, kv_tokens, tensor_parallel)
    return {"page_tokens": page_tokens, "num_pages": num_pages}


class _Mapped:
    """One request: its mapped page sets in virtual order, tokens, final length, and the last page's room
    (slots writable without mapping) and reservation (slots it will still fill)."""

    __slots__ = ("pages", "tokens", "final", "room", "res")

    def __init__(self, pages: list[int], tokens: int, final: int) -> None:
        self.pages, self.tokens, self.final = pages, tokens, final
        self.room = self.res = 0


class VAttentionAllocator(Allocator):
    """Virtually contiguous KV with physical page sets mapped on demand (vAttention)."""

    name = "vattention"
    kind = "contiguous"  # the kernel reads one dense virtual range per request: no block table

    def __init__(
        self,
        capacity_slots: int,
        *,
        block_size: int = 16,
        max_model_len: int = 2048,
        placement: str = "buddy",
        prefix_caching: bool = False,
        watermark: float = 0.0,
        page_tokens: int | None = None,
        num_pages: int | None = None,
    ) -> None:
        """``page_tokens``: tokens one page set holds (`page_geometry`; default ``block_size``, for models
        without a catalog entry); ``num_pages``: page sets in the pool (default ``capacity // page_tokens``;
        `page_geometry` gives the exact count when a page holds a fraction of a token more)."""
        super().__init__(capacity_slots, block_size=block_size, max_model_len=max_model_len, placement=placement,
                         prefix_caching=prefix_caching, watermark=watermark)
        page_tokens = int(block_size if page_tokens is None else page_tokens)
        num_pages = self.capacity // page_tokens if num_pages is None else int(num_pages)
        if page_tokens <= 0 or not 0 < num_pages * page_tokens <= self.capacity:
            raise ValueError(f"vattention: a KV pool of {capacity_slots} token slots holds no page set of "
                             f"{page_tokens} tokens ({num_pages} page sets fit); give a larger pool (--kv-tokens, "
                             "--kv-gib) or smaller pages (--page-size-kib)")
        self.block_size = self.page_tokens = page_tokens
        self.num_pages = num_pages
        self.overhead_slots = self.capacity - num_pages * page_tokens
        self._free: list[int] = list(range(num_pages - 1, -1, -1))  # a stack: page 0 is mapped first
        self._seqs: dict[int, _Mapped] = {}
        self._num_token_slots = 0
        self._reserved = 0

    # -- queries ---------------------------------------------------------------------------------------
    def block_table(self, seq_id: int) -> tuple[int, ...]:
        """The request's mapped page sets in virtual order (what it unmaps when freed)."""
        return tuple(self._seqs[seq_id].pages)

    def free_block_ids(self) -> list[int]:
        """Free page sets, the next to be mapped first."""
        return self._free[::-1]

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def num_tokens(self, seq_id: int) -> int:
        return self._seqs[seq_id].tokens

    def headroom(self, seq_id: int) -> int:
        return self._seqs[seq_id].room

    def never_fits(self, num_tokens: int, *, final_tokens: int, max_total_tokens: int | None = None) -> str | None:
        need = cdiv(max(num_tokens, final_tokens), self.page_tokens)
        if need > self.num_pages:
            return (f"{self.name}: needs {need} pages of {self.page_tokens} tokens at its final length "
                    f"{max(num_tokens, final_tokens)} but the pool has only {self.num_pages}")
        return None

    def group_fits(self, num_tokens: int, count: int, *, final_tokens: int, max_total_tokens: int | None = None,
                   block_hashes: Sequence[int] = (), then_tokens: int = 1,
                   forks: Sequence[tuple[int, int]] = ()) -> bool:
        """Counted, not tried: the parent's pages, a copy of them per fork, and the pages each sequence maps
        for its next ``then_tokens``; wherever the ``forks`` are made, as nothing is shared."""
        grown = cdiv(num_tokens + then_tokens, self.page_tokens)
        return (count + 1) * grown <= len(self._free)

    # -- state changes ---------------------------------------------------------------------------------
    def _map(self, count: int) -> list[int]:
        free = self._free
        return [free.pop() for _ in range(count)]

    def _settle(self, s: _Mapped) -> None:
        """Recompute the last page's room and reservation after the page list or tokens changed."""
        self._reserved -= s.res
        held = len(s.pages) * self.page_tokens
        s.room = held - s.tokens
        s.res = max(0, min(s.final, held) - s.tokens)
        self._reserved += s.res

    def admit(
        self,
        seq_id: int,
        num_tokens: int,
        *,
        final_tokens: int,
        max_total_tokens: int | None = None,
        block_hashes: Sequence[int] = (),
    ) -> Admission | None:
        """Reserve the virtual range (free) and map the pages the prompt fills."""
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id} is already allocated")
        if num_tokens <= 0:
            raise ValueError(f"sequence {seq_id}: num_tokens must be positive, got {num_tokens}")
        count = cdiv(num_tokens, self.page_tokens)
        if count > len(self._free):
            return None
        s = self._seqs[seq_id] = _Mapped(self._map(count), num_tokens, final_tokens)
        self._num_token_slots += num_tokens
        self._settle(s)
        return Admission(copies=(PageMap(count),))

    def grow(self, seq_id: int, num_tokens: int = 1) -> tuple[Copy | PageMap, ...] | None:
        s = self._seqs[seq_id]
        if 0 <= num_tokens <= s.room:  # inside the mapped tail: no driver call
            s.room -= num_tokens
            s.tokens += num_tokens
            self._num_token_slots += num_tokens
            used = min(s.res, num_tokens)
            s.res -= used
            self._reserved -= used
            return ()
        if num_tokens < 0:
            raise ValueError(f"sequence {seq_id}: cannot grow by {num_tokens} tokens")
        count = cdiv(s.tokens + num_tokens, self.page_tokens) - len(s.pages)
        if count > len(self._free):
            return None
        s.pages += self._map(count)
        s.tokens += num_tokens
        self._num_token_slots += num_tokens
        self._settle(s)
        return (PageMap(count),)

    def growth_fits(self, growth: Sequence[tuple[int, int]]) -> bool:
        """`Allocator.growth_fits`: the page sets the growths map beyond their tails' room, as `grow` tests
        each."""
        pt, seqs, need = self.page_tokens, self._seqs, 0
        for seq_id, n in growth:
            s = seqs[seq_id]
            if n > s.room:
                need += cdiv(s.tokens + n, pt) - len(s.pages)
        return need <= len(self._free)

    def fork(self, parent_id: int, child_id: int, *, final_tokens: int) -> tuple[Copy | PageMap, ...] | None:
        """Copy on fork: the child's own range gets new pages and every parent page is copied into them."""
        if child_id in self._seqs:
            raise ValueError(f"sequence {child_id} is already allocated")
        parent = self._seqs[parent_id]
        count = len(parent.pages)
        if count > len(self._free):
            return None
        child = self._seqs[child_id] = _Mapped(self._map(count), parent.tokens, final_tokens)
        self._num_token_slots += parent.tokens
        self._settle(child)
        pt = self.page_tokens
        return (PageMap(count), *(Copy(src, dst, pt) for src, dst in zip(parent.pages, child.pages, strict=True)))

    def free(self, seq_id: int) -> int:
        """Unmap every page (the last mapped goes back on the stack first, so the first mapped is reused
        first) and release the virtual range."""
        s = self._seqs.pop(seq_id)
        self._free += reversed(s.pages)
        self._num_token_slots -= s.tokens
        self._reserved -= s.res
        return len(s.pages) * self.page_tokens

    # -- accounting ------------------------------------------------------------------------------------
    def breakdown(self, waiting: bool = False) -> MemoryBreakdown:
        pt = self.page_tokens
        free = len(self._free) * pt
        used = self.num_pages - len(self._free)
        return MemoryBreakdown(
            capacity=self.capacity,
            token_states=self._num_token_slots,
            reservation=self._reserved,
            internal_frag=used * pt - self._num_token_slots - self._reserved,
            external_frag=self.overhead_slots + (free if waiting else 0),
            free=0 if waiting else free,
            used_blocks=used,
            total_blocks=self.num_pages,
        )

    def _page_slots(self, pages: list[int]) -> np.ndarray:
        pt = self.page_tokens
        return (np.asarray(pages, np.int64)[:, None] * pt + np.arange(pt)).ravel()

    def memory_map(self) -> np.ndarray:
        owners = np.full(self.capacity, FREE_OWNER, dtype=np.int64)
        owners[self.num_pages * self.page_tokens:] = OVERHEAD_OWNER
        for seq_id, s in self._seqs.items():
            owners[self._page_slots(s.pages)] = seq_id
        return owners

    def slot_states(self, pending: Mapping[int, int] | None = None) -> np.ndarray:
        pending = pending or {}
        states = np.full(self.capacity, SLOT_FREE, dtype=np.int8)
        states[self.num_pages * self.page_tokens:] = SLOT_OVERHEAD
        for seq_id, s in self._seqs.items():
            filled = min(s.tokens + pending.get(seq_id, 0), s.tokens + s.res)
            fill_states(states, self._page_slots(s.pages), filled, s.tokens + s.res)
        return states

    def check_invariants(self) -> None:
        """Recompute the page ownership, the free stack and the counters from the page lists."""
        pt, owner = self.page_tokens, {}
        tokens = reserved = 0
        for seq_id, s in self._seqs.items():
            assert s.tokens > 0 and len(s.pages) == cdiv(s.tokens, pt), f"sequence {seq_id}: page count wrong"
            for p in s.pages:
                assert 0 <= p < self.num_pages, f"sequence {seq_id}: page {p} out of range"
                assert p not in owner, f"page {p} mapped into sequences {owner.get(p)} and {seq_id}"
                owner[p] = seq_id
            held = len(s.pages) * pt
            assert s.room == held - s.tokens, f"sequence {seq_id}: room {s.room} != {held - s.tokens}"
            assert s.res == max(0, min(s.final, held) - s.tokens), f"sequence {seq_id}: reservation drifted"
            tokens += s.tokens
            reserved += s.res
        assert len(set(self._free)) == len(self._free), "a page is on the free stack twice"
        assert not owner.keys() & set(self._free), "a mapped page is on the free stack"
        assert len(owner) + len(self._free) == self.num_pages, "pages not conserved"
        assert tokens == self._num_token_slots, f"token slots {self._num_token_slots} != recomputed {tokens}"
        assert reserved == self._reserved, f"reservation {self._reserved} != recomputed {reserved}"
        b = self.breakdown()
        total = b.token_states + b.reservation + b.internal_frag + b.external_frag + b.free
        assert total == self.capacity and b.internal_frag >= 0, f"breakdown sums to {total}, not {self.capacity}"
