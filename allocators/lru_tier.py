"""`LruTier`: vLLM's CPU offloading with its LRU policy (the default ``eviction_policy``).

Why not a plain LRU of blocks: vLLM 0.33's ``LRUCachePolicy`` ranks by request. Each request gets a rank
when it first records a block (a counter shared by the whole tier); a block it stores or reuses ranks
``(request rank, -position)``, so while a request runs its blocks are older than anything ranked after it
started, and its tail leaves before its head. When the request finishes, all the blocks it stored or reused
are ranked anew, tail first, so its head is the most recently used block (``on_request_finished``). A plain
LRU in store order would drop the head first, which leaves the rest of the chain unreachable (lookups run
from the head). What is offered and stored when is `request_tier.RequestTier`'s.
"""

from __future__ import annotations

import heapq
from operator import itemgetter

from allocators.request_tier import Access, RequestTier

_SHIFT = 24
_QUEUED = (1 << _SHIFT) - 1
_TOP = (1 << (_SHIFT - 1)) - 1
"""Ranks are ints: ``(tick, 1)`` is ``tick << _SHIFT | _QUEUED`` and ``(request rank, -position)`` is
``rank << _SHIFT | (_TOP - position)`` (positions below 2**23 blocks), so they compare as the pairs do and
cost no tuple."""

_position = itemgetter(1)


def _request_rank(rank: int, pos: int) -> int:
    """``(rank, -pos)`` as an int."""
    return (rank << _SHIFT) + _TOP - pos


class LruTier(RequestTier):
    """`RequestTier` ordered as vLLM's LRU policy orders it (the module doc).

    Every cached hash has a rank (an int, ``_SHIFT``): ``(tick, 1)`` once ranked by a finished request,
    ``(request rank, -position)`` while a running request holds its latest rank. Ticks and request ranks come
    from one clock, so they never tie. The finished ranks only ever grow, so those hashes stay in `HostTier`'s
    LRU queue (``_order``, stale entries counted per block in ``_stale``), each entry with its tick
    (``_order_ticks``); the running requests' hashes sit in a list per request (``_groups``: request rank ->
    ``(position, hash)`` entries, sorted when read, stale entries dropped when met). Eviction takes the lowest
    ranks: from the queue's head in bulk as long as no request holds an older rank and nothing in the way is
    protected, else one at a time, merging the queue with the requests' lists from their tails."""

    __slots__ = ("_rank", "_order_ticks", "_groups", "_unsorted", "_group_ranks", "_num_queued", "_clock")

    def __init__(self, num_blocks: int, block_bytes: int, *, store_threshold: int = 0,
                 prompt_only: bool = False) -> None:
        super().__init__(num_blocks, block_bytes, store_threshold=store_threshold, prompt_only=prompt_only)
        self._rank: dict[int, int] = {}
        self._order_ticks: list[int] = []  # the tick of each entry of ``_order`` (increasing)
        self._groups: dict[int, list[tuple[int, int]]] = {}
        self._unsorted: set[int] = set()  # request ranks whose list may be out of position order
        self._group_ranks: list[int] = []  # a heap of the request ranks that have (or had) a list
        self._num_queued = 0  # cached hashes ranked ``(tick, 1)``: live in the queue
        self._clock = 0

    # -- the policy's ------------------------------------------------------------------------------------
    def _recording(self, a: Access) -> None:
        self._ranked(a)

    def _store(self, new: dict[int, int], a: Access) -> None:
        """Rank ``new`` as the request's, in bulk: a prefill stores hundreds at once."""
        keys = list(new)
        top = (a.rank << _SHIFT) + _TOP
        self._rank.update(zip(keys, [top - pos for pos in new.values()], strict=True))
        group = self._group(a.rank)
        if group and group[-1][0] > next(iter(new.values())):
            self._unsorted.add(a.rank)
        group += zip(new.values(), keys, strict=True)

    def _finish(self, a: Access) -> None:
        """Rank every block the request stored or reused anew, tail first (its head the most recent)."""
        lru, ranks = self._lru, self._rank
        keys = [h for h, _ in sorted(a.seen.items(), key=_position, reverse=True) if h in lru]
        for h in keys:
            if ranks[h] & _QUEUED == _QUEUED:  # ranked by tick already (reused, ranked after this request)
                self._unqueue(h)
        first = self._clock + 1
        self._clock += len(keys)
        ranks.update(zip(keys, [t << _SHIFT | _QUEUED for t in range(first, self._clock + 1)], strict=True))
        self._order += keys
        self._order_blocks += [lru[h] for h in keys]
        self._order_ticks += range(first, self._clock + 1)
        self._num_queued += len(keys)

    def _forget(self, a: Access) -> None:
        # every hash in its list is ranked anew or gone
        self._groups.pop(a.rank, None)
        self._unsorted.discard(a.rank)

    def _check_positions(self, stop: int) -> None:
        if stop > _TOP:
            raise ValueError(f"write-through tier: a request of {stop} blocks; ranks hold positions below {_TOP}")

    # -- ranks ---------------------------------------------------------------------------------------------
    def _ranked(self, a: Access) -> int:
        """The request's rank, taken from the clock when it first records a block (vLLM's request rank)."""
        if not a.rank:
            self._clock += 1
            a.rank = self._clock
        return a.rank

    def _reuse(self, a: Access, block_hash: int, pos: int) -> None:
        """Ranked no lower than the request's."""
        rank = self._ranked(a)
        if self._rank[block_hash] < _request_rank(rank, pos):
            self._to_group(block_hash, rank, pos)

    def _unqueue(self, block_hash: int) -> None:
        """The hash's live queue entry becomes stale (it is ranked by a request now, or evicted)."""
        block = self._lru[block_hash]
        self._stale[block] = self._stale.get(block, 0) + 1
        self._num_queued -= 1

    def _to_group(self, block_hash: int, rank: int, pos: int) -> None:
        """Rank the held hash ``(rank, -pos)``, as the running request ``rank``'s."""
        if self._rank[block_hash] & _QUEUED == _QUEUED:
            self._unqueue(block_hash)
        self._rank[block_hash] = _request_rank(rank, pos)
        group = self._group(rank)
        if group and group[-1][0] > pos:
            self._unsorted.add(rank)
        group.append((pos, block_hash))

    def _group(self, rank: int) -> list[tuple[int, int]]:
        """The running request ``rank``'s list of ``(position, hash)``, made if it has none."""
        group = self._groups.get(rank)
        if group is None:
            group = self._groups[rank] = []
            heapq.heappush(self._group_ranks, rank)
        return group

    def _oldest_group(self) -> int | None:
        """The lowest request rank whose list holds a live entry, its list sorted and its stale tail dropped
        (so its last entry is its lowest-ranked hash); None if no request holds one."""
        ranks, groups, order = self._rank, self._groups, self._group_ranks
        while order:
            r = order[0]
            group = groups.get(r)
            if group:
                if r in self._unsorted:
                    group.sort()
                    self._unsorted.discard(r)
                top = (r << _SHIFT) + _TOP
                while group and ranks.get(group[-1][1]) != top - group[-1][0]:
                    group.pop()
                if group:
                    return r
            groups.pop(r, None)
            self._unsorted.discard(r)
            heapq.heappop(order)
        return None

    def _evict(self, count: int, protected: set[int]) -> bool:
        """Drop the ``count`` lowest-ranked cached hashes outside ``protected`` (their blocks go to the free
        list); False, changing nothing, if there are fewer."""
        lru = self._lru
        if count > len(lru) - sum(1 for h in protected if h in lru):
            return False
        oldest_group = self._oldest_group()
        if count <= self._num_queued:
            oldest, blocks, head, left = self._oldest(count)
            if (oldest_group is None or self._order_ticks[head - 1] < oldest_group) \
                    and protected.isdisjoint(oldest):
                ranks = self._rank
                for h in oldest:
                    del lru[h]
                    del ranks[h]
                self._free += blocks
                self._dequeue_past(head, left)
                self._num_queued -= count
                self.evicted_blocks += count
                return True
        self._evict_merged(count, protected)
        return True

    def _evict_merged(self, count: int, protected: set[int]) -> None:
        """`_evict` merging the queue and the running requests' lists (there are enough outside
        ``protected``): the queue's next live entry or the oldest running request's tail, whichever ranks
        lower. A queue entry evicted behind a protected one is left there, stale."""
        self.evicted_blocks += count
        lru, ranks, free, stale = self._lru, self._rank, self._free, self._stale
        order, order_blocks, ticks = self._order, self._order_blocks, self._order_ticks
        i, left = self._head, {}  # the queue scan: position, and stale counts left to skip per block
        deferred: dict[int, list[tuple[int, int]]] = {}  # protected tails taken off their lists for now
        while count:
            while i < len(order):  # the next live entry outside ``protected``
                block = order_blocks[i]
                n = left.get(block, stale.get(block))
                if n:
                    left[block] = n - 1
                elif order[i] not in protected:
                    break
                i += 1
            r = self._oldest_group()
            if r is not None and (i == len(order) or r < ticks[i]):
                # the request's hashes all rank below the queue's next: take its tail, lowest first
                group, top = self._groups[r], (r << _SHIFT) + _TOP
                while group and count:
                    pos, h = group.pop()
                    if ranks.get(h) != top - pos:
                        continue  # stale
                    if h in protected:
                        deferred.setdefault(r, []).append((pos, h))
                        continue
                    del ranks[h]
                    free.append(lru.pop(h))
                    count -= 1
                continue
            h = order[i]
            block = order_blocks[i]
            stale[block] = stale.get(block, 0) + 1  # the block's last entry: the scan meets it no more
            self._num_queued -= 1
            i += 1
            del ranks[h]
            free.append(lru.pop(h))
            count -= 1
        for r, entries in deferred.items():
            self._group(r).extend(reversed(entries))
        self._drop_stale_head()

    def _drop_stale_head(self) -> None:
        """Dequeue the queue's leading stale entries."""
        order_blocks, stale = self._order_blocks, self._stale
        head, left = self._head, {}
        while head < len(order_blocks):
            block = order_blocks[head]
            n = left.get(block, stale.get(block))
            if not n:
                break
            left[block] = n - 1
            head += 1
        self._dequeue_past(head, left)

    def _dequeue(self, head: int) -> None:
        """`HostTier._dequeue`, the ticks with the hashes."""
        if head > 1024 and 2 * head > len(self._order):
            del self._order_ticks[:head]
        super()._dequeue(head)

    def _check_order(self) -> None:
        """Every cached hash has a rank; the queue holds a live entry, with its tick, for exactly those ranked by
        tick (the last entry of its block), and every other entry is counted stale; a running request's hash
        has a heap entry."""
        assert self._rank.keys() == self._lru.keys(), "write-through tier: ranks and cached hashes disagree"
        head = self._head
        assert len(self._order) == len(self._order_blocks) == len(self._order_ticks), "queue lists out of step"
        ticks = self._order_ticks[head:]
        assert ticks == sorted(set(ticks)), "write-through tier: queue ticks not increasing"
        last: dict[int, int] = {}
        entries: dict[int, int] = {}
        for i in range(head, len(self._order)):
            block = self._order_blocks[i]
            last[block] = i
            entries[block] = entries.get(block, 0) + 1
        queued = {h for h, r in self._rank.items() if r & _QUEUED == _QUEUED}
        assert len(queued) == self._num_queued, "write-through tier: queued hashes miscounted"
        for h in queued:
            i = last.get(self._lru[h])
            assert i is not None and self._order[i] == h and self._order_ticks[i] == self._rank[h] >> _SHIFT, \
                "write-through tier: a hash ranked by tick has no live queue entry"
        live_blocks = {self._lru[h] for h in queued}
        stale = {b: n - (b in live_blocks) for b, n in entries.items()}
        assert {b: n for b, n in stale.items() if n} == self._stale, "write-through tier: stale entries miscounted"
        for h, r in self._rank.items():
            if h not in queued:
                entry = (_TOP - (r & _QUEUED), h)
                assert entry in self._groups.get(r >> _SHIFT, ()), "write-through tier: a request's hash has no entry"
        if self.store_filter is not None:
            self.store_filter.check_invariants()
