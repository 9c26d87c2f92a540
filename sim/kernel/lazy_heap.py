"""Heaps with lazy deletion: entries are (key, id) pairs, and an entry counts only while ``current[id] == key``.

Why: the decode set's sync deadlines and the sliding-window exits move often (a sync, a deferral, a departure);
pushing a new entry and leaving the old one stale is O(log n) where finding and removing the old one is O(n).
"""

from __future__ import annotations

import heapq


def earliest(heap: list[tuple[int, int]], current: dict[int, int]) -> int | None:
    """The smallest key of a current entry, or None; stale entries on top are dropped on the way."""
    while heap:
        key, item = heap[0]
        if current.get(item) == key:
            return key
        heapq.heappop(heap)
    return None
