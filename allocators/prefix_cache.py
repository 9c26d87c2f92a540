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

A request's *own* blocks (ids only it carries: ``sim.kernel.arrivals.own_block_hashes``) can be hit by nobody
but the request itself, after a preemption. While it runs they are *parked*: they carry their hash (so the
free queue orders and evicts them as cached blocks) but are not indexed; they are indexed (`index_parked`)
only when their sequence is freed without finishing, and a finished request's parked blocks never are. This
spares the dict store and delete per block that indexing every generated block would cost, and changes no
lookup: nobody can look an own id up while its request runs or after it finished.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter as getter


class PrefixCache:
    """``hash -> block ids`` (insertion-ordered) and ``block -> hash``, kept in step.

    Almost every hash is held by one block (vLLM hashes every full block, and most are a request's own), so the
    first block of each hash sits in a flat dict and only the rare later ones in a per-hash dict: the per-block
    cost of caching is one dict store, and of eviction one dict delete. Parked blocks (a running request's own
    blocks) carry their hash in ``block_hash`` but sit in neither dict; ``parked`` counts them."""

    __slots__ = ("block_hash", "_first", "_more", "parked", "spill", "vacancy")

    def __init__(self, num_blocks: int) -> None:
        self.block_hash: list[int | None] = [None] * num_blocks
        self._first: dict[int, int] = {}
        self._more: dict[int, dict[int, None]] = {}
        self.parked = 0
        self.spill = None  # called with the hashes of the evicted blocks (a host tier's `offload_many`), if set
        self.vacancy = (self.block_hash, None)  # a list, and its entry for a block not cached (`BlockPool.drop`)

    @property
    def getter(self) -> Callable[[int], int | None]:
        """The lookup: hash -> a block holding it (the first cached), or None on a miss. It is the index's own
        C-level ``dict.get``, for every loop that looks up block after block (the paged, copy-on-write and
        hybrid lookups: a lookup runs for every waiting request at every step under ``--scheduling-policy lpm``,
        and for a blocked head at every step)."""
        return self._first.get

    def insert(self, block: int, block_hash: int) -> None:
        """Cache a block that has just become full."""
        assert self.block_hash[block] is None, f"block {block} is already cached"
        self.block_hash[block] = block_hash
        if block_hash in self._first:
            self._more.setdefault(block_hash, {})[block] = None
        else:
            self._first[block_hash] = block

    def insert_full(self, table: list[int], hashes: Sequence[int], start: int, stop: int, own_from: int) -> None:
        """Cache ``table[start:stop]``, full blocks hashed ``hashes[start:stop]``, except blocks that carry a hash
        already; those from ``own_from`` on are the request's own and parked. Runs once per block a sequence
        fills: a run of blocks none of which carries a hash (a new prompt's) goes in bulk."""
        mid = stop if stop < own_from else own_from
        if start < mid:
            self.insert_run(table[start:mid], hashes[start:mid])
        start = own_from if own_from > start else start
        if start < stop:
            hashed = self.block_hash
            blocks, hs = table[start:stop], hashes[start:stop]
            parked = 0
            for b, h in zip(blocks, hs, strict=True):
                if hashed[b] is None:
                    hashed[b] = h
                    parked += 1
            self.parked += parked

    def insert_run(self, blocks: list[int], hs: Sequence[int]) -> None:
        """`insert` each block without a hash yet under its hash (a paged pool's, a hybrid pool's group key), in
        order. When none has one (the rule), the first-block dict is filled by one ``map(setdefault)``: where it
        hands back another block, the hash was cached already (or repeats in the run) and the block joins that
        hash's later blocks, as `insert`."""
        hashed, n = self.block_hash, len(blocks)
        if n < 2 or getter(*blocks)(hashed).count(None) < n:
            for b, h in zip(blocks, hs, strict=True):
                if hashed[b] is None:
                    self.insert(b, h)
            return
        got = list(map(self._first.setdefault, hs, blocks))
        for b, h in zip(blocks, hs, strict=True):
            hashed[b] = h
        if got != blocks:
            more = self._more
            for b, h, g in zip(blocks, hs, got, strict=True):
                if g != b:
                    more.setdefault(h, {})[b] = None

    def index_parked(self, table: list[int], hashes: Sequence[int], start: int, stop: int) -> None:
        """Index the parked blocks of ``table[start:stop]`` (a request's own blocks, hashed ``hashes[start:stop]``)
        in table order, the order they were filled in: their request was freed but will come back."""
        hashed, first, more = self.block_hash, self._first, self._more
        for i in range(start, stop):
            block, h = table[i], hashes[i]
            if hashed[block] != h or first.get(h) == block or block in more.get(h, ()):
                continue  # not this request's block any more, or indexed already (a hit)
            hashed[block] = None
            self.insert(block, h)
            self.parked -= 1

    def evict_many(self, blocks: Sequence[int]) -> int:
        """Forget the hashes of ``blocks`` (just popped for reuse, in order) and spill them in that order in one
        call; returns how many were cached.

        A long run goes in bulk when no hash of it is held by several blocks (the rule): the hashes are read
        in one C-level gather, and one ``map(get)`` tells parked blocks (not indexed) from the lone indexed
        ones, whose entries are deleted. Shorter runs (decode growth: one block) and anything unusual go through
        the exact per-block path (`_evict_each`), whose set-up is cheaper."""
        n = len(blocks)
        if n < 64:
            evicted = self._evict_each(blocks)
        else:
            evicted = self._evict_run(blocks)
        if evicted and self.spill is not None:
            self.spill(evicted)
        return len(evicted)

    def _evict_run(self, blocks: Sequence[int]) -> list[int]:
        """`evict_many`'s bulk path; returns the evicted hashes in order."""
        hashed = self.block_hash
        hashes = list(getter(*blocks)(hashed))
        uncached = hashes.count(None)
        if uncached == len(hashes):
            return []
        if uncached:
            pairs = [(b, h) for b, h in zip(blocks, hashes, strict=True) if h is not None]
            blocks, hashes = [b for b, _ in pairs], [h for _, h in pairs]
        first, more = self._first, self._more
        if more and not more.keys().isdisjoint(hashes):
            return self._evict_each(blocks)
        got = list(map(first.get, hashes))
        parked = got.count(None)
        if got == blocks:
            indexed = hashes
        else:
            indexed = [h for h, g, b in zip(hashes, got, blocks, strict=True) if g == b]
            if parked + len(indexed) != len(blocks):  # a duplicate of another block's hash
                return self._evict_each(blocks)
        for b in blocks:
            hashed[b] = None
        for h in indexed:
            del first[h]
        self.parked -= parked
        return hashes

    def _evict_each(self, blocks: Sequence[int]) -> list[int]:
        """`evict_many`'s per-block path; returns the evicted hashes in order."""
        hashed, first, more = self.block_hash, self._first, self._more
        evicted: list[int] = []
        parked = 0
        for block in blocks:
            h = hashed[block]
            if h is None:
                continue
            hashed[block] = None
            evicted.append(h)
            indexed = first.get(h)
            if indexed is None:  # parked: never indexed
                parked += 1
            elif indexed == block and h not in more:
                del first[h]
            else:
                self._unindex(block, h)
        self.parked -= parked
        return evicted

    def forget(self, block: int) -> None:
        """Uncache a block whose last tokens were never known (vLLM's async scheduling: a preempted request's
        in-flight token), parked or indexed; nothing is spilled, since vLLM never cached it."""
        self._evict_each((block,))

    def evict(self, block: int) -> None:
        """Forget a block's hash because it is being reused (a no-op for an uncached block)."""
        self.evict_many((block,))

    def _unindex(self, block: int, h: int) -> None:
        """Take ``block`` (its hash ``h`` already cleared, indexed under it) out of the index, or out of the
        parked count if it is a never indexed duplicate."""
        first = self._first[h]
        more = self._more.get(h)
        if first == block:
            if more:  # the next cached block of this hash takes the first place
                self._first[h] = nxt = next(iter(more))
                del more[nxt]
            else:
                del self._first[h]
        elif more is not None and block in more:
            del more[block]
        else:
            self.parked -= 1  # never indexed (a duplicate of an indexed block)
            return
        if more is not None and not more:
            del self._more[h]

    def __len__(self) -> int:
        return len(self._first) + sum(len(blocks) for blocks in self._more.values()) + self.parked

    def check(self) -> None:
        """Both maps agree: every indexed block carries its key, every hashed block is indexed or parked."""
        for h, b in self._first.items():
            assert self.block_hash[b] == h, f"block {b}: cached under {h} but carries {self.block_hash[b]}"
        for h, blocks in self._more.items():
            assert blocks and h in self._first, f"hash {h}: stray or empty duplicate entry"
            for b in blocks:
                assert self.block_hash[b] == h, f"block {b}: cached under {h} but carries {self.block_hash[b]}"
        assert len(self) == sum(h is not None for h in self.block_hash), "a hashed block is not in the cache"
