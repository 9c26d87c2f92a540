"""The automatic prefix cache of the paged allocators: which full block holds which chained hash.

Only full blocks are cached, keyed by the chained hash of their tokens (``Request.block_hashes``), so equal
hashes mean equal prefixes. Eviction is lazy: a freed block keeps its hash and can still be hit until the
free queue hands it out again, and only then is `evict` called. Identical blocks are not de-duplicated
after the fact (block tables are append-only, as in vLLM), so one hash may map to several blocks; a lookup
takes the first cached.
"""

from __future__ import annotations


class PrefixCache:
    """``hash -> block ids`` (insertion-ordered) and ``block -> hash``, kept in step."""

    __slots__ = ("block_hash", "_blocks")

    def __init__(self, num_blocks: int) -> None:
        self.block_hash: list[int | None] = [None] * num_blocks
        self._blocks: dict[int, dict[int, None]] = {}

    def get(self, block_hash: int) -> int | None:
        """A block holding ``block_hash``, or None on a miss."""
        blocks = self._blocks.get(block_hash)
        return next(iter(blocks)) if blocks else None

    def insert(self, block: int, block_hash: int) -> None:
        """Cache a block that has just become full."""
        assert self.block_hash[block] is None, f"block {block} is already cached"
        self.block_hash[block] = block_hash
        self._blocks.setdefault(block_hash, {})[block] = None

    def evict(self, block: int) -> None:
        """Forget a block's hash because it is being reused (a no-op for an uncached block)."""
        h = self.block_hash[block]
        if h is None:
            return
        blocks = self._blocks[h]
        del blocks[block]
        if not blocks:
            del self._blocks[h]
        self.block_hash[block] = None

    def __len__(self) -> int:
        return sum(len(blocks) for blocks in self._blocks.values())

    def check(self) -> None:
        """Both maps agree: every cached block carries its key, every hashed block is cached."""
        for h, blocks in self._blocks.items():
            assert blocks, f"hash {h}: empty cache entry left behind"
            for b in blocks:
                assert self.block_hash[b] == h, f"block {b}: cached under {h} but carries {self.block_hash[b]}"
        assert len(self) == sum(h is not None for h in self.block_hash), "a hashed block is not in the cache"
