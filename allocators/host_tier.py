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

from collections import OrderedDict
from collections.abc import Sequence


class HostTier:
    """``num_blocks`` host KV blocks of ``block_bytes`` bytes: an LRU cache by block hash plus swap parking."""

    __slots__ = ("num_blocks", "block_bytes", "_lru", "_free", "_swapped", "offloaded_blocks",
                 "reloaded_blocks", "evicted_blocks")

    def __init__(self, num_blocks: int, block_bytes: int) -> None:
        if num_blocks < 0 or block_bytes <= 0:
            raise ValueError(f"host tier: num_blocks must be >= 0 and block_bytes > 0, got {num_blocks}, "
                             f"{block_bytes}")
        self.num_blocks = int(num_blocks)
        self.block_bytes = int(block_bytes)
        self._lru: OrderedDict[int, int] = OrderedDict()  # block hash -> host block, least recent first
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
    def _room(self) -> int | None:
        """A free host block, evicting the least recently used cached one if none is free; None if every
        host block is parked swap."""
        if self._free:
            return self._free.pop()
        if not self._lru:
            return None
        _, block = self._lru.popitem(last=False)
        self.evicted_blocks += 1
        return block

    def offload(self, block_hash: int) -> bool:
        """Keep an evicted GPU block's KV on the host as the most recently used; True if bytes moved (False:
        the host had it already, or has no block for it)."""
        return self.offload_many((block_hash,)) == 1

    def offload_many(self, block_hashes: Sequence[int]) -> int:
        """`offload` each of ``block_hashes`` in order (the blocks one allocation evicted, oldest first);
        returns how many moved bytes. One call per allocation, not per block: a long prompt evicts hundreds."""
        lru, free = self._lru, self._free
        touch, pop_oldest = lru.move_to_end, lru.popitem
        moved = evicted = 0
        for h in block_hashes:
            if h in lru:
                touch(h)
                continue
            if free:  # `_room` inlined
                block = free.pop()
            elif lru:
                block = pop_oldest(False)[1]
                evicted += 1
            else:
                continue
            lru[h] = block
            moved += 1
        self.offloaded_blocks += moved
        self.evicted_blocks += evicted
        return moved

    def take(self, block_hashes: Sequence[int]) -> int:
        """Load these host hits into the GPU (the host keeps its copies, touched as most recently used);
        returns the blocks loaded. Call it before allocating the GPU blocks they go to, so an eviction those
        allocations cause cannot drop them first."""
        lru = self._lru
        for h in block_hashes:
            lru.move_to_end(h)  # KeyError: not a host hit (`lookup` first)
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
