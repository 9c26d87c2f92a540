"""`BlockPool`: the blocks of a paged KV cache, their reference counts, the free queue and the prefix cache.

Block 0 is a reserved null block; blocks ``1 .. num_blocks - 1`` start free, in id order. A block is held by
as many references as its ``ref`` count (sequences, and in copy-on-write pinned prefixes); at zero it sits in
the free queue, whose order is the eviction order. A freed block that was cached keeps its hash and can still
be hit until it is popped for reuse (lazy eviction)::

    ref 0, in the free queue  --pop-->  ref 1  --share-->  ref 2 ...  --release (ref 0)-->  back in the queue

The pool knows nothing of sequences: `PagedAllocator` and `PagedCowAllocator` keep the block tables and the
accounting on top of it. Their hot paths read ``ref``, ``free`` and ``cache`` directly (a method call per
block would cost as much as the work), so these are plain public fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import itemgetter as getter

from allocators.free_queue import FreeBlockQueue
from allocators.prefix_cache import PrefixCache

MAX_BLOCKS = 2**22
"""The most blocks one pool may have: every block has slots in a few Python lists (about 80 bytes a block with
the free queue's links), so 4M blocks cost about 300 MB and 2 s to build; no real GPU's KV cache comes near it
(an H200's, for Llama-3-8B in blocks of 16, is about 70,000)."""


def pool_size(capacity: int, block_size: int) -> int:
    """Blocks of ``block_size`` in ``capacity`` slots; a one-line error if there are fewer than 2 (block 0 is
    the null block) or more than `MAX_BLOCKS`."""
    num_blocks = capacity // block_size
    if num_blocks < 2:
        raise ValueError(f"{capacity} slots hold {num_blocks} block(s) of {block_size}; the paged "
                         "allocator needs at least 2 (block 0 is the reserved null block)")
    if num_blocks > MAX_BLOCKS:
        raise ValueError(f"a KV pool of {capacity:,} token slots is {num_blocks:,} blocks of {block_size}, "
                         f"over kvsim's limit of {MAX_BLOCKS:,} blocks (its block arrays take about 80 bytes a "
                         "block); lower --kv-tokens / --kv-gib or raise --block-size")
    return num_blocks


class BlockPool:
    """Block ids ``0 .. num_blocks - 1`` (0 is the null block), their holders, the free queue and the cache."""

    __slots__ = ("num_blocks", "ref", "free", "cache", "num_cached")

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.ref = [0] * num_blocks  # holders of each block; the null block 0 has none
        self.free = FreeBlockQueue(num_blocks, range(1, num_blocks))
        self.cache = PrefixCache(num_blocks)
        self.num_cached = 0  # free blocks that still carry a hash: held by the cache alone, evictable

    @property
    def num_free(self) -> int:
        return self.free.num_free

    def pop(self) -> int:
        """Hand out the head of the free queue with one holder, evicting its cached hash."""
        block = self.free.popleft()
        if self.cache.block_hash[block] is not None:
            self.evict(block)
        self.ref[block] = 1
        return block

    def evict(self, block: int) -> None:
        """Forget the hash of a cached free block that is being handed out."""
        self.cache.evict(block)
        self.num_cached -= 1

    def pop_many(self, count: int) -> list[int]:
        """`pop` ``count`` times, in one pass over the free queue."""
        blocks = self.free.pop_many(count)
        ref = self.ref
        for block in blocks:
            ref[block] = 1
        if self.num_cached:
            self.num_cached -= self.cache.evict_many(blocks)
        return blocks

    def take(self, block: int) -> bool:
        """Add a holder to a block found by lookup; True if it was free (taken off the queue)."""
        ref = self.ref
        was_free = ref[block] == 0
        if was_free:
            self.free.remove(block)
            if self.cache.block_hash[block] is not None:
                self.num_cached -= 1
        ref[block] += 1
        return was_free

    def release(self, blocks: Iterable[int], prefix_caching: bool) -> None:
        """Return blocks nobody holds any more (their ``ref`` already 0) to the free queue, tail first: with
        prefix caching the cached ones are evicted last (LRU, as vLLM), the others reused first."""
        blocks = list(blocks)
        if prefix_caching:
            hashed = self.cache.block_hash
            cached = [b for b in blocks if hashed[b] is not None]
            self.free.prepend_released([b for b in blocks if hashed[b] is None])
            self.free.extend_released(cached)
            self.num_cached += len(cached)
        else:
            self.free.prepend_released(blocks)

    def drop(self, table: list[int], prefix_caching: bool) -> int:
        """Take one holder off every block of ``table`` (a freed sequence) and put those left with none back
        in the free queue, tail first, as `release` would. Returns how many were released.

        Runs once per finished request over every one of its blocks, so it goes in bulk: the refs read in one
        C-level gather (all 1, the rule: every block is released; else those at 1 are), and with prefix
        caching the hashed blocks are as a rule a leading run of the table (a prompt's cached blocks, then
        generated ones): slices, no per-block branches."""
        ref = self.ref
        n = len(table)
        if n < 2:
            released = [b for b in table if ref[b] == 1]
            for b in table:
                ref[b] -= 1
        else:
            refs = getter(*table)(ref)
            released = table[::-1]
            if refs.count(1) == n:  # exclusive: every block is released
                for b in released:
                    ref[b] = 0
            else:  # shared blocks stay held (a table holds a block once: `audit_paged` checks it)
                for b in released:
                    ref[b] -= 1
                m = refs.count(1)
                if refs[n - m:].count(1) == m:  # as a rule the shared ones lead (prefix hits): a slice
                    released = released[:m]
                else:
                    released = [b for b, r in zip(released, refs[::-1], strict=True) if r == 1]
        n = len(released)
        if not n:
            return 0
        free = self.free
        if not prefix_caching:
            free.prepend_released(released)
            return n
        marks, vacant = self.cache.vacancy  # a list per block whose entry is ``vacant`` where it has no hash
        hashes = getter(*released)(marks) if n > 1 else (marks[released[0]],)
        empty = hashes.count(vacant)  # uncached blocks: the table's tail, first in ``released`` as a rule
        if hashes[:empty].count(vacant) != empty:  # not a leading run: `release` sorts them block by block
            self.release(released, True)
            return n
        if empty:
            free.prepend_released(released[:empty] if empty < n else released)
        if empty < n:
            free.extend_released(released[empty:] if empty else released)
        self.num_cached += n - empty
        return n

    def lookup(self, block_hashes: Sequence[int], limit: int) -> list[int]:
        """Cached blocks holding the longest prefix of ``block_hashes``, at most ``limit`` of them."""
        hits: list[int] = []
        get = self.cache.getter
        for i in range(min(limit, len(block_hashes))):  # by index: a slice would copy the hashes
            block = get(block_hashes[i])
            if block is None:
                break
            hits.append(block)
        return hits

    def audit(self, holders: Sequence[int]) -> list[int]:
        """Check the pool against ``holders`` (the references recomputed from scratch for every block): ref
        counts, free-queue membership, the null block and the cache. Returns the free queue in order."""
        queued = self.free.check()
        assert 0 not in queued and self.ref[0] == 0, "the null block was handed out"
        for b in range(1, self.num_blocks):
            assert self.ref[b] == holders[b], f"block {b}: ref count {self.ref[b]} != {holders[b]} holders"
            assert (self.ref[b] == 0) == (b in self.free), f"block {b}: free-queue membership disagrees with ref"
        self.cache.check()
        hashed = self.cache.block_hash
        assert self.num_cached == sum(hashed[b] is not None for b in queued), "cached free-block count drifted"
        return queued
