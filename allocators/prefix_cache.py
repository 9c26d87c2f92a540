"""The automatic prefix cache of the paged allocators: which full block holds which chained hash.

Only full blocks are cached, keyed by the chained hash of their tokens (``Request.block_hashes``), so equal
hashes mean equal prefixes. Eviction is lazy: a freed block keeps its hash and can still be hit until the
free queue hands it out again, and only then is `evict` called. Identical blocks are not de-duplicated
after the fact (block tables are append-only, as in vLLM), so one hash may map to several blocks; a lookup
takes the first cached.

How the paged allocators use it: a full block is cached under its hash when it is allocated (or filled). At
admission the hits are taken off the free queue before new blocks are popped, so a request never evicts its
own hits, and a lookup never covers the last prompt token (its logits must be computed)::

    prompt: |  block 0  |  block 1  |  block 2  |last|     hashes h0 h1 h2; 3 * 16 + 5 = 53 tokens
    cache:  |  hit h0   |  hit h1   |  hit h2   |new |     cached_tokens = 48; one new block
"""

from __future__ import annotations

from collections.abc import Sequence


class PrefixCache:
    """``hash -> block ids`` (insertion-ordered) and ``block -> hash``, kept in step.

    Almost every hash is held by one block (vLLM hashes every full block, and most are a request's own), so the
    first block of each hash sits in a flat dict and only the rare later ones in a per-hash dict: the per-block
    cost of caching is one dict store, and of eviction one dict delete."""

    __slots__ = ("block_hash", "_first", "_more", "spill")

    def __init__(self, num_blocks: int) -> None:
        self.block_hash: list[int | None] = [None] * num_blocks
        self._first: dict[int, int] = {}
        self._more: dict[int, dict[int, None]] = {}
        self.spill = None  # called with the hash of every evicted block (a host tier's `offload`), if set

    def get(self, block_hash: int) -> int | None:
        """A block holding ``block_hash`` (the first cached), or None on a miss."""
        return self._first.get(block_hash)

    def insert(self, block: int, block_hash: int) -> None:
        """Cache a block that has just become full."""
        assert self.block_hash[block] is None, f"block {block} is already cached"
        self.block_hash[block] = block_hash
        if block_hash in self._first:
            self._more.setdefault(block_hash, {})[block] = None
        else:
            self._first[block_hash] = block

    def insert_full(self, table: list[int], hashes: Sequence[int], start: int, stop: int) -> None:
        """Cache ``table[start:stop]``, full blocks hashed ``hashes[start:stop]``, except blocks that carry a hash
        already. Runs once per block a sequence fills: lean."""
        hashed = self.block_hash
        for i in range(start, stop):
            block = table[i]
            if hashed[block] is None:
                self.insert(block, hashes[i])

    def evict(self, block: int) -> None:
        """Forget a block's hash because it is being reused (a no-op for an uncached block)."""
        h = self.block_hash[block]
        if h is None:
            return
        self.block_hash[block] = None
        if self.spill is not None:
            self.spill(h)
        more = self._more.get(h)
        if self._first[h] == block:
            if more:  # the next cached block of this hash takes the first place
                self._first[h] = nxt = next(iter(more))
                del more[nxt]
            else:
                del self._first[h]
        else:
            del more[block]
        if more is not None and not more:
            del self._more[h]

    def __len__(self) -> int:
        return len(self._first) + sum(len(blocks) for blocks in self._more.values())

    def check(self) -> None:
        """Both maps agree: every cached block carries its key, every hashed block is cached."""
        for h, b in self._first.items():
            assert self.block_hash[b] == h, f"block {b}: cached under {h} but carries {self.block_hash[b]}"
        for h, blocks in self._more.items():
            assert blocks and h in self._first, f"hash {h}: stray or empty duplicate entry"
            for b in blocks:
                assert self.block_hash[b] == h, f"block {b}: cached under {h} but carries {self.block_hash[b]}"
        assert len(self) == sum(h is not None for h in self.block_hash), "a hashed block is not in the cache"
