"""Paged allocation with copy-on-write sharing: parallel sampling, beam search and shared prefixes.

`fork` shares every block of the parent (reference count + 1) instead of copying; the first sequence to
write into a shared, partly filled last block gets a private copy of it first, reported as a ``(src, dst)``
copy for the cost model to charge. Full blocks are immutable and stay shared until their last holder frees
them. This is the paper's section 4.4; beam search is fork from the chosen parents plus free of the beams
that lost.

Shared prefixes (a system prompt or few-shot examples) are registered once with `register_prefix`: their
blocks are allocated and pinned (the registry holds a reference), and every admission whose
``block_hashes`` start with them shares those blocks without prefill, whether or not automatic prefix
caching is on. A group swapped out leaves its pinned prefix blocks on the GPU (`swap_group`), as vLLM v0.3 did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from allocators.base import NO_COPIES, SHARED_OWNER, SLOT_TOKEN, Copy, GroupSwap, cdiv
from allocators.paged import PagedAllocator
from allocators.paged_audit import audit_paged
from allocators.paged_seq import SeqBlocks


class PagedCowAllocator(PagedAllocator):
    """`PagedAllocator` plus copy-on-write forks and pinned shared prefixes."""

    name = "paged-cow"
    shares_prefixes = True
    reports_growth = False  # growth into a shared tail copies it and changes the other sharers' headroom
    parks_own_blocks = False  # forks carry their parent's hashes: duplicates are indexed as they are filled

    def __init__(self, capacity_slots: int, **options: object) -> None:
        """Same options as `PagedAllocator`."""
        super().__init__(capacity_slots, **options)
        self._pins = [0] * self.num_blocks  # registered-prefix references of each block
        self._registry: dict[int, int] = {}  # registered-prefix hash -> block id
        self._partial: dict[int, list[int]] = {}  # shared, partly filled tail block -> its sequences
        self._partial_res: dict[int, int] = {}  # reservation counted for each such block

    def fork(self, parent_id: int, child_id: int, *, final_tokens: int) -> tuple[Copy, ...] | None:
        """Share all the parent's blocks; never needs a free block, so it always succeeds."""
        if child_id in self._seqs:
            raise ValueError(f"sequence {child_id} is already allocated")
        parent = self._seqs[parent_id]
        bs, ref = self.block_size, self._ref
        for b in parent.table:
            ref[b] += 1
        self._shared_saved += len(parent.table) * bs
        child = SeqBlocks(list(parent.table), parent.tokens, final_tokens, parent.hashes)
        child.num_hashed, child.shared_to = parent.num_hashed, parent.shared_to
        self._seqs[child_id] = child
        last = parent.table[-1]
        if parent.tokens % bs:  # the tail is partly filled: freeze it for every sharer until one copies it
            if last in self._partial:
                self._reserved -= self._partial_res.pop(last)
            else:
                self._reserved -= parent.res
                parent.res = parent.room = 0
                self._partial[last] = [parent_id]
            self._partial[last].append(child_id)
            self._count_partial(last)
        return NO_COPIES

    def _fork_shares(self, tokens: int, total_tokens: int) -> int:
        """A fork shares every block; growing copies a partly filled tail it shares (for one of the two), so
        the full blocks stay shared, and a tail too while neither grows."""
        if tokens == total_tokens:
            return cdiv(tokens, self.block_size)
        return tokens // self.block_size

    def _grow_slow(self, seq_id: int, s: SeqBlocks, num_tokens: int) -> tuple[Copy, ...] | None:
        last = s.table[-1]
        if num_tokens <= 0 or last not in self._partial:
            return super()._grow_slow(seq_id, s, num_tokens)
        bs = self.block_size
        if cdiv(s.tokens + num_tokens, bs) - len(s.table) + 1 > self._free.num_free:
            return None
        self._leave_partial(seq_id, last)  # copy the shared tail before writing into it
        self._ref[last] -= 1
        self._shared_saved -= bs
        dst = self._pool.pop()
        s.table[-1] = dst
        self._num_token_slots += s.tokens % bs
        self._settle_last_block(s)
        grown = super()._grow_slow(seq_id, s, num_tokens)
        assert grown is not None, "free blocks were counted before copying"
        return (Copy(last, dst, bs), *grown)

    def growth_fits(self, growth: Sequence[tuple[int, int]]) -> bool:
        """`Allocator.growth_fits` with copy-on-write: a sequence growing into a shared, partly filled tail
        takes a block for its copy too (`_grow_slow`), except the last of its sharers to grow, which then
        owns the tail alone (vLLM v0's ``append_slots``: a copy only while ``ref_count > 1``)."""
        bs, partial, seqs = self.block_size, self._partial, self._seqs
        sharing: dict[int, int] = {}  # shared tail -> its sharers still on it once the growths before are made
        need = 0
        for seq_id, n in growth:
            if n <= 0:
                continue
            s = seqs[seq_id]
            last = s.table[-1]
            grown = cdiv(s.tokens + n, bs) - len(s.table)
            if last in partial:
                left = sharing.get(last, len(partial[last]))
                sharing[last] = left - 1
                if left > 1:  # copies the tail first
                    need += grown + 1
                    continue
            need += max(grown, 0)
        return need <= self._free.num_free

    def _cache_full_blocks(self, s: SeqBlocks) -> None:
        """`PagedAllocator._cache_full_blocks`, counting the blocks others may hit now in ``hit_changes``: without
        ``reports_growth`` the decode fast-forward reads that counter, not `shared_fill`."""
        done = s.num_hashed
        super()._cache_full_blocks(s)
        if done < s.shared_to:
            self.hit_changes += max(0, min(s.num_hashed, s.shared_to) - done)

    def free(self, seq_id: int) -> int:
        tail = self._seqs[seq_id].table[-1]
        if tail in self._partial:
            self._leave_partial(seq_id, tail)
        return super().free(seq_id)

    def _leave_partial(self, seq_id: int, block: int) -> None:
        """Take a sequence off a shared tail; the survivors' reservation is recomputed, and a sole survivor
        owns the block again (its headroom returns)."""
        sharers = self._partial[block]
        sharers.remove(seq_id)
        self._reserved -= self._partial_res.pop(block)
        if len(sharers) == 1:
            del self._partial[block]
            survivor = self._seqs[sharers[0]]
            survivor.res = 0
            self._settle_last_block(survivor)
        else:
            self._count_partial(block)

    def _count_partial(self, block: int) -> None:
        """Reservation of a shared tail: the most any sharer will still fill into it."""
        sharers = [self._seqs[i] for i in self._partial[block]]
        held = len(sharers[0].table) * self.block_size
        res = max(0, max(min(s.final, held) for s in sharers) - sharers[0].tokens)
        self._partial_res[block] = res
        self._reserved += res

    def register_prefix(self, block_hashes: Sequence[int]) -> int | None:
        """Allocate and pin the blocks of a shared prefix (chained hashes of its full blocks).

        Hashes already registered (another prefix with the same start, or a repeat registration) are pinned
        once more rather than stored twice. Returns the prefix length in tokens, or None (nothing changed)
        when there are too few free blocks.
        """
        new = [h for h in dict.fromkeys(block_hashes) if h not in self._registry]
        if len(new) > self._free.num_free:
            return None
        bs = self.block_size
        for h in block_hashes:
            block = self._registry.get(h)
            if block is None:
                block = self._pool.pop()
                self._registry[h] = block
                self._num_token_slots += bs
            else:
                self._ref[block] += 1
            self._pins[block] += 1
        return len(block_hashes) * bs

    def release_prefix(self, block_hashes: Sequence[int]) -> int:
        """Drop one registration of a prefix; blocks nobody else holds go back to the free queue (tail
        first). Returns the slots that stopped being pinned."""
        missing = [h for h in block_hashes if h not in self._registry]
        if missing:
            raise KeyError(f"prefix hash {missing[0]} is not registered")
        bs, ref = self.block_size, self._ref
        for h in reversed(block_hashes):
            block = self._registry[h]
            self._pins[block] -= 1
            ref[block] -= 1
            if self._pins[block] == 0:
                del self._registry[h]
            if ref[block] == 0:
                self._free.append(block)
                self._num_token_slots -= bs
        return len(block_hashes) * bs

    def swap_group(self, seq_ids: Sequence[int], pending: Sequence[int]) -> GroupSwap:
        """`PagedAllocator.swap_group` less the pinned blocks (a registered prefix's), which stay on the GPU.

        vLLM v0.3.0-v0.3.3 (the `Prefix` releases), ``BlockSpaceManager.swap_out`` in vllm/core/block_manager.py::

            if (seq_group.prefix is not None
                    and gpu_block in seq_group.prefix.block_table):
                # NOTE: We do not swap out the prefix blocks for now.
                self.gpu_allocator.free(gpu_block)
                continue

        drops the sequence's reference and moves nothing (the prefix pool keeps the block), and ``swap_in``
        re-takes them first (``for block in seq_group.prefix.block_table: new_block_table.append(block);
        block.ref_count += 1``). Here swapping out frees the sequences (the registry's pin keeps the blocks)
        and placing the group again admits it with its hashes, whose lookup finds the registered blocks first
        (`_lookup`), so nothing is copied for them either way. ``can_swap_out`` still counted them against the
        free CPU blocks (it counts every block the group holds): ``resident_slots``."""
        swap = super().swap_group(seq_ids, pending)
        pins = self._pins
        kept = len({b for seq_id in seq_ids for b in self._seqs[seq_id].table if pins[b]})
        if not kept:
            return swap
        slots = kept * self.block_size
        return swap._replace(slots=swap.slots - slots, transfers=swap.transfers - kept, resident_slots=slots)

    def swap_hashes(self, seq_id: int) -> frozenset[int]:
        """`PagedAllocator.swap_hashes` less the pinned blocks': they stay on the GPU (`swap_group`), so the
        swap parks none of their KV on the host (and a host copy of one is not taken as a parked copy)."""
        hashed, pins = self._cache.block_hash, self._pins
        return frozenset(h for b in self._seqs[seq_id].table if (h := hashed[b]) is not None and not pins[b])

    @property
    def registered_blocks(self) -> int:
        return len(self._registry)

    # -- what pinning changes in the paged allocator ------------------------------------------------------
    def _lookup(self, block_hashes: Sequence[int], num_tokens: int) -> list[int]:
        """Registered prefixes first, then (with automatic prefix caching) the cache, block by block."""
        hits: list[int] = []
        registry, cached = self._registry, self._cache.getter if self.prefix_caching else None
        for i in range(min(len(block_hashes), (num_tokens - 1) // self.block_size)):
            h = block_hashes[i]
            block = registry.get(h)
            if block is None and cached is not None:
                block = cached(h)
            if block is None:
                break
            hits.append(block)
        return hits

    def _shares_with_sequence(self, block: int) -> bool:
        return self._ref[block] > self._pins[block]

    def _pinned_only(self, table: list[int]) -> int:
        ref, pins = self._ref, self._pins
        return sum(1 for b in table if ref[b] and ref[b] == pins[b])

    def memory_map(self) -> np.ndarray:
        owners = super().memory_map()
        bs = self.block_size
        for b in self._registry.values():
            owners[b * bs:(b + 1) * bs] = SHARED_OWNER
        return owners

    def slot_states(self, pending: Mapping[int, int] | None = None) -> np.ndarray:
        states = super().slot_states(pending)
        bs = self.block_size
        for b in self._registry.values():
            states[b * bs:(b + 1) * bs] = SLOT_TOKEN
        return states

    def check_invariants(self) -> None:
        audit_paged(self, pins=self._pins, registry=self._registry, partial=self._partial,
                    partial_res=self._partial_res)
