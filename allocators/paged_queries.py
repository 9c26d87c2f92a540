"""What a paged allocator holds and what can be read from it without changing it: the pool, the sequences'
block tables and the running counters (built here), the contract's read-only queries, the fit checks
(`group_fits`, `never_fits`, and the block counts `admit` tests), and the memory accounting (`breakdown` and
the memory maps).

`PagedAllocator` (``paged.py``) adds the state changes on top; copy-on-write (``paged_cow.py``) overrides
`_lookup` and `_fork_shares`, which the fit checks here call, so a hit on a registered prefix or a shared fork
counts the same in a query as in the change it predicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from allocators.base import Allocator, GroupSwap, MemoryBreakdown, cdiv, fork_plan
from allocators.block_pool import BlockPool, pool_size
from allocators.paged_maps import owner_map, slot_state_map
from allocators.paged_seq import SeqBlocks


class PagedQueries(Allocator):
    """A paged allocator's state and its read-only side; `PagedAllocator` is the one to build."""

    supports_host_tier = True

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
        self.block_size = int(block_size)
        self.prefix_caching = bool(prefix_caching)
        self.num_blocks = pool_size(self.capacity, self.block_size)
        self.num_usable_blocks = self.num_blocks - 1
        self.watermark_blocks = int(watermark * self.num_blocks)
        self.overhead_slots = self.block_size + self.capacity % self.block_size
        self._pool = pool = BlockPool(self.num_blocks)
        self._ref, self._free, self._cache = pool.ref, pool.free, pool.cache  # the hot paths' aliases
        self._seqs: dict[int, SeqBlocks] = {}
        self._num_token_slots = 0
        self._reserved = 0
        self._shared_saved = 0

    # -- queries ---------------------------------------------------------------------------------------
    def block_table(self, seq_id: int) -> tuple[int, ...]:
        return tuple(self._seqs[seq_id].table)

    def ref_count(self, block_id: int) -> int:
        return self._ref[block_id]

    def block_hash(self, block_id: int) -> int | None:
        return self._cache.block_hash[block_id]

    @property
    def num_free_blocks(self) -> int:
        return self._free.num_free

    def free_block_ids(self) -> list[int]:
        """Free blocks in eviction order (next to be handed out first)."""
        return list(self._free)

    def num_tokens(self, seq_id: int) -> int:
        return self._seqs[seq_id].tokens

    def headroom(self, seq_id: int) -> int:
        return self._headroom(seq_id, self._seqs[seq_id])

    def _headroom(self, seq_id: int, s: SeqBlocks) -> int:
        """The last block's free slots; one fewer where filling it is allocator work in the step that fills
        it, skipped ahead or not: a block with a shared hash (a session turn's output, which the next turn's
        prompt carries) is indexed in the prefix cache then, where a queued request may hit it at once (as
        vLLM caches a block when the step that fills it is scheduled), and so are shared blocks indexed
        late (`radix` hangs a page whose prefix another page caches once that page is gone, at the next
        fill); a write-through tier is offered the blocks computed since its last store then
        (`RequestTier.offers`: the block just filled, or blocks a fork or a failed store left unoffered)."""
        if s.room and s.hashes:
            full, done = s.tokens // self.block_size, s.num_hashed
            if done <= full and done < s.shared_to and done < len(s.hashes):
                return s.room - 1
            tier = self.host_tier
            if tier is not None and tier.write_through and tier.offers(seq_id, s.hashes, full + 1):
                return s.room - 1
        return s.room

    def evicted_blocks(self, seq_id: int, num_tokens: int) -> list[int]:
        """The cached blocks growing ``seq_id`` by ``num_tokens`` takes off the free queue, which hands out
        empty blocks first (so: none, as a rule); their hashes are evicted."""
        new = self.new_blocks(seq_id, num_tokens)
        if not new or new <= self._free.num_free - self._pool.num_cached:
            return []
        hashed = self._cache.block_hash
        return [b for b in self._free.peek(new) if hashed[b] is not None]

    def new_blocks(self, seq_id: int, num_tokens: int) -> int:
        """The blocks growing ``seq_id`` by ``num_tokens`` takes from the free queue."""
        s = self._seqs[seq_id]
        return max(-(-(s.tokens + num_tokens) // self.block_size) - len(s.table), 0)

    def growth_fits(self, growth: Sequence[tuple[int, int]]) -> bool:
        """`Allocator.growth_fits`: the blocks the growths take (`new_blocks`) against the free queue, as
        `grow_due` tests each."""
        new_blocks = self.new_blocks
        return sum(new_blocks(seq_id, n) for seq_id, n in growth if n > 0) <= self._free.num_free

    def hit_layout(self, block_hashes: Sequence[int], num_tokens: int) -> tuple[list[int], Sequence[int]]:
        """A new sequence's prefix hit as it lies: the GPU blocks it hits, in order, and the hashes after them
        that only the host tier holds (what growth can evict, shortening the hit)."""
        hits = self._lookup(block_hashes, num_tokens)
        gpu = len(hits)
        return hits, block_hashes[gpu:gpu + self._host_hits(block_hashes, gpu, num_tokens)]

    def stores(self, seq_id: int, num_tokens: int) -> bool:
        """Whether growing ``seq_id`` by ``num_tokens`` offers blocks to a write-through host tier (which may
        enter some: a queued request's host hit can get longer)."""
        tier, s = self.host_tier, self._seqs[seq_id]
        return (tier is not None and tier.write_through and bool(s.hashes)
                and tier.offers(seq_id, s.hashes, (s.tokens + num_tokens) // self.block_size))

    def host_evictions(self, seq_id: int, num_tokens: int, evicted: Sequence[int]) -> list[int] | None:
        """The hashes growing ``seq_id`` by ``num_tokens`` evicts from the host tier: a write-back tier takes
        the GPU blocks it evicts (``evicted``, `evicted_blocks`) and drops its least recently used for them;
        a write-through tier stores the blocks it fills, and None says such a store may evict (its policy
        picks which). Empty, as a rule."""
        tier = self.host_tier
        if tier is None:
            return []
        if not tier.write_through:
            hashed = self._cache.block_hash
            return tier.evicted_by([hashed[b] for b in evicted]) if evicted else []
        s = self._seqs[seq_id]
        full = (s.tokens + num_tokens) // self.block_size
        return None if s.hashes and tier.store_evicts(seq_id, s.hashes, full) else []

    def shared_fill(self, seq_id: int, num_tokens: int) -> Sequence[int]:
        """The hashes that growing ``seq_id`` by ``num_tokens`` indexes in the prefix cache for other requests
        (blocks it fills whose hashes are not its own: a session turn's output); empty, as a rule."""
        s = self._seqs[seq_id]
        done = s.num_hashed
        if done >= s.shared_to or done >= len(s.hashes):
            return ()
        return s.hashes[done:min((s.tokens + num_tokens) // self.block_size, s.shared_to)]

    def group_fits(self, num_tokens: int, count: int, *, final_tokens: int, max_total_tokens: int | None = None,
                   block_hashes: Sequence[int] = (), then_tokens: int = 1,
                   forks: Sequence[tuple[int, int]] = ()) -> bool:
        """`admit`'s test, then the blocks the first sequence's growth and each fork take: every block a fork
        holds at the end but those it shares with the sequence it was forked from (`_fork_shares`)."""
        hits = self._lookup(block_hashes, num_tokens)
        taken = self._admission_blocks(hits, num_tokens)
        free = self._free.num_free
        if taken > free - self.watermark_blocks:
            return False
        total = num_tokens + then_tokens
        grown = cdiv(total, self.block_size)
        more = grown - cdiv(num_tokens, self.block_size)
        for _, tokens in fork_plan(forks, count, num_tokens, total):
            more += grown - self._fork_shares(tokens, total)
        return taken + more <= free

    def held_sequence_fits(self, seq_id: int, full_tokens: int, *, apply_watermark: bool) -> bool:
        """vLLM's ``scheduler_reserve_full_isl`` gate for a sequence that already holds blocks (a request whose
        host hits were loaded beside the steps, now given its first chunk): the blocks ``full_tokens`` take
        beyond its table are free, less the watermark when ``apply_watermark``. vLLM 0.33 calls
        ``allocate_slots(..., full_sequence_must_fit=self.scheduler_reserve_full_isl)`` for every waiting
        request it schedules, a loaded one included (``v1/core/sched/scheduler.py``), and for a request holding
        blocks ``FullAttentionManager.get_num_blocks_to_allocate`` counts ``cdiv(num_tokens, block_size)`` less
        the blocks it holds (``v1/core/single_type_kv_cache_manager.py``)."""
        free = self._free.num_free - (self.watermark_blocks if apply_watermark else 0)
        return cdiv(full_tokens, self.block_size) - len(self._seqs[seq_id].table) <= free

    def _admission_blocks(self, hits: list[int], num_tokens: int) -> int:
        """Free blocks admitting ``num_tokens`` tokens with these prefix hits takes: its new blocks, plus the
        hits that sit in the free queue (cached blocks nobody holds)."""
        ref = self._ref
        return cdiv(num_tokens, self.block_size) - len(hits) + sum(1 for b in hits if ref[b] == 0)

    def _fork_shares(self, tokens: int, total_tokens: int) -> int:
        """Blocks a sequence forked from one holding ``tokens`` still shares with it once both hold
        ``total_tokens``: none without copy-on-write (a fork copies the whole table)."""
        return 0

    def swap_extent(self, seq_id: int, pending: int = 0) -> tuple[int, int]:
        """Every block of the table, one transfer each (vLLM swaps block by block); pending tokens lie in
        blocks the table holds already."""
        blocks = len(self._seqs[seq_id].table)
        return blocks * self.block_size, blocks

    def swap_group(self, seq_ids: Sequence[int], pending: Sequence[int]) -> GroupSwap:
        """Every distinct block of the sequences' tables once, one transfer each: a block shared copy-on-write
        (the prompt's, a beam's lineage) is copied to one host block and back, as vLLM v0 swaps a group (by a
        map keyed by GPU block). Each sequence after the first is made again by a fork from the earlier one
        it shares the most leading blocks with (the first such), at those blocks' tokens (a fork sharing a
        whole table, its tail too, is clamped to the sequences' length), shallowest first: a sequence's
        source was itself forked no deeper, so is made before it. Pending tokens lie in blocks held already."""
        tables = [self._seqs[seq_id].table for seq_id in seq_ids]
        forks: list[tuple[int, int, int]] = []  # (tokens shared, source, sequence) of each sequence after the first
        for i in range(1, len(tables)):
            shared = [_common_prefix(tables[i], tables[j]) for j in range(i)]
            depth = max(shared)
            forks.append((depth * self.block_size, shared.index(depth), i))
        forks.sort(key=lambda fork: fork[0])  # stable: ties keep the sequences' order
        made = {0: 0} | {seq: k for k, (_, _, seq) in enumerate(forks, 1)}  # sequence -> its place in the making
        blocks = len({b for table in tables for b in table})
        return GroupSwap(blocks * self.block_size, blocks, tuple((made[src], tokens) for tokens, src, _ in forks))

    def swap_hashes(self, seq_id: int) -> frozenset[int]:
        hashed = self._cache.block_hash
        return frozenset(h for b in self._seqs[seq_id].table if (h := hashed[b]) is not None)

    def _lookup(self, block_hashes: Sequence[int], num_tokens: int) -> list[int]:
        """Blocks holding the longest known prefix, never covering the last of ``num_tokens``."""
        limit = (num_tokens - 1) // self.block_size
        if not self.prefix_caching or limit <= 0:
            return []
        return self._pool.lookup(block_hashes, limit)

    def num_cached_tokens(self, block_hashes: Sequence[int], num_tokens: int) -> int:
        gpu = len(self._lookup(block_hashes, num_tokens))
        return (gpu + self._host_hits(block_hashes, gpu, num_tokens)) * self.block_size

    def num_gpu_cached_tokens(self, block_hashes: Sequence[int], num_tokens: int) -> int:
        return len(self._lookup(block_hashes, num_tokens)) * self.block_size

    def _host_hits(self, block_hashes: Sequence[int], start: int, num_tokens: int) -> int:
        """Blocks the host tier holds in a row after ``start`` GPU hits, never covering the last of
        ``num_tokens`` unless ``host_hits_to_end`` (0 without a tier)."""
        tier = self.host_tier
        if tier is None:
            return 0
        return tier.lookup(block_hashes, start, (num_tokens - (not self.host_hits_to_end)) // self.block_size)

    def never_fits(self, num_tokens: int, *, final_tokens: int, max_total_tokens: int | None = None) -> str | None:
        """An empty pool admits without the watermark (vLLM applies it only while others run), so only the
        usable blocks bound a request: its prompt, and the slots it holds when its last token is sampled."""
        prompt_blocks = cdiv(num_tokens, self.block_size)
        if prompt_blocks > self.num_usable_blocks:
            return (f"{self.name}: {num_tokens} tokens need {prompt_blocks} blocks but the pool has only "
                    f"{self.num_usable_blocks} usable")
        final = max(num_tokens, final_tokens)
        need = cdiv(final, self.block_size)
        if need > self.num_usable_blocks:
            return (f"{self.name}: needs {need} blocks of {self.block_size} at its final length "
                    f"{final} but the pool has only {self.num_usable_blocks} usable")
        return None

    # -- accounting ------------------------------------------------------------------------------------
    def breakdown(self, waiting: bool = False) -> MemoryBreakdown:
        bs = self.block_size
        used = self.num_usable_blocks - self._free.num_free
        free = self._free.num_free * bs
        return MemoryBreakdown(
            capacity=self.capacity,
            token_states=self._num_token_slots,
            reservation=self._reserved,
            internal_frag=used * bs - self._num_token_slots - self._reserved,
            external_frag=self.overhead_slots + (free if waiting else 0),
            free=0 if waiting else free,
            used_blocks=used,
            total_blocks=self.num_usable_blocks,
            shared_saved=self._shared_saved,
            cached=self._pool.num_cached * bs,
        )

    def memory_map(self) -> np.ndarray:
        return owner_map(self.capacity, self.block_size, self.num_blocks,
                         {seq_id: s.table for seq_id, s in self._seqs.items()}, self._ref)

    def slot_states(self, pending: Mapping[int, int] | None = None) -> np.ndarray:
        return slot_state_map(self.capacity, self.block_size, self.num_blocks,
                              {seq_id: (s.table, s.tokens, s.res) for seq_id, s in self._seqs.items()}, pending or {})


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading blocks two block tables share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
