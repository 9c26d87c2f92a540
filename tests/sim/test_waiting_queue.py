"""The waiting queue's order under ``priority``: lower value first, then earlier arrival, then workload position,
whatever order groups come in (arrivals, and preempted groups going back)."""

from __future__ import annotations

import numpy as np

from sim.kernel.sequence_group import SequenceGroup
from sim.kernel.waiting_queue import WaitingQueue


def test_priority_queue_keeps_vllms_order_for_any_insertion_order():
    rng = np.random.default_rng(7)
    groups = [SequenceGroup(i, i, float(rng.integers(0, 20)), 10, 5, priority=int(rng.integers(0, 4)))
              for i in range(300)]
    queue = WaitingQueue(priority=True)
    for i in rng.permutation(len(groups)):
        queue.enqueue(groups[i])
        if rng.random() < 0.2:  # the head admitted, and a preempted one back in its place
            queue.requeue(queue.popleft())
    expected = sorted(groups, key=lambda g: (g.priority, g.arrival_s, g.index))
    assert [g.index for g in queue] == [g.index for g in expected]


def test_fcfs_queue_appends_arrivals_and_puts_preempted_in_front():
    groups = [SequenceGroup(i, i, 0.0, 10, 5, priority=3 - i) for i in range(3)]
    queue = WaitingQueue()
    for g in groups:
        queue.enqueue(g)
    queue.requeue(queue.pop())
    assert [g.index for g in queue] == [2, 0, 1]
