"""When each running group produces its last token: a heap of (last step, group index, epoch).

A group that stops, restarts or is deferred gets a new epoch, so its older entries go stale; they are skipped
(and dropped) when they reach the top instead of being searched for and removed.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

from sim.kernel.sequence_group import RUNNING, SequenceGroup


class Completions:
    """The completion heap of one scheduler."""

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, int]] = []

    def push(self, group: SequenceGroup) -> None:
        """The group, as it now runs (its ``base`` and ``epoch``), ends at step ``base + output - 1``."""
        heapq.heappush(self.heap, (group.base + group.output - 1, group.index, group.epoch))

    def next_due(self, live: dict[int, SequenceGroup]) -> int | None:
        """The earliest step at which a running group produces its last token (stale entries dropped)."""
        heap = self.heap
        while heap:
            due, index, epoch = heap[0]
            group = live.get(index)
            if group is not None and group.epoch == epoch and group.state == RUNNING:
                return due
            heapq.heappop(heap)
        return None

    def pop_before(self, step: int, live: dict[int, SequenceGroup],
                   running: Sequence[SequenceGroup] | None = None, since: int = 0) -> Iterator[SequenceGroup]:
        """The running groups whose last token came before ``step``, earliest first, and those of one step in
        their order in ``running`` (else by index), each checked as it is popped (finishing one may stop
        others); removes their entries. Why the running order: vLLM frees the requests a step finishes as it
        walks the step's scheduled requests, and the order of their freed blocks in the free queue decides
        which cached blocks are evicted first. ``since``: the first step just run; a group due before it
        (speculative drafts it accepted took it past its last token) finished in it."""
        heap = self.heap
        while heap and heap[0][0] < step:
            entries = [heapq.heappop(heap)]
            while heap and max(heap[0][0], since) == max(entries[0][0], since):
                entries.append(heapq.heappop(heap))
            if len(entries) > 1 and running is not None:  # rare: most steps finish at most one group
                place = {g.index: i for i, g in enumerate(running)}
                entries.sort(key=lambda entry: place.get(entry[1], len(place)))
            for _, index, epoch in entries:
                group = live.get(index)
                if group is not None and group.epoch == epoch and group.state == RUNNING:
                    yield group
