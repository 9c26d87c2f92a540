"""The waiting queue's order: under ``priority`` lower value first, then earlier arrival, then workload row (a
fanned-out row's children as vLLM's child request ids sort), whatever order groups come in (arrivals, and preempted groups going back); under ``lpm`` SGLang's sort (most
cached first, ties in queue order, groups sharing a prefix with a group before them last, nothing sorted past
128 queued); under ``fcfs`` with vLLM 0.34's cache-aware window, the never-run groups in the window by cached
prefix once the pool is used past the threshold, every other group in its place."""

from __future__ import annotations

import numpy as np

from sim.kernel.sequence_group import SWAPPED, SequenceGroup
from sim.kernel.waiting_queue import LPM_SORT_LIMIT, WaitingQueue


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


def test_priority_queue_orders_a_rows_children_as_vllms_child_request_ids_sort():
    """vLLM's front end names child k of a request "k_<id>" and its priority heap breaks ties by request id, so
    twelve children tie on priority and arrival and are admitted as the strings sort: 0, 10, 11, 1, 2, ... (the
    victim among them is the first running: ``spec_cases.py``'s ``parallel_sampling_priority``)."""
    children = [SequenceGroup(5 + k, 5 + k, 1.0, 10, 5, priority=1, row=5, child=k) for k in range(12)]
    before = SequenceGroup(4, 4, 1.0, 10, 5, priority=1)
    after = SequenceGroup(17, 17, 1.0, 10, 5, priority=1, row=6)
    queue = WaitingQueue(priority=True)
    for g in [after, *reversed(children), before]:
        queue.enqueue(g)
    assert [g.index - 5 for g in queue][1:-1] == [0, 10, 11, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert queue[0] is before and queue[-1] is after


def test_fcfs_queue_appends_arrivals_and_puts_preempted_in_front():
    groups = [SequenceGroup(i, i, 0.0, 10, 5, priority=3 - i) for i in range(3)]
    queue = WaitingQueue()
    for g in groups:
        queue.enqueue(g)
    queue.requeue(queue.pop())
    assert [g.index for g in queue] == [2, 0, 1]


def lpm_queue(hashes: list[tuple[int, ...]]) -> WaitingQueue:
    queue = WaitingQueue(lpm=True)
    for i, h in enumerate(hashes):
        queue.enqueue(SequenceGroup(i, i, float(i), 16 * len(h) + 8, 5, hashes=h))
    return queue


def order(queue: WaitingQueue, cached: dict[int, int], gpu: dict[int, int] | None = None,
          block_size: int = 16) -> list[int]:
    """Sort ``queue`` with ``cached`` (a group's last hash -> its tokens cached, GPU and host) and ``gpu`` (their
    GPU part)."""
    gpu = cached if gpu is None else gpu
    queue.order_by_prefix(lambda h, n: (cached.get(h[-1], 0), gpu.get(h[-1], 0)), block_size)
    return [g.index for g in queue]


def test_lpm_sorts_most_cached_first_and_keeps_the_queue_order_for_ties():
    queue = lpm_queue([(1,), (2,), (3,), (4,)])
    assert order(queue, {3: 64}) == [2, 0, 1, 3]
    assert order(queue, {1: 64}) == [0, 2, 1, 3]  # ties: 2 before 1, as the queue had them
    assert order(queue, {}) == [0, 2, 1, 3]


def test_lpm_touches_every_sorted_group_the_head_last_in_one_call():
    """The sort's lookups count as use where the cache says so (`Allocator.touch_prefixes`): every group it
    ranks is touched, in the order it leaves the queue in but the head last (the admission that follows tries
    the head, and touches it again), in one call, the same at the next step."""
    queue = lpm_queue([(1,), (2,), (3,)])
    calls: list[list[int]] = []
    for _ in range(2):
        queue.order_by_prefix(lambda h, n: ({3: 64}.get(h[-1], 0),) * 2, 16,
                              lambda lookups: calls.append([h[-1] for h, _ in lookups]))
    assert [g.index for g in queue] == [2, 0, 1] and calls == [[1, 2, 3]] * 2


def test_lpm_sorts_last_a_group_sharing_a_prefix_with_one_before_it():
    """SGLang's in-batch prefix caching: 1 shares two blocks (32 tokens) with 0 and finds at most 32 tokens
    cached, so it waits for 0 to compute them, and so does 4; 3 shares one block (16 tokens, under 32) with 2;
    5 finds more than 32 tokens cached in GPU memory and is not checked."""
    queue = lpm_queue([(10, 11, 12), (10, 11, 13), (20, 21), (20, 22), (10, 11, 14), (10, 11, 15)])
    assert order(queue, {12: 16, 13: 16, 14: 32, 15: 48}) == [5, 0, 2, 3, 1, 4]
    queue = lpm_queue([(10, 11, 12), (10, 11, 13)])
    assert order(queue, {13: 48}) == [1, 0]  # 48 cached tokens > 32: not checked
    queue = lpm_queue([(10, 11, 12), (10, 11, 13)])
    assert order(queue, {13: 48}, gpu={13: 16}) == [0, 1]  # ... unless 32 of them are on the host: checked
    queue = lpm_queue([(10, 11, 12), (10, 11, 13), (10, 11, 14)])
    assert order(queue, {}, block_size=8) == [0, 1, 2]  # two shared blocks of 8: 16 tokens, under 32


def test_lpm_leaves_a_queue_of_more_than_128_as_it_is():
    queue = lpm_queue([(i,) for i in range(LPM_SORT_LIMIT + 1)])
    assert not queue.sorts_by_prefix and not queue.reorders
    assert order(queue, {LPM_SORT_LIMIT: 64}) == list(range(LPM_SORT_LIMIT + 1))
    queue.pop()
    assert queue.sorts_by_prefix and queue.reorders
    assert order(queue, {LPM_SORT_LIMIT - 1: 64})[0] == LPM_SORT_LIMIT - 1


def cache_aware_queue(window: int, threshold: float = 0.5) -> WaitingQueue:
    """Groups 0-7 queued in order, each with one hash: its index."""
    queue = WaitingQueue(cache_aware_window=window, cache_aware_threshold=threshold)
    for i in range(8):
        queue.enqueue(SequenceGroup(i, i, float(i), 100, 5, hashes=(i,)))
    return queue


def test_the_cache_aware_window_reorders_never_run_groups_by_their_gpu_hit():
    """The first 5 groups: 1 and 3 (64 and 32 tokens cached) go first, then 0, 2, 4 (none) in queue order; the
    preempted group 2 keeps its place, and 5-7, past the window, theirs (7 caches the most)."""
    queue = cache_aware_queue(5)
    queue[2].preemptions = 1
    cached = {1: 64, 3: 32, 7: 200}
    queue.order_cache_aware(0.5, lambda g: cached.get(g.index, 0))
    assert [g.index for g in queue] == [1, 3, 2, 0, 4, 5, 6, 7]
    assert queue.may_reorder_by_cache and queue.reorders


def test_the_cache_aware_window_waits_for_the_threshold_and_skips_what_holds_blocks():
    queue = cache_aware_queue(4, threshold=0.6)
    queue.order_cache_aware(0.59, lambda g: g.index)  # under the threshold: arrival order
    assert [g.index for g in queue] == list(range(8))
    queue.held = 1  # group 0 holds blocks (its host hits loaded): ahead of the window, which is groups 1-4
    queue[4].state = SWAPPED
    queue.order_cache_aware(0.6, lambda g: g.index)
    assert [g.index for g in queue] == [0, 3, 2, 1, 4, 5, 6, 7]


def test_the_cache_aware_window_is_fcfs_only():
    assert not WaitingQueue(priority=True, cache_aware_window=8).cache_aware_window
    queue = cache_aware_queue(2)
    queue[1].preemptions = 1  # one never-run group left in the window: nothing to reorder, a run may go on
    assert not queue.may_reorder_by_cache
