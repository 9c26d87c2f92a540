"""`HostTier`: a host-memory (CPU DRAM) tier of KV blocks behind a prefix-caching allocator.

Why: a GPU prefix cache forgets a block when its slot is reused; serving engines (vLLM's KV offloading
connector, ``--kv-offloading-size``; LMCache; SGLang HiCache) keep such blocks in host memory and load them
back over PCIe on a later hit, which is cheaper than prefilling them again. The tier has ``num_blocks`` host
blocks of one GPU block each (``cpu_offload_gib`` GiB over the model's KV bytes per block), with real
identities: host block ids, a free list, and an LRU map from the chained block hash (the keys of
``prefix_cache.py``) to the host block that holds it.

It is an *inclusive* cache, as vLLM's CPU offloading manager and LMCache are: loading a block back copies it
and the host keeps its copy (touched as most recently used), so a block evicted from the GPU again later
costs no second transfer. Host blocks are evicted in LRU order when a new block needs room.

With ``--preemption swap`` the swapped-out KV of a preempted request lives in the same host memory: it
takes host blocks (evicting cached ones, LRU first) that no lookup can hit and no eviction can take, until
the request is swapped back in. So the tier's size bounds cache and swap together.

The interface an allocator uses (a few lines each; paged wires them in ``paged.py`` and
``paged_queries.py``)::

    tier = HostTier(num_blocks, block_bytes)
    tier.offload(block_hash)             # a cached GPU block is being reused: keep its KV on the host
    tier.offload_many(block_hashes)      # the same for every block one allocation evicts, in order
    n = tier.lookup(hashes, start, stop) # consecutive host hits hashes[start:stop] after `start` GPU hits
    tier.take(hashes[start:start + n])   # load them into newly allocated GPU blocks (counts reload bytes)
    tier.swap_out(key, blocks) / tier.swap_in(key)   # a preempted request's KV parked on the host
    tier.check_invariants()

``offload_bytes`` and ``reload_bytes`` count the cache traffic (evicted blocks written, host hits read);
swap traffic is the scheduler's (``swap_blocks``), as without a tier.
"""

from __future__ import annotations

from collections.abc import Sequence


class HostTier:
    """``num_blocks`` host KV blocks of ``block_bytes`` bytes: an LRU cache by block hash plus swap parking."""

    __slots__ = ("num_blocks", "block_bytes", "_lru", "_order", "_head", "_stale", "_free", "_swapped",
                 "offloaded_blocks", "reloaded_blocks", "evicted_blocks")

    def __init__(self, num_blocks: int, block_bytes: int) -> None:
        if num_blocks < 0 or block_bytes <= 0:
            raise ValueError(f"host tier: num_blocks must be >= 0 and block_bytes > 0, got {num_blocks}, "
                             f"{block_bytes}")
        self.num_blocks = int(num_blocks)
        self.block_bytes = int(block_bytes)
        # The LRU: a dict block hash -> host block, and its order as a queue of hashes, least recently used
        # first (``_order[_head:]``), where a hash touched again is queued again and its earlier entries are
        # stale (``_stale`` counts them). Why not an OrderedDict: its per-key bookkeeping costs twice a
        # dict's, and a long prompt's allocation offloads and evicts hundreds of blocks, which this does
        # with slices and bulk dict operations.
        self._lru: dict[int, int] = {}
        self._order: list[int] = []
        self._head = 0  # `_order[:_head]` is dequeued already (dropped in one go once it is half the list)
        self._stale: dict[int, int] = {}  # hash -> how many of its entries in the queue are stale
        self._free: list[int] = list(range(self.num_blocks - 1, -1, -1))  # popped from the end: id 0 first
        self._swapped: dict[int, list[int]] = {}  # swap key (a request) -> the host blocks its KV takes
        self.offloaded_blocks = 0  # blocks written to the host (a hash already there costs nothing)
        self.reloaded_blocks = 0  # blocks read back into the GPU (host hits)
        self.evicted_blocks = 0  # host blocks whose cached hash was dropped to make room

    @classmethod
    def from_gib(cls, gib: float, kv_bytes_per_token: int, block_size: int) -> HostTier:
        """A tier of ``gib`` GiB holding blocks of ``block_size`` tokens of ``kv_bytes_per_token`` bytes."""
        block_bytes = kv_bytes_per_token * block_size
        return cls(int(gib * 2**30 // block_bytes), block_bytes)

    # -- reading -------------------------------------------------------------------------------------------
    @property
    def offload_bytes(self) -> int:
        return self.offloaded_blocks * self.block_bytes

    @property
    def reload_bytes(self) -> int:
        return self.reloaded_blocks * self.block_bytes

    @property
    def cached_blocks(self) -> int:
        return len(self._lru)

    @property
    def swapped_blocks(self) -> int:
        return sum(len(blocks) for blocks in self._swapped.values())

    @property
    def num_free(self) -> int:
        return len(self._free)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._lru

    def lookup(self, block_hashes: Sequence[int], start: int, stop: int) -> int:
        """How many of ``block_hashes[start:stop]``, from ``start`` on, the host holds in a row (no side
        effects): the blocks after the ``start`` GPU hits that can be loaded instead of prefilled."""
        lru, n = self._lru, 0
        for i in range(start, min(stop, len(block_hashes))):
            if block_hashes[i] not in lru:
                break
            n += 1
        return n

    # -- changing ------------------------------------------------------------------------------------------
    def _touch(self, block_hash: int) -> None:
        """Make a cached hash the most recently used."""
        self._order.append(block_hash)
        self._stale[block_hash] = self._stale.get(block_hash, 0) + 1

    def _evict_oldest(self, count: int) -> list[int]:
        """Drop the ``count`` least recently used cached hashes (there must be as many); returns their host
        blocks, oldest first. Stale queue entries met on the way are dropped as well."""
        order, stale, head = self._order, self._stale, self._head
        oldest: list[int] = []
        while len(oldest) < count:
            window = order[head:head + count - len(oldest)]
            if not window:
                raise AssertionError(f"host tier: {count} hashes to evict, fewer cached")
            head += len(window)
            if stale and not stale.keys().isdisjoint(window):  # some are stale: sort them out in order
                live = []
                for h in window:
                    n = stale.get(h)
                    if n is None:
                        live.append(h)
                    elif n == 1:
                        del stale[h]
                    else:
                        stale[h] = n - 1
                window = live
            oldest += window
        self._dequeue(head)
        self.evicted_blocks += count
        return list(map(self._lru.pop, oldest))

    def _pop_oldest(self) -> int:
        """`_evict_oldest` of one hash, without building lists: a decoding sequence evicts one at a time."""
        order, stale, head = self._order, self._stale, self._head
        h = order[head]
        head += 1
        while stale and h in stale:  # a stale entry: the hash's live one is further on
            n = stale.pop(h)
            if n > 1:
                stale[h] = n - 1
            h = order[head]
            head += 1
        self._dequeue(head)
        self.evicted_blocks += 1
        return self._lru.pop(h)

    def _dequeue(self, head: int) -> None:
        """Move the queue's head to ``head``, dropping the dequeued part now and then (a memmove)."""
        if head > 1024 and 2 * head > len(self._order):
            del self._order[:head]
            head = 0
        self._head = head

    def _room(self) -> int | None:
        """A free host block, evicting the least recently used cached one if none is free; None if every
        host block is parked swap."""
        if self._free:
            return self._free.pop()
        if not self._lru:
            return None
        return self._pop_oldest()

    def offload(self, block_hash: int) -> bool:
        """Keep an evicted GPU block's KV on the host as the most recently used; True if bytes moved (False:
        the host had it already, or has no block for it)."""
        return self.offload_many((block_hash,)) == 1

    def offload_many(self, block_hashes: Sequence[int]) -> int:
        """`offload` each of ``block_hashes`` in order (the blocks one allocation evicted, oldest first);
        returns how many moved bytes. One call per allocation, not per block: a long prompt evicts hundreds,
        so the usual case (none cached yet, no hash twice, enough blocks free or cached) is done in bulk."""
        lru, free = self._lru, self._free
        n = len(block_hashes)
        if n > 1 and len(set(block_hashes)) == n and lru.keys().isdisjoint(block_hashes):
            need = n - len(free)  # blocks to evict once the free ones are used
            if need <= 0:
                blocks = free[:-n - 1:-1]  # popped from the end, as `_room` does
                del free[-n:]
            elif need <= len(lru):  # evictions take only hashes cached before this batch
                blocks = free[::-1]
                free.clear()
                blocks += self._evict_oldest(need)
            else:
                return self._offload_each(block_hashes)
            lru.update(zip(block_hashes, blocks, strict=True))
            self._order += block_hashes
            self.offloaded_blocks += n
            return n
        return self._offload_each(block_hashes)

    def _offload_each(self, block_hashes: Sequence[int]) -> int:
        """`offload_many` one hash at a time (hashes cached already or twice, or a host full of swap)."""
        lru, free = self._lru, self._free
        moved = 0
        for h in block_hashes:
            if h in lru:
                self._touch(h)
                continue
            if free:
                block = free.pop()
            elif lru:
                block = self._pop_oldest()
            else:
                continue
            lru[h] = block
            self._order.append(h)
            moved += 1
        self.offloaded_blocks += moved
        return moved

    def take(self, block_hashes: Sequence[int]) -> int:
        """Load these host hits into the GPU (the host keeps its copies, touched as most recently used);
        returns the blocks loaded. Call it before allocating the GPU blocks they go to, so an eviction those
        allocations cause cannot drop them first."""
        lru = self._lru
        for h in block_hashes:
            if h not in lru:
                raise KeyError(h)  # not a host hit (`lookup` first)
            self._touch(h)
        self.reloaded_blocks += len(block_hashes)
        return len(block_hashes)

    def swap_out(self, key: int, num_blocks: int) -> bool:
        """Park ``num_blocks`` blocks of a preempted request's KV under ``key``, evicting cached blocks as
        needed; False (nothing changed) if the host has too few blocks that are free or cached."""
        if key in self._swapped:
            raise ValueError(f"host tier: {key} is already swapped out")
        if num_blocks > len(self._free) + len(self._lru):
            return False
        self._swapped[key] = [self._room() for _ in range(num_blocks)]
        return True

    def swap_in(self, key: int) -> int:
        """Free the host blocks of a request being swapped back in; returns how many."""
        blocks = self._swapped.pop(key)
        self._free.extend(reversed(blocks))
        return len(blocks)

    def check_invariants(self) -> None:
        """Host blocks are conserved (cached + swapped + free = capacity) and each is held once: by one hash,
        one swapped request, or the free list."""
        held = list(self._lru.values()) + [b for blocks in self._swapped.values() for b in blocks] + self._free
        assert len(held) == self.num_blocks, (f"host tier: bytes not conserved: {len(held)} blocks of "
                                              f"{self.block_bytes} B accounted for, capacity {self.num_blocks}")
        assert len(set(held)) == len(held), "host tier: a host block is held twice"
        assert all(0 <= b < self.num_blocks for b in held), "host tier: host block id out of range"
        assert self.reloaded_blocks >= 0 and self.offloaded_blocks >= self.evicted_blocks >= 0, \
            "host tier: counters out of step"
        queued: dict[int, int] = {}
        for h in self._order[self._head:]:
            queued[h] = queued.get(h, 0) + 1
        assert queued.keys() == self._lru.keys(), "host tier: the LRU order and the cached hashes disagree"
        assert self._stale.keys() <= queued.keys(), "host tier: a stale count for a hash not queued"
        assert all(n == self._stale.get(h, 0) + 1 for h, n in queued.items()), "host tier: stale entries miscounted"
