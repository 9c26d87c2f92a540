"""The queue of groups waiting to run, in the order the scheduling policy admits them.

FCFS (vLLM's default): arrivals join at the back, and a preempted group goes back in front, so it is the
first to be re-admitted. ``priority``: lower ``priority`` value first, then earlier arrival, then workload
position, as vLLM's priority queue orders requests; a preempted group goes back into its place in that order.
"""

from __future__ import annotations

from collections import deque

from sim.kernel.sequence_group import SequenceGroup


class WaitingQueue(deque):
    """A `deque` of `SequenceGroup` (the scheduler pops its head) that knows where a group goes in."""

    def __init__(self, priority: bool = False) -> None:
        super().__init__()
        self.priority = priority

    def enqueue(self, group: SequenceGroup) -> None:
        """Queue a group: at the back (FCFS), or before the first of lower priority."""
        if not self.priority:
            self.append(group)
            return
        key = (group.priority, group.arrival_s, group.index)
        for i, other in enumerate(self):
            if (other.priority, other.arrival_s, other.index) > key:
                self.insert(i, group)
                return
        self.append(group)

    def requeue(self, group: SequenceGroup) -> None:
        """A preempted group goes back in front of the queue (FCFS), or in priority order (priority)."""
        if self.priority:
            self.enqueue(group)
        else:
            self.appendleft(group)
