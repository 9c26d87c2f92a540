"""The free-block queue of the paged allocators: block ids in eviction order, moved in bulk.

Why this order: the queue *is* the eviction order. New blocks are popped from the head (least recently
freed); freed blocks with a cached hash are appended at the tail, so a cached block survives as long as
possible, and freed blocks without one are put back at the head (`prepend_many`), to be reused first. vLLM
v1's ``FreeKVCacheBlockQueue`` and ``BlockPool.free_blocks`` make the same choices.

Why not a linked list (vLLM's, and this module's first form): almost all traffic is whole runs of blocks (a
request's ~750 pages popped at admission, its table handed back when it finishes), and a linked list costs
a few Python-level link writes per block. Here the queue is one Python list read from index ``lo`` on, so a
run is popped with one slice and put back with one slice assignment (at the head, into room kept in front
of ``lo``) or ``list.extend`` (at the tail). What stays per block is a store into ``pos`` (the block's
place, for `remove` and ``in``) when it is appended, done by numpy for the whole run (an int64 array: no
Python int is made or freed per block)::

    items:  . . . . | b3  b7  --  b1  b9      lo = 4; '--' a hole: b5 was removed (a prefix-cache hit)
    popleft() -> b3;  prepend_many([b2]): b2 goes into the slot before lo;  append(b4): after b9

A hit takes a block out of the middle in O(1) by leaving a hole (`_HOLE`) that pops skip; holes are swept
out when they outnumber the queued blocks, so they cost O(1) amortised. A popped block's ``pos`` is left
stale rather than cleared (a bulk pop writes nothing per block): a block is queued exactly when the slot
its ``pos`` names lies at or after ``lo`` and holds it. ``pos`` counts in *virtual* indices (the list index
plus ``base``), so making room in front of the list or dropping its popped part moves no ``pos``.

Blocks put back at the head by the pool (`prepend_released`) get no ``pos`` at all: they carry no cached
hash, so nothing looks them up before they are popped again, soon. Until the next full reindex the queue
then knows it is *partly indexed*: a ``pos`` that names the right slot is still proof, and a ``pos`` that
does not sends ``in`` and `remove` to `_reindex` (one pass over the queue) before they answer. The
simulator never takes that path (it removes only cached blocks, which were appended); audits and tests do.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

_HOLE = -1
"""A removed block's slot: skipped by pops and iteration."""
_NEVER = -(1 << 62)
"""``pos`` of a block never queued: before any slot."""


class FreeBlockQueue:
    """Free block ids in eviction order (head first). ``num_free`` is kept exact on every operation."""

    __slots__ = ("_items", "_lo", "_base", "_pos", "_holes", "_room", "_drop_at", "_indexed", "num_free")

    def __init__(self, num_blocks: int, block_ids: Iterable[int] = ()) -> None:
        """A queue able to hold ids ``0 .. num_blocks-1``, initially holding ``block_ids`` in that order."""
        self._room = num_blocks + 16  # free slots kept in front of the head when the list is rebuilt
        self._drop_at = 3 * self._room  # a head index past which the popped part is dropped
        self._items: list[int] = [_HOLE] * self._room
        self._lo = self._room
        self._base = 0
        self._pos = np.full(num_blocks, _NEVER, dtype=np.int64)  # numpy: a bulk store, no int objects
        self._holes = 0  # holes at or after lo
        self._indexed = True  # every queued block's pos is right (else: those put back by prepend_released may not be)
        self.num_free = 0
        self.extend(block_ids)

    def __len__(self) -> int:
        return self.num_free

    def __contains__(self, block_id: int) -> bool:
        i = self._pos.item(block_id) - self._base
        if self._lo <= i < len(self._items) and self._items[i] == block_id:
            return True
        if self._indexed:
            return False
        self._reindex()
        return block_id in self

    def __iter__(self) -> Iterator[int]:
        """Free ids from head (next to be evicted) to tail."""
        items = self._items[self._lo:]
        return iter([b for b in items if b != _HOLE] if self._holes else items)

    def popleft(self) -> int:
        """Remove and return the head: the block to hand out (and evict from the cache) next."""
        if not self.num_free:
            raise IndexError("no free blocks")
        items, lo = self._items, self._lo
        block_id = items[lo]
        while block_id == _HOLE:
            self._holes -= 1
            lo += 1
            block_id = items[lo]
        self._lo = lo + 1
        self.num_free -= 1
        if lo > self._drop_at:
            self._rebuild()
        return block_id

    def pop_many(self, count: int) -> list[int]:
        """Remove and return the ``count`` blocks at the head, in order (one call for a whole admission)."""
        if count > self.num_free:
            raise IndexError(f"{count} blocks asked for but {self.num_free} free")
        items, lo = self._items, self._lo
        hi = lo + count
        out = items[lo:hi]
        if self._holes:
            holes = out.count(_HOLE)
            if holes:
                skipped = 0
                while holes:  # take one more slot for every hole taken, until the slots taken hold no hole
                    skipped += holes
                    more = items[hi:hi + holes]
                    hi += holes
                    holes = more.count(_HOLE)
                    out += more
                self._holes -= skipped
                out = [b for b in out if b != _HOLE]
        self._lo = hi
        self.num_free -= count
        if hi > self._drop_at:  # the list grows at the tail as blocks are appended: drop its popped part
            self._rebuild()
        return out

    def peek(self, count: int) -> list[int]:
        """The ``count`` blocks `pop_many` would return (fewer if fewer are free), leaving the queue as it is."""
        items, i, stop = self._items, self._lo, len(self._items)
        out: list[int] = []
        while len(out) < count and i < stop:
            if items[i] != _HOLE:
                out.append(items[i])
            i += 1
        return out

    def remove(self, block_id: int) -> None:
        """Take a block out of anywhere in the queue (a prefix-cache hit on a free block)."""
        i = self._pos.item(block_id) - self._base
        if not (self._lo <= i < len(self._items) and self._items[i] == block_id):  # `in` (it may reindex)
            if block_id not in self:
                raise ValueError(f"block {block_id} is not in the free queue")
            i = self._pos.item(block_id) - self._base
        self._items[i] = _HOLE
        self._holes += 1
        self.num_free -= 1
        if self._holes > self.num_free + 64:
            self._rebuild()

    def append(self, block_id: int) -> None:
        """Put a freed block at the tail: it is evicted last."""
        self.extend((block_id,))

    def extend(self, block_ids: Iterable[int]) -> None:
        """`append` each block in order; a block queued already stops it with ValueError after the blocks
        before it were appended."""
        block_ids = list(block_ids)
        seen: set[int] = set()
        for i, b in enumerate(block_ids):
            if b in self or b in seen:
                self.extend_released(block_ids[:i])
                raise ValueError(f"block {b} is already in the free queue")
            seen.add(b)
        self.extend_released(block_ids)

    def extend_released(self, block_ids: list[int]) -> None:
        """`extend` without the per-block check: the caller knows none of ``block_ids`` is queued and none
        repeats (the pool: their reference counts just fell to zero)."""
        items = self._items
        v, n = len(items) + self._base, len(block_ids)
        items += block_ids
        if n > 64:
            self._pos[np.fromiter(block_ids, np.intp, n)] = np.arange(v, v + n)
        else:  # a few blocks: numpy's per-call cost would exceed the scalar stores
            pos = self._pos
            for b in block_ids:
                pos[b] = v
                v += 1
        self.num_free += len(block_ids)

    def move_to_tail(self, block_ids: list[int]) -> None:
        """Move queued blocks to the tail, in this order, as if they had just been released (a radix lookup
        stamping waiting requests' cached paths, `RadixAllocator.touch_prefixes`). A no-op where they are the
        tail already in this order, which a request looked up at every step finds them."""
        n, items = len(block_ids), self._items
        if not n or (len(items) - self._lo >= n and items[-n:] == block_ids):
            return
        for b in block_ids:
            self.remove(b)
        self.extend_released(block_ids)

    def prepend_many(self, block_ids: list[int]) -> None:
        """Put blocks at the head, the first of ``block_ids`` first: freed blocks without a cached hash are
        handed out again before any cached block is evicted (vLLM's ``prepend_n``)."""
        queued = [b for b in block_ids if b in self]
        if queued or len(set(block_ids)) < len(block_ids):  # checked first: a bad id changes nothing
            bad = queued[0] if queued else next(b for i, b in enumerate(block_ids) if b in block_ids[:i])
            raise ValueError(f"block {bad} is already in the free queue")
        self.prepend_released(block_ids)

    def prepend_released(self, block_ids: list[int]) -> None:
        """`prepend_many` without the per-block check (see `extend_released`) and without ``pos``: blocks
        without a cached hash, which nothing looks up before they are popped again (see the module doc)."""
        n = len(block_ids)
        if n > self._lo:
            self._rebuild(n)
        lo = self._lo - n
        self._items[lo:lo + n] = block_ids
        self._lo = lo
        self._indexed = False
        self.num_free += n

    def _reindex(self) -> None:
        """Give every queued block its ``pos`` (after `prepend_released` left some without)."""
        self._index(self._items[self._lo:], self._lo + self._base)
        self._indexed = True

    def _index(self, slots: list[int], v: int) -> None:
        """Set ``pos`` of every block in ``slots`` (holes skipped), the first slot's virtual index being ``v``."""
        ids = np.array(slots, dtype=np.int64)
        at = np.arange(v, v + len(ids))
        kept = ids != _HOLE
        self._pos[ids[kept]] = at[kept]

    def _rebuild(self, room: int = 0) -> None:
        """Copy the queue into a fresh list with ``room`` + the usual free slots in front of the head; holes
        are swept out if there are any (then every queued block's ``pos`` is rewritten), else no ``pos``
        changes (``base`` absorbs the shift)."""
        lead = self._room + room
        live = self._items[self._lo:]
        if self._holes:
            live = [b for b in live if b != _HOLE]
            self._holes = 0
            self._base = -lead
            self._index(live, 0)
            self._indexed = True
        else:
            self._base += self._lo - lead
        self._items = [_HOLE] * lead + live
        self._lo = lead

    def check(self) -> list[int]:
        """Assert the list, the holes, ``pos`` and ``num_free`` agree; return the ids, head first."""
        tail = self._items[self._lo:]
        assert tail.count(_HOLE) == self._holes, f"free queue: {tail.count(_HOLE)} holes but {self._holes} counted"
        forward = [b for b in tail if b != _HOLE]
        assert len(forward) == self.num_free, f"free queue: {len(forward)} queued but num_free={self.num_free}"
        assert len(set(forward)) == len(forward), "free queue: a block is queued twice"
        assert all(0 <= b < len(self._pos) for b in forward), "free queue: a block id out of range"
        for i, b in enumerate(tail, self._lo):
            stale = b != _HOLE and self._pos.item(b) - self._base != i
            assert not (stale and self._indexed), f"free queue: block {b}'s position is stale"
        queued = set(forward)
        assert all((b in self) == (b in queued) for b in range(len(self._pos))), "free queue: membership wrong"
        return forward
