"""The queue of groups waiting to run, in the order the scheduling policy admits them.

FCFS (vLLM's default): arrivals join at the back, and a preempted group goes back in front, so it is the
first to be re-admitted. ``priority``: lower ``priority`` value first, then earlier arrival, then workload
row (a fanned-out row's children as vLLM's child request ids sort), as vLLM's priority queue orders requests; a
preempted group goes back into its place in that order.
``lpm`` (longest prefix match, SGLang's cache-aware policy, as its ``schedule_policy.py`` does it): before each
admission round the queue is sorted by the prompt tokens each group would find cached now
(`Allocator.num_cached_tokens`, GPU and host tier, no side effects), most first, in a stable sort (ties keep the
queue's order, which earlier sorts made). Two more of SGLang's rules:

- Past `LPM_SORT_LIMIT` (128) queued groups nothing is sorted ("turn off the expensive prefix matching and
  sorting when the #queue is large"): the queue keeps its order, new arrivals at the back, as FCFS.
  ``lpm_max_queue`` (``--lpm-max-queue``) sets another bound, 0 none: what the policy would do unbounded.
- In-batch prefix caching: going through the queue in order, a group that finds at most
  `IN_BATCH_CHECK_TOKENS` (32) tokens cached in GPU memory but shares at least
  `IN_BATCH_DEPRIORITIZE_TOKENS` (32) with a group before it that was checked and kept is sorted last (it will hit
  what that one computes); SGLang matches the queue token by token, kvsim by whole blocks (block hashes).

A swapped-out group (its KV waits in host memory; SGLang has no swap) goes first, as under FCFS.

``fcfs`` with vLLM 0.34's cache-aware admission (``--cache-aware-admission-window N``, `order_cache_aware`):
before each admission round, once the KV cache is at least ``--cache-aware-admission-threshold`` used, the
requests among the first ``N`` queued that have never run are reordered by the tokens they find cached in GPU
memory, most first, ties in queue order; every other group in the window (preempted, swapped) keeps its place.

Groups whose host-tier hits are loaded (``--offload-loads async``) hold KV blocks: they are the queue's head
(``held`` of them, in the order their loads ended), ahead of every other group under every policy, as vLLM drains
its ``kv_holding_waiting`` queue before its waiting one.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence

from sim.kernel.sequence_group import LOADED, SWAPPED, WAITING, SequenceGroup

LPM_SORT_LIMIT = 128
"""The most queued groups ``lpm`` sorts; past it the queue keeps its order (SGLang's
``SchedulePolicy._determine_active_policy``: the prefix matching of every queued request is too costly)."""
IN_BATCH_CHECK_TOKENS = 32
"""A group with at most this many tokens cached in GPU memory is matched against the groups before it (SGLang's
``IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD``)."""
IN_BATCH_DEPRIORITIZE_TOKENS = 32
"""A checked group sharing at least this many tokens with a kept one before it is sorted last (SGLang's
``IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD``)."""


def _priority_key(group: SequenceGroup) -> tuple[int, float, int, str]:
    """Where a group stands under ``priority``: lower value, then earlier arrival, then workload row, then (a
    fanned-out row's children) the order of vLLM's child request ids (`SequenceGroup.sibling_order`)."""
    return group.priority, group.arrival_s, group.row, group.sibling_order


class WaitingQueue(deque):
    """A `deque` of `SequenceGroup` (the scheduler pops its head) that knows where a group goes in."""

    def __init__(self, priority: bool = False, *, lpm: bool = False, lpm_max_queue: int = LPM_SORT_LIMIT,
                 cache_aware_window: int = 0, cache_aware_threshold: float = 0.5) -> None:
        super().__init__()
        self.priority = priority
        self.lpm = lpm
        self.lpm_max_queue = lpm_max_queue or 1 << 62  # 0: no bound
        self.held = 0  # the groups at the head that hold KV blocks (loaded host hits): the others queue behind
        # vLLM 0.34's cache-aware admission (FCFS only: its scheduler turns it off under priority)
        self.cache_aware_window = 0 if priority or lpm else cache_aware_window
        self.cache_aware_threshold = cache_aware_threshold

    def popleft(self) -> SequenceGroup:
        group = super().popleft()
        if self.held:
            self.held -= 1
        return group

    @property
    def sorts_by_prefix(self) -> bool:
        """Whether the next admission round sorts by cached prefix (``lpm`` with at most ``lpm_max_queue`` queued):
        a hit that changes can then re-sort the queue, so the decode fast-forward ends a run where one may."""
        return self.lpm and len(self) <= self.lpm_max_queue

    @property
    def reorders(self) -> bool:
        """Whether an arrival can go ahead of a head refused memory (and may fit): the decode fast-forward then
        ends a run at every arrival, not only while the queue is empty. A run adds no group to the queue but
        arrivals, which end it here, so what this says at a run's start holds to its end."""
        return self.priority or self.sorts_by_prefix or self.cache_aware_window > 0

    def _cache_aware_slots(self) -> list[int]:
        """The places in the cache-aware window (the first ``cache_aware_window`` groups after those holding
        blocks, vLLM's ``waiting`` queue) of the groups that have never run: vLLM reorders requests in status
        ``WAITING`` that have computed nothing, and a preempted one is ``PREEMPTED``."""
        held = self.held
        return [i for i in range(held, min(len(self), held + self.cache_aware_window))
                if self[i].state == WAITING and not self[i].preemptions]

    @property
    def may_reorder_by_cache(self) -> bool:
        """Whether a later step's cache-aware admission may reorder the queue (two groups in the window that
        have never run): the decode fast-forward then steps, as the KV cache's use and hits change within a run."""
        return self.cache_aware_window > 0 and len(self._cache_aware_slots()) >= 2

    def order_cache_aware(self, usage: float, gpu_cached: Callable[[SequenceGroup], int]) -> None:
        """vLLM 0.34's ``Scheduler._reorder_waiting_by_cached_prefix``, before an admission round: with the KV
        cache at least ``cache_aware_threshold`` used (``usage``), the window's groups that have never run
        (`_cache_aware_slots`) take their places again in order of the tokens they find cached in GPU memory
        (``gpu_cached``: vLLM's ``get_num_cached_tokens``, no side effects), most first, ties in queue order."""
        if not self.cache_aware_window or len(self) - self.held < 2 or usage < self.cache_aware_threshold:
            return
        slots = self._cache_aware_slots()
        if len(slots) < 2:
            return
        cached = {i: gpu_cached(self[i]) for i in slots}
        order = sorted(slots, key=lambda i: (-cached[i], i))
        if order != slots:
            groups = [self[i] for i in order]
            for i, group in zip(slots, groups, strict=True):
                self[i] = group

    def enqueue(self, group: SequenceGroup) -> None:
        """Queue a group: at the back (FCFS), or before the first of lower priority.

        Under ``priority`` the queue is always in that order (only this method puts groups in), so the place
        is a binary search: a few keys read where a scan read a hundred (a long queue under overload)."""
        if not self.priority:
            self.append(group)
            return
        self.insert(bisect_right(self, _priority_key(group), lo=self.held, key=_priority_key), group)

    def requeue(self, group: SequenceGroup) -> None:
        """A preempted group goes back in front of the queue (FCFS; behind the groups holding blocks), or in
        priority order (priority)."""
        if self.priority:
            self.enqueue(group)
        else:
            self.insert(self.held, group)

    def hold(self, group: SequenceGroup) -> None:
        """A group that holds KV blocks (its host hits loaded) joins the head, behind those there already."""
        self.insert(self.held, group)
        self.held += 1

    def order_by_prefix(self, cached_split: Callable[[Sequence[int], int], tuple[int, int]],
                        block_size: int,
                        touch: Callable[[Sequence[tuple[Sequence[int], int]]], None] | None = None) -> None:
        """Sort for ``lpm`` (the module doc): swapped-out groups first, then most prompt tokens cached, the
        groups the in-batch check defers last, ties in queue order; nothing past ``lpm_max_queue`` groups.
        ``cached_split(hashes, prompt)``: the tokens a group would find cached, and the part in GPU memory.
        ``touch(lookups)``: the lookups' side effect on the cache (`Allocator.touch_prefixes`), for every
        group in the sorted order but the head last: SGLang stamps the groups as it matches them, in the
        queue's order before the sort (the last step's sorted order, as a rule), and the admission that
        follows tries the head and stamps it again. Touched as that comes out, and in one call, the next
        step's touches change nothing when nothing else did: a decode run that skips the sorts leaves the
        cache as stepping would."""
        if len(self) < 2 or not self.sorts_by_prefix:
            return
        keys: dict[int, float] = {}
        kept: set[int] = set()  # block hashes of the checked groups not deferred (SGLang's waiting-queue tree)
        for g in self:
            if g.state == SWAPPED or g.state == LOADED:  # (a stable sort keeps the loaded ones, the head, first)
                keys[g.index] = -math.inf
                continue
            cached, gpu = cached_split(g.hashes, g.prompt)
            keys[g.index] = -cached
            if gpu > IN_BATCH_CHECK_TOKENS:
                continue
            shared = 0
            for h in g.hashes:
                if h not in kept:
                    break
                shared += 1
            if shared * block_size >= IN_BATCH_DEPRIORITIZE_TOKENS:
                keys[g.index] = math.inf
            else:
                kept.update(g.hashes)
        groups = sorted(self, key=lambda g: keys[g.index])
        self.clear()
        self.extend(groups)
        if touch is not None:
            touch([(g.hashes, g.prefill_target) for g in groups[1:] + groups[:1] if g.state != SWAPPED])
