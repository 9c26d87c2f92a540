"""The free-block queue of the paged allocators: an intrusive doubly linked list over block ids.

Why a linked list and not a deque: with prefix caching a free block may still be *hit* by a new request
(its hash survives until the block is handed out again), and a hit must take that block out of the middle
of the queue in O(1). Why this order: the queue *is* the eviction order. New blocks are popped from the
head (least recently freed); freed blocks with a cached hash are appended at the tail, so a cached block
survives as long as possible, and freed blocks without one are put back at the head (`prepend_many`), to be
reused first. vLLM v1's ``FreeKVCacheBlockQueue`` and ``BlockPool.free_blocks`` make the same choices.

The links live in two int lists indexed by block id (``prev``/``next``), not in per-block objects, so
popping or appending touches a handful of list slots and allocates nothing. Two sentinel ids (``num_blocks``
for the head, ``num_blocks + 1`` for the tail) remove the empty-list special cases::

    HEAD <-> b3 <-> b7 <-> b1 <-> TAIL      popleft() -> b3;  append(b9): ... b1 <-> b9 <-> TAIL
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

_NOT_QUEUED = -1


class FreeBlockQueue:
    """Free block ids in eviction order (head first). ``num_free`` is kept exact on every operation."""

    __slots__ = ("_prev", "_next", "_head", "_tail", "num_free")

    def __init__(self, num_blocks: int, block_ids: Iterable[int] = ()) -> None:
        """A queue able to hold ids ``0 .. num_blocks-1``, initially holding ``block_ids`` in that order."""
        self._head = num_blocks
        self._tail = num_blocks + 1
        self._prev = [_NOT_QUEUED] * (num_blocks + 2)
        self._next = [_NOT_QUEUED] * (num_blocks + 2)
        self._next[self._head] = self._tail
        self._prev[self._tail] = self._head
        self.num_free = 0
        for block_id in block_ids:
            self.append(block_id)

    def __len__(self) -> int:
        return self.num_free

    def __contains__(self, block_id: int) -> bool:
        return self._prev[block_id] != _NOT_QUEUED

    def __iter__(self) -> Iterator[int]:
        """Free ids from head (next to be evicted) to tail."""
        nxt, tail = self._next, self._tail
        block_id = nxt[self._head]
        while block_id != tail:
            yield block_id
            block_id = nxt[block_id]

    def popleft(self) -> int:
        """Remove and return the head: the block to hand out (and evict from the cache) next."""
        nxt, head = self._next, self._head
        block_id = nxt[head]
        if block_id == self._tail:
            raise IndexError("no free blocks")
        after = nxt[block_id]  # `remove` inlined: this is the allocator's per-block hot path
        nxt[head] = after
        prev = self._prev
        prev[after] = head
        prev[block_id] = nxt[block_id] = _NOT_QUEUED
        self.num_free -= 1
        return block_id

    def pop_many(self, count: int) -> list[int]:
        """Remove and return the ``count`` blocks at the head, in order (one call for a whole admission)."""
        if count > self.num_free:
            raise IndexError(f"{count} blocks asked for but {self.num_free} free")
        nxt, prev, head = self._next, self._prev, self._head
        out = []
        block_id = nxt[head]
        for _ in range(count):
            out.append(block_id)
            after = nxt[block_id]
            prev[block_id] = nxt[block_id] = _NOT_QUEUED
            block_id = after
        nxt[head] = block_id
        prev[block_id] = head
        self.num_free -= count
        return out

    def remove(self, block_id: int) -> None:
        """Unlink a block from anywhere in the queue (a prefix-cache hit on a free block)."""
        prev, nxt = self._prev, self._next
        before, after = prev[block_id], nxt[block_id]
        if before == _NOT_QUEUED:
            raise ValueError(f"block {block_id} is not in the free queue")
        nxt[before] = after
        prev[after] = before
        prev[block_id] = nxt[block_id] = _NOT_QUEUED
        self.num_free -= 1

    def append(self, block_id: int) -> None:
        """Put a freed block at the tail: it is evicted last."""
        prev, nxt, tail = self._prev, self._next, self._tail
        if prev[block_id] != _NOT_QUEUED:
            raise ValueError(f"block {block_id} is already in the free queue")
        last = prev[tail]
        nxt[last] = block_id
        prev[block_id] = last
        nxt[block_id] = tail
        prev[tail] = block_id
        self.num_free += 1

    def extend(self, block_ids: Iterable[int]) -> None:
        """`append` each block in order (one call for a whole freed sequence)."""
        prev, nxt, tail = self._prev, self._next, self._tail
        last = prev[tail]
        added = 0
        try:
            for block_id in block_ids:
                if prev[block_id] != _NOT_QUEUED:
                    raise ValueError(f"block {block_id} is already in the free queue")
                nxt[last] = block_id
                prev[block_id] = last
                last = block_id
                added += 1
        finally:  # close the chain over what was linked, even when a bad id stopped it
            nxt[last] = tail
            prev[tail] = last
            self.num_free += added

    def prepend_many(self, block_ids: list[int]) -> None:
        """Put blocks at the head, the first of ``block_ids`` first: freed blocks without a cached hash are
        handed out again before any cached block is evicted (vLLM's ``prepend_n``)."""
        nxt, prev, head = self._next, self._prev, self._head
        queued = [b for b in block_ids if prev[b] != _NOT_QUEUED]
        if queued:  # checked before any link changes, so a bad id leaves the queue as it was
            raise ValueError(f"block {queued[0]} is already in the free queue")
        first = nxt[head]
        last = head
        for block_id in block_ids:
            nxt[last] = block_id
            prev[block_id] = last
            last = block_id
        nxt[last] = first
        prev[first] = last
        self.num_free += len(block_ids)

    def check(self) -> list[int]:
        """Walk the links both ways, assert they agree with each other and with ``num_free``; return the ids."""
        forward = list(self)
        backward = []
        block_id = self._prev[self._tail]
        while block_id != self._head:
            backward.append(block_id)
            block_id = self._prev[block_id]
            assert len(backward) <= self.num_free, "free queue: backward walk longer than num_free"
        assert forward == backward[::-1], "free queue: forward and backward links disagree"
        assert len(forward) == self.num_free, f"free queue: {len(forward)} linked but num_free={self.num_free}"
        assert len(set(forward)) == len(forward), "free queue: a block is linked twice"
        linked = {b for b in range(len(self._prev) - 2) if self._prev[b] != _NOT_QUEUED}
        assert linked == set(forward), "free queue: stale links on blocks outside the queue"
        return forward
