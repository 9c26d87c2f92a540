"""The queue of groups waiting to run, in the order the scheduling policy admits them.

FCFS (vLLM's default): arrivals join at the back, and a preempted group goes back in front, so it is the
first to be re-admitted. ``priority``: lower ``priority`` value first, then earlier arrival, then workload
position, as vLLM's priority queue orders requests; a preempted group goes back into its place in that order.
``lpm`` (longest prefix match, SGLang's cache-aware policy): before each admission round the queue is sorted by
the prompt tokens each group would find cached now (`Allocator.num_cached_tokens`, no side effects), most
first; ties keep arrival order (arrival time, then workload position), so the order is deterministic. A
swapped-out group (its KV waits in host memory) goes first, as under FCFS.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence

from sim.kernel.sequence_group import SWAPPED, SequenceGroup


def _priority_key(group: SequenceGroup) -> tuple[int, float, int]:
    """Where a group stands under ``priority``: lower value, then earlier arrival, then workload position."""
    return group.priority, group.arrival_s, group.index


class WaitingQueue(deque):
    """A `deque` of `SequenceGroup` (the scheduler pops its head) that knows where a group goes in."""

    def __init__(self, priority: bool = False, *, lpm: bool = False) -> None:
        super().__init__()
        self.priority = priority
        self.lpm = lpm
        # whether an arrival can go ahead of a head refused memory (and may fit): the decode fast-forward then
        # ends a run at every arrival, not only while the queue is empty
        self.reorders = priority or lpm

    def enqueue(self, group: SequenceGroup) -> None:
        """Queue a group: at the back (FCFS), or before the first of lower priority.

        Under ``priority`` the queue is always in that order (only this method puts groups in), so the place
        is a binary search: a few keys read where a scan read a hundred (a long queue under overload)."""
        if not self.priority:
            self.append(group)
            return
        self.insert(bisect_right(self, _priority_key(group), key=_priority_key), group)

    def requeue(self, group: SequenceGroup) -> None:
        """A preempted group goes back in front of the queue (FCFS), or in priority order (priority)."""
        if self.priority:
            self.enqueue(group)
        else:
            self.appendleft(group)

    def order_by_prefix(self, cached_tokens: Callable[[Sequence[int], int], int]) -> None:
        """Sort for ``lpm``: swapped-out groups first, then most prompt tokens cached (``cached_tokens(hashes,
        prompt)``), then arrival order."""
        if len(self) < 2:
            return
        groups = sorted(self, key=lambda g: (g.state != SWAPPED, -cached_tokens(g.hashes, g.prompt), g.arrival_s,
                                             g.index))
        self.clear()
        self.extend(groups)
