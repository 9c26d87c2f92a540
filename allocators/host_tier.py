"""`HostTier`: a host-memory (CPU DRAM) tier of KV blocks behind a prefix-caching allocator.

Why: a GPU prefix cache forgets a block when its slot is reused; serving engines (vLLM's KV offloading
connector, ``--kv-offloading-size``; LMCache; SGLang HiCache) keep such blocks in host memory and load them
back over PCIe on a later hit, which is cheaper than prefilling them again. The tier has ``num_blocks`` host
blocks of one GPU block each (``cpu_offload_gib`` GiB over a block's KV bytes on all the tensor-parallel GPUs),
with real identities: host block ids, a free list, and an LRU map from the chained block hash (the keys of
``prefix_cache.py``) to the host block that holds it.

It is an *inclusive* cache, as vLLM's CPU offloading manager and LMCache are: loading a block back copies it
and the host keeps its copy (touched as most recently used), so a block evicted from the GPU again later
costs no second transfer. Host blocks are evicted in LRU order when a new block needs room.

When a block reaches the host is the write policy (``--offload-write-policy``):

- ``write_back`` (the default): when the GPU evicts it, so the host holds only blocks the GPU dropped, most
  recently dropped last, and only evicted blocks cross PCIe (SGLang HiCache's ``write_back``).
- ``write_through``: as soon as it is computed, and a GPU eviction writes nothing. The host then also holds
  blocks the GPU still caches, and every stored block crosses PCIe once. This is vLLM's
  ``OffloadingConnector`` (0.33, the oracle's version), which ranks and stores by request:
  `request_tier.RequestTier`, a subclass, models it (its module doc says how), with vLLM's LRU policy
  (``lru_tier.py``) or ARC (``arc_tier.py``, ``--offload-eviction-policy arc``) and its store
  threshold (``--offload-store-threshold``, ``store_filter.py``). SGLang HiCache's
  ``write_through`` differs in that its host never drops a block its GPU still holds.

A host smaller than the GPU's cache is nearly useless under ``write_through`` (it holds the newest blocks,
which the GPU holds too; smaller than a step's blocks, it stores nothing) and useful under ``write_back``;
with a host larger than what the GPU evicts, both hit the same blocks.

With ``--preemption swap`` the swapped-out KV of a preempted request lives in the same host memory: it
takes host blocks (evicting cached ones, LRU first) that no lookup can hit and no eviction can take, until
the request is swapped back in. So the tier's size bounds cache and swap together. Swap is vLLM v0's and the
tier vLLM v1's (or SGLang's), so how they meet is kvsim's own rule: a hashed block the swap parked is on the
host already, so while it is parked a GPU eviction of the same hash (the victim's own blocks, freed by its
preemption and taken at once by the allocation that preempted it, or a shared prefix's) stores no second copy
and moves no bytes (``offload_many`` skips it, and `evicted_by` forecasts without it). When the request is
swapped back in (or dropped), the swap blocks of such hashes are kept as their cache entries, the most
recently used, as if offloaded then (``kept_blocks``, no bytes): the host ends up caching what an eviction
would have stored, without holding it twice meanwhile or writing it twice. The same rule the other way round: a
hashed block the host caches already when its request is swapped out (a full block of the same hash holds the
same KV) is not copied again: the swap takes the cached host block as its parked copy (``shared_blocks``; the
scheduler charges the swap-out no transfer for it, `KVMemory.park`), so the hash leaves the cache while it is
parked, as every parked block is out of reach of lookups and evictions, and is cached again, the most recently
used, when the request is swapped back in (its blocks were read then) or dropped. vLLM v0's prefix-caching CPU
allocator shares such a block too (``allocate_immutable_block`` finds its hash), though its swap copies every
block's bytes regardless; kvsim's tier knows the bytes are there and moves none. Likewise a hashed block another
swapped request parks already: the two share its one host block (``joined_blocks``), as vLLM v0's CPU allocator
does with prefix caching on (0.4.1 ``BlockSpaceManagerV1.swap_out`` calls ``CachedBlockAllocator.allocate(
gpu_block.block_hash, ...)``, which returns the block cached under that hash with its reference count raised;
0.3.x's block manager hashed no block, so no two of its swapped groups shared a CPU block); the block is handed on to a
request still parking it when its holder is swapped back in, and cached (as above) after the last one. A
write-through tier (``request_tier.py``) shares the same way, but keeps a cached block cached (`RequestTier.swap_out`
says why).

With loads beside the steps (``--offload-loads async``, `sim.kernel.host_loads`) the host blocks a load is
reading are ``pinned`` (the scheduler's set of hashes being loaded, filled from the admission's lookup that
finds them to the load's end): no eviction takes one, whether a spill (`offload_many`, `evicted_by`'s forecast)
or a swap-out making room (`swap_out`, `_room`), or the load would read a block overwritten meanwhile. Pinned
blocks keep their place in the LRU order: evictions pass over them (`_unpinned`), and once the load lands they
are evictable again where they stand. A spill that finds no block free or cached outside them is not stored,
and a swap-out that would need them is refused, as the write-through tier's stores and swap-outs are
(`request_tier.py`); a swap-out does not take a pinned block as its parked copy (it copies it: the hash stays
cached). SGLang HiCache, whose ``write_back`` this tier models, protects a load's host copies the same way
(0.5.5, ``mem_cache/hiradix_cache.py``): `HiRadixCache.load_back` gives the nodes it loads their device blocks
and locks them (``inc_lock_ref``) until `loading_check` sees the load done, and `HiRadixCache.evict_host`
evicts the host copy only of nodes not on the device (``if not x.evicted: continue``), nor of those a
transfer holds (``host_ref_counter``, `TreeNode.protect_host` in ``radix_cache.py``), passing over them to the
next in its eviction order.

Behind a hybrid pool (``hybrid.py``) a host block is one group block and the keys are the pool's ``(hash,
group)`` keys, so the tier works the same (write-back only: the hybrid pool refuses a write-through tier).

The interface an allocator uses (a few lines each; paged wires them in ``paged.py`` and
``paged_queries.py``, the hybrid pool in ``hybrid.py``)::

    tier = HostTier(num_blocks, block_bytes)
    tier.offload(block_hash)             # a cached GPU block is being reused: keep its KV on the host
    tier.offload_many(block_hashes)      # the same for every block one allocation evicts, in order
    n = tier.lookup(hashes, start, stop) # consecutive host hits hashes[start:stop] after `start` GPU hits
    tier.take(hashes[start:start + n])   # load them into newly allocated GPU blocks (counts reload bytes)
    tier.load(seq, hashes, start, n)     # the same, as a paged allocator asks every tier
    tier.swap_out(key, blocks, hashes) / tier.swap_in(key)  # a preempted request's KV parked on the host
    tier.check_invariants()

(`RequestTier` takes ``load``, ``computed`` and ``release`` by request instead of ``take`` and the
offloads.) ``offload_bytes`` and ``reload_bytes`` count the cache traffic (evicted blocks written, host hits read);
swap traffic is the scheduler's (``swap_blocks``), as without a tier.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from itertools import islice


class HostTier:
    """``num_blocks`` host KV blocks of ``block_bytes`` bytes: an LRU cache by block hash plus swap parking."""

    __slots__ = ("num_blocks", "block_bytes", "_lru", "_order", "_order_blocks", "_head", "_stale", "_free",
                 "_swapped", "_parked_hashes", "_parked", "_skipped", "offloaded_blocks", "reloaded_blocks",
                 "evicted_blocks", "kept_blocks", "shared_blocks", "_parked_block", "joined_blocks", "pinned",
                 "dropped_blocks")

    write_through = False
    """Write-back: the allocator's evictions spill here (`offload_many`); `RequestTier` is the other policy."""

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
        # with slices and bulk dict operations. The queue also has each entry's host block
        # (``_order_blocks``, parallel to ``_order``; a hash keeps its block when touched), so the blocks of the
        # oldest hashes are a slice, known before those hashes leave the dict (`offload_many`).
        self._lru: dict[int, int] = {}
        self._order: list[int] = []
        self._order_blocks: list[int] = []
        self._head = 0  # `_order[:_head]` is dequeued already (dropped in one go once it is half the list)
        # host block -> how many queue entries naming it are stale (a touched hash's earlier ones, or all of a
        # hash a swap took out of the cache, `_uncache`); the earliest are, as they are consumed first. A block,
        # not the hash: the queue's blocks are a few thousand small ints, checked without reading the hashes'
        # cold objects
        self._stale: dict[int, int] = {}
        self._free: list[int] = list(range(self.num_blocks - 1, -1, -1))  # popped from the end: id 0 first
        self._swapped: dict[int, list[int]] = {}  # swap key (a request) -> the host blocks its KV takes
        self._parked_hashes: dict[int, frozenset[int]] = {}  # swap key -> the hashes of the blocks it parked
        self._parked: dict[int, int] = {}  # hash -> how many swapped requests parked it (not offloaded meanwhile)
        # parked hash -> the one host block that holds its KV, in the list of a swapped request that parks it
        # (`swap_out`: a second request parking it shares the block; `swap_in` hands it on)
        self._parked_block: dict[int, int] = {}
        self._skipped: dict[int, None] = {}  # parked hashes the GPU evicted, not stored (in that order): kept at
        # `swap_in`
        self.offloaded_blocks = 0  # blocks written to the host (a hash already there costs nothing)
        self.reloaded_blocks = 0  # blocks read back into the GPU (host hits)
        self.evicted_blocks = 0  # host blocks whose cached hash was dropped to make room
        self.kept_blocks = 0  # swap blocks kept as the cache entries of parked hashes (`swap_in`)
        self.shared_blocks = 0  # cached blocks a swap-out took as its parked copies: no bytes moved (`swap_out`)
        self.joined_blocks = 0  # parked blocks a swap-out shared with another swapped request: no bytes moved
        self.dropped_blocks = 0  # spilled blocks not stored: no host block free nor cached outside the pinned ones
        # cached hashes whose host blocks a load beside the steps is reading (``--offload-loads async``: the
        # scheduler's `HostLoads.being_loaded`, the same set): nothing evicts them until the load lands (`_unpinned`)
        self.pinned: set[int] = set()

    @classmethod
    def from_gib(cls, gib: float, kv_bytes_per_token: int, block_size: int, **options) -> HostTier:
        """A tier of ``gib`` GiB holding blocks of ``block_size`` tokens of ``kv_bytes_per_token`` bytes
        (``options``: the class's own, e.g. `RequestTier`'s ``store_threshold``)."""
        block_bytes = kv_bytes_per_token * block_size
        return cls(int(gib * 2**30 // block_bytes), block_bytes, **options)

    # -- reading -------------------------------------------------------------------------------------------
    @property
    def skipped_blocks(self) -> int:
        """Blocks offered for a write-through store that a store threshold skipped (none here)."""
        return 0

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

    @property
    def holds(self) -> Callable[[int], bool]:
        """``in`` as the LRU dict's own C-level ``__contains__``, for loops that ask block after block (the
        hybrid pool's lookups)."""
        return self._lru.__contains__

    def lookup(self, block_hashes: Sequence[int], start: int, stop: int) -> int:
        """How many of ``block_hashes[start:stop]``, from ``start`` on, the host holds in a row (no side
        effects): the blocks after the ``start`` GPU hits that can be loaded instead of prefilled."""
        lru, n = self._lru, 0
        for i in range(start, min(stop, len(block_hashes))):
            if block_hashes[i] not in lru:
                break
            n += 1
        return n

    def evicted_by(self, block_hashes: Sequence[int]) -> list[int]:
        """The hashes offloading ``block_hashes`` would evict, changing nothing, each counted as new (one the host
        holds is only touched: this may say more): the least recently used, once the free blocks are taken
        (what a GPU eviction's spill takes off the host), passing over the ``pinned`` ones. A parked hash the host
        does not cache is not stored (`offload_many`): it takes no room."""
        parked, lru = self._parked, self._lru
        count = len(block_hashes) if not parked else sum(1 for h in block_hashes if h not in parked or h in lru)
        if self.pinned:
            need = min(count - len(self._free), len(lru) - self._pinned_cached())
            return [h for h, _ in islice(self._unpinned(), need)] if need > 0 else []
        need = min(count - len(self._free), len(lru))
        return self._oldest(need)[0] if need > 0 else []

    # -- changing ------------------------------------------------------------------------------------------
    def _touch(self, block_hash: int) -> None:
        """Make a cached hash the most recently used."""
        block = self._lru[block_hash]
        self._order.append(block_hash)
        self._order_blocks.append(block)
        self._stale[block] = self._stale.get(block, 0) + 1

    def _uncache(self, block_hash: int) -> int:
        """Take a cached hash out of the cache (its queue entries all stale) and return its host block."""
        block = self._lru.pop(block_hash)
        self._stale[block] = self._stale.get(block, 0) + 1
        return block

    def _oldest(self, count: int) -> tuple[list[int], list[int], int, dict[int, int]]:
        """The ``count`` least recently used cached hashes (there must be as many) and their host blocks,
        oldest first, the queue head past them and the stale counts they leave (block -> count left, 0: none),
        changing nothing: `offload_many` evicts them (`_dequeue_past`) once its batch turned out all new."""
        order, order_blocks, stale, head = self._order, self._order_blocks, self._stale, self._head
        oldest: list[int] = []
        blocks: list[int] = []
        left: dict[int, int] = {}
        while len(oldest) < count:
            stop = head + count - len(oldest)
            window, window_blocks = order[head:stop], order_blocks[head:stop]
            if not window:
                raise AssertionError(f"host tier: {count} hashes to evict, fewer cached")
            head += len(window)
            if stale and not stale.keys().isdisjoint(window_blocks):  # some are stale: sort them out in order
                live, live_blocks = [], []
                for h, block in zip(window, window_blocks, strict=True):
                    n = left.get(block, stale.get(block))
                    if n:
                        left[block] = n - 1
                    else:
                        live.append(h)
                        live_blocks.append(block)
                window, window_blocks = live, live_blocks
            oldest += window
            blocks += window_blocks
        return oldest, blocks, head, left

    def _dequeue_past(self, head: int, left: dict[int, int]) -> None:
        """Commit an `_oldest`: the stale counts it leaves and the queue head past it."""
        stale = self._stale
        for block, n in left.items():
            if n:
                stale[block] = n
            else:
                del stale[block]
        self._dequeue(head)

    def _pop_oldest(self) -> int | None:
        """Evict the least recently used hash not ``pinned`` and return its block (None: every cached hash is
        pinned), without building lists (`_oldest` and `_dequeue_past` in one): a decoding sequence evicts one
        at a time. There must be a cached hash."""
        order, order_blocks, stale, head = self._order, self._order_blocks, self._stale, self._head
        block = order_blocks[head]
        head += 1
        while stale and block in stale:  # a stale entry: the hash's live one is further on
            n = stale.pop(block)
            if n > 1:
                stale[block] = n - 1
            block = order_blocks[head]
            head += 1
        h = order[head - 1]
        if self.pinned and h in self.pinned:  # stays first in line: the stale entries before it are dequeued
            self._dequeue(head - 1)
            return self._pop_unpinned()
        self._dequeue(head)
        self.evicted_blocks += 1
        return self._lru.pop(h)

    def _unpinned(self) -> Iterator[tuple[int, int]]:
        """The cached hashes not ``pinned`` and their host blocks, least recently used first, changing nothing:
        the queue's live entries, the pinned ones passed over (they keep their place)."""
        order, order_blocks, stale, pinned = self._order, self._order_blocks, self._stale, self.pinned
        left: dict[int, int] = {}  # stale entries of a block still to pass, as in `_oldest`
        for i in range(self._head, len(order)):
            block = order_blocks[i]
            n = left.get(block, stale.get(block))
            if n:
                left[block] = n - 1
            elif order[i] not in pinned:
                yield order[i], block

    def _pop_unpinned(self) -> int | None:
        """`_pop_oldest` past a pinned hash first in line: the least recently used hash not pinned leaves, and its
        queue entry, behind the pinned one, stays there counted stale (the queue's head cannot pass a live
        entry), so the pinned hashes keep their place and leave first, in order, once their load lands."""
        for h, block in self._unpinned():
            self._stale[block] = self._stale.get(block, 0) + 1  # its last entry: every entry of the block stale
            self.evicted_blocks += 1
            return self._lru.pop(h)
        return None

    def _pinned_cached(self) -> int:
        """How many cached hashes are ``pinned`` (all of them, `check_invariants`; counted, not assumed, as room
        depends on it)."""
        lru = self._lru
        return sum(1 for h in self.pinned if h in lru)

    def _dequeue(self, head: int) -> None:
        """Move the queue's head to ``head``, dropping the dequeued part now and then (a memmove)."""
        if head > 1024 and 2 * head > len(self._order):
            del self._order[:head]
            del self._order_blocks[:head]
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
        so the usual case (none cached yet, no hash twice, enough blocks free or cached before) is done in
        bulk, optimistically: the batch is entered with one `dict.setdefault` a hash, the blocks it takes
        known beforehand (free ones, then the oldest hashes' from the queue), and the dict's growth tells
        whether every hash was new; if so the oldest hashes leave, else the batch's new keys (the dict's
        last) are taken out again and it goes hash by hash. Two dict operations a hash, where checking
        first took four. A leading run of hashes the host holds is touched first, one by one, and the rest
        goes on as above: a write-through admission hands the tier its hits (held already) before its new
        blocks. A hash a swapped request parked is not stored (its KV is on the host already: module doc),
        though touched if cached."""
        lru, free = self._lru, self._free
        if self._parked:  # whether a parked hash is cached depends on what the batch evicted before it
            return self._offload_each(block_hashes)
        held = 0
        while held < len(block_hashes) and block_hashes[held] in lru:
            self._touch(block_hashes[held])
            held += 1
        if held:
            block_hashes = block_hashes[held:]
        n = len(block_hashes)
        need = n - len(free)  # blocks to evict once the free ones are used
        if n < 2 or need > len(lru):  # one hash, or evictions would reach into this batch
            return self._offload_each(block_hashes)
        if need <= 0:
            blocks = free[:-n - 1:-1]  # popped from the end, as `_room` does
        else:
            oldest, evicted, head, left = self._oldest(need)
            if self.pinned and not self.pinned.isdisjoint(oldest):  # evictions pass over it: one by one
                return self._offload_each(block_hashes)
            blocks = free[::-1] + evicted
        before = len(lru)
        for _ in map(lru.setdefault, block_hashes, blocks):  # keeps the block of a hash cached already
            pass
        if len(lru) - before != n:  # a hash cached already (the oldest too: they are still in) or twice
            for h in list(islice(reversed(lru), len(lru) - before)):  # the keys this batch entered
                del lru[h]
            return self._offload_each(block_hashes)
        if need <= 0:
            del free[-n:]
        else:
            free.clear()
            for h in oldest:
                del lru[h]
            self._dequeue_past(head, left)
            self.evicted_blocks += need
        self._order += block_hashes
        self._order_blocks += blocks
        self.offloaded_blocks += n
        return n

    def _offload_each(self, block_hashes: Sequence[int]) -> int:
        """`offload_many` one hash at a time (hashes cached already or twice, a host full of swap, pinned hashes
        among the oldest, or parked hashes: one not cached when its turn comes is noted in `_skipped`, latest
        last, instead of stored). A hash that finds no host block free nor cached outside the ``pinned`` ones is
        not stored (its KV is dropped, as the GPU's copy is), and counted (``dropped_blocks``)."""
        lru, free, parked, skipped = self._lru, self._free, self._parked, self._skipped
        moved = 0
        for h in block_hashes:
            if h in lru:
                self._touch(h)
                continue
            if h in parked:
                skipped.pop(h, None)
                skipped[h] = None
                continue
            if free:
                block = free.pop()
            elif lru:
                block = self._pop_oldest()
                if block is None:  # every cached hash pinned
                    self.dropped_blocks += 1
                    continue
            else:  # the host is all parked swap
                self.dropped_blocks += 1
                continue
            lru[h] = block
            self._order.append(h)
            self._order_blocks.append(block)
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

    def load(self, seq_id: int, block_hashes: Sequence[int], start: int, count: int) -> int:
        """`take` the host hits ``block_hashes[start:start + count]`` of sequence ``seq_id`` (the call a paged
        allocator makes of every tier; a write-back tier does not need the sequence)."""
        return self.take(block_hashes[start:start + count])

    def swap_out(self, key: int, num_blocks: int, block_hashes: frozenset[int] = frozenset()) -> bool:
        """Park ``num_blocks`` blocks of a preempted request's KV under ``key``, evicting cached blocks as
        needed, ``block_hashes`` those of its hashed blocks (not offloaded while parked); False (nothing
        changed) if the host has too few blocks that are free or cached and not ``pinned``. A hashed block the
        host holds is not copied: one another swapped request parks already shares that request's host block
        (`joined_blocks`), and one the host caches is taken as the parked copy (`shared_blocks`; the module doc
        says why), first, so that making room evicts none of them, and it is cached again at `swap_in`; but not
        a pinned one, which a load is reading and which must stay cached until it lands: it is copied, and stays
        cached (while parked, the GPU's evictions of it only touch it). The hashed blocks copied take the first
        new host blocks, in hash order. A write-through tier (`RequestTier.swap_out`, whose policy orders its
        cache) keeps a cached one cached."""
        if key in self._swapped:
            raise ValueError(f"host tier: {key} is already swapped out")
        lru, held, pinned = self._lru, self._parked_block, self.pinned
        ordered = sorted(block_hashes)
        joined = [h for h in ordered if h in held]
        if num_blocks - len(joined) > len(self._free) + len(lru) - (self._pinned_cached() if pinned else 0):
            return False
        rest = [h for h in ordered if h not in held]
        shared = [h for h in rest if h in lru and h not in pinned][:num_blocks - len(joined)] if lru else []
        blocks = [self._uncache(h) for h in shared]
        blocks += [self._room() for _ in range(num_blocks - len(joined) - len(blocks))]
        self._swapped[key] = blocks
        if shared:
            skipped = self._skipped
            for h in shared:  # not cached while parked: cached again when the request is swapped back in
                skipped[h] = None
            self.shared_blocks += len(shared)
        self.joined_blocks += len(joined)
        if block_hashes:
            self._parked_hashes[key] = block_hashes
            taken = set(shared)
            held.update(zip(shared + [h for h in rest if h not in taken], blocks, strict=False))
            parked = self._parked
            for h in block_hashes:
                parked[h] = parked.get(h, 0) + 1
        return True

    def swap_in(self, key: int) -> int:
        """Free the host blocks of a request being swapped back in (or dropped), but those that hold a hash
        another swapped request parks too (handed on to one of them) and those that hold a hash the GPU evicted
        while it was parked, or the host cached when it was swapped out, and that no one parks now: they become
        its cache entry (the most recently used, in the order they were evicted or taken; no bytes move).
        Returns how many blocks it held, those it shared with others included."""
        blocks = self._swapped.pop(key)
        count = len(blocks)
        hashes = self._parked_hashes.pop(key, ())
        parked, held = self._parked, self._parked_block
        for h in sorted(hashes):
            n = parked.pop(h)
            if n > 1:
                parked[h] = n - 1
                block = held.get(h)
                if block in blocks:  # still parked by another: its block goes to one of them
                    blocks.remove(block)
                    heir = min(k for k, parked_hashes in self._parked_hashes.items() if h in parked_hashes)
                    self._swapped[heir].append(block)
                elif block is not None:  # another's block it shared
                    count += 1
            else:
                held.pop(h, None)
        free = self._free
        free.extend(reversed(blocks))
        skipped, lru = self._skipped, self._lru
        kept = [h for h in skipped if h in hashes and h not in parked]  # each held one of the blocks freed
        for h in kept:
            del skipped[h]
            block = free.pop()
            lru[h] = block
            self._order.append(h)
            self._order_blocks.append(block)
        self.kept_blocks += len(kept)
        return count

    def check_invariants(self) -> None:
        """Host blocks are conserved (cached + swapped + free = capacity) and each is held once: by one hash,
        one swapped request, or the free list; then the eviction order (`_check_order`)."""
        held = list(self._lru.values()) + [b for blocks in self._swapped.values() for b in blocks] + self._free
        assert len(held) == self.num_blocks, (f"host tier: bytes not conserved: {len(held)} blocks of "
                                              f"{self.block_bytes} B accounted for, capacity {self.num_blocks}")
        assert len(set(held)) == len(held), "host tier: a host block is held twice"
        assert all(0 <= b < self.num_blocks for b in held), "host tier: host block id out of range"
        assert self.reloaded_blocks >= 0 and self.offloaded_blocks + self.kept_blocks >= self.evicted_blocks >= 0, \
            "host tier: counters out of step"
        for key in self._parked_hashes:
            assert key in self._swapped, f"host tier: hashes parked under {key}, which is not swapped out"
        parked = Counter(h for hashes in self._parked_hashes.values() for h in hashes)
        assert parked == self._parked, "host tier: parked hashes miscounted"
        owner = {b: key for key, blocks in self._swapped.items() for b in blocks}
        assert self._parked_block.keys() <= parked.keys() and all(
            h in self._parked_hashes[owner[b]] for h, b in self._parked_block.items()), \
            "host tier: a parked hash's block is not held by a request that parks it"
        assert len(set(self._parked_block.values())) == len(self._parked_block), "host tier: two hashes, one block"
        assert all(h in parked and h not in self._lru for h in self._skipped), \
            "host tier: a skipped hash is not parked, or cached"
        assert all(h in self._lru for h in self.pinned), "host tier: a hash being loaded (pinned) is not cached"
        self._check_order()

    def _check_order(self) -> None:
        """The LRU queue holds every cached hash: the last entry naming its block names the hash, and every
        other entry naming a block is counted stale (a touched hash's earlier ones, an uncached hash's)."""
        assert len(self._order_blocks) == len(self._order), "host tier: the queue's blocks out of step"
        order, blocks = self._order[self._head:], self._order_blocks[self._head:]
        last: dict[int, int] = {}
        count: dict[int, int] = {}
        for i, b in enumerate(blocks):
            last[b] = i
            count[b] = count.get(b, 0) + 1
        holder = {b: h for h, b in self._lru.items()}
        assert all(b in last and order[last[b]] == h for b, h in holder.items()), \
            "host tier: the LRU order and the cached hashes disagree"
        stale = {b: n - (b in holder) for b, n in count.items() if n - (b in holder)}
        assert stale == self._stale, "host tier: stale entries miscounted"
