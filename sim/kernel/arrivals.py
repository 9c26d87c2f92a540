"""`ArrivalSource`: turns a workload's rows into `SequenceGroup`s at their arrival times.

Open loop: rows arrive at their ``arrival_time_s``. Closed loop (`workloads.workload.ClosedLoop`): ``users``
requests are in flight at once; when one finishes (or is rejected) the next row arrives ``think_time_s``
later, so arrival times come from the simulation itself and are recorded as they happen. Sessions
(`workloads.sessions`): a turn with a think time arrives that long after its previous turn finished (or was
rejected); every other row arrives at its ``arrival_time_s``. Rows due at the same time arrive in row order.

Prefix identities (``block_hashes``) are only computed when the allocator can use them (a paged allocator
with prefix caching, or one with shared-prefix registration): building them costs a `Request` per row. With
prefix caching every request also gets hashes for its own blocks (`own_block_hashes`).
"""

from __future__ import annotations

import heapq

import numpy as np

from sim.kernel.sequence_group import SequenceGroup
from workloads.sessions import closed_loop_turns

_OWN_BASE = 1 << 62
"""Ids of a request's own blocks: ``_OWN_BASE + (index << 24) + block``, unique per request and block. They
share the 63-bit range of content hashes, where a collision is as unlikely as between two content hashes."""
_SIBLING_BASE = _OWN_BASE + (1 << 61)
"""Ids of the prompt blocks the children of a fanned-out request share (`sim.kernel.parallel_sampling`):
``_SIBLING_BASE + (row << 24) + block``, by the row they came from; above every own block's id."""


ARRIVAL_TIE_S = 1e-9
"""An arrival this close after a step's start counts as at it, so the step sees it. Step starts are sums of
step durations, added one step at a time or taken in closed form by the decode fast-forward, which round
differently: an arrival that falls exactly on a step's start (constant step times against constant arrivals or
think times) would land on either side of it by rounding, and the two modes would admit it a step apart."""


def released_at(t: float) -> float:
    """A release time (a finish plus a think time) on the whole nanosecond (`ARRIVAL_TIE_S`): a finish comes
    from a step's end, which the two modes round differently, so an exact tie with another arrival (a
    constant step time against constant arrivals) would be ordered either way by rounding."""
    return round(t, 9)


def own_block_hashes(index: int, start: int, tokens: int, block_size: int, base: int = _OWN_BASE) -> tuple[int, ...]:
    """Ids of blocks ``start ..`` of a request's ``tokens`` tokens, unique to the request (workload position
    ``index``): vLLM hashes every full block a request computes, generated tokens included, so a request
    recomputed after preemption hits whichever of its own blocks are still cached. A block past the shared
    prefix is the request's own, and so is every block after it (hashes are chained), so nothing else can
    hold the same id."""
    base += index << 24
    return tuple(range(base + start, base + tokens // block_size))


def first_arrival_s(workload) -> float:
    """When a run of ``workload`` starts: its first arrival, or 0 for a closed loop, whose users all send
    their first requests at the start (its arrival times are only an order)."""
    if not len(workload) or getattr(workload, "closed_loop", None) is not None:
        return 0.0
    return float(workload.arrival_time_s[0])


def releases_arrivals(workload) -> bool:
    """Whether some of ``workload``'s arrivals are released by earlier requests leaving (a closed loop, or
    session turns with a think time), so that their times are known only as the simulation runs."""
    if getattr(workload, "closed_loop", None) is not None:
        return True
    return bool(getattr(workload, "has_sessions", False) and closed_loop_turns(workload)[1].any())


class ArrivalSource:
    """Delivers requests due at or before a time; knows the next arrival time."""

    def __init__(self, workload, *, block_size: int, want_hashes: bool, start_s: float = 0.0,
                 own_identity: bool = False, lookahead_hashes: bool = False) -> None:
        self.workload = workload
        self.lookahead_hashes = lookahead_hashes  # vLLM's num_hash_lookahead_tokens 1 (`make_group`)
        self.size = len(workload)
        self.cursor = 0
        self.block_size = block_size
        self.times = workload.arrival_time_s
        self.closed = getattr(workload, "closed_loop", None)
        self.own_identity = own_identity
        self.want_hashes = want_hashes and (own_identity or self._has_identity(workload))
        self.anonymous = self._anonymous(workload) if self.want_hashes else None
        self.rows = getattr(workload, "fan_parent", None)  # a fanned-out workload: the row each came from
        # (`sim.kernel.parallel_sampling`), and which rows have siblings (came from a row sampled more than once)
        self.fanned = np.bincount(self.rows)[self.rows] > 1 if self.rows is not None and self.want_hashes else None
        # each request's number among its row's children (rows are sorted: a row's children are consecutive)
        self.child = None if self.rows is None else np.arange(len(self.rows)) - np.searchsorted(self.rows, self.rows)
        self.samples = None if self.rows is None else np.bincount(self.rows)[self.rows]  # its row's children
        self.ready: list[float] = []  # closed loop: heap of the times users send their next requests
        if self.closed is not None:
            self.ready = [start_s] * min(self.closed.users, self.size)
        self.arrival_s = np.array(self.times, dtype=np.float64)  # actual arrivals (closed loop fills them in)
        self.sessions = bool(getattr(workload, "has_sessions", False))
        self.next_turn, released = closed_loop_turns(workload) if self.sessions else (None, None)
        self.sessions = self.sessions and bool(released.any())
        if self.sessions:  # rows arriving on their own, in order, and released turns due, as a heap
            self.scheduled = np.flatnonzero(~released)
            self.position = 0
            self.due: list[tuple[float, int]] = []

    @classmethod
    def for_memory(cls, workload, memory, *, start_s: float = 0.0, lookahead_hashes: bool = False) -> ArrivalSource:
        """The source an allocator needs: with prefix caching, shared-prefix hashes and every request's own
        block ids (vLLM v1 hashes every full block); with shared-prefix registration (paged-cow), the shared
        prefixes; otherwise none. ``lookahead_hashes``: a speculative drafter's (`make_group`)."""
        caching = memory.prefix_caching  # block size 1 included: radix's token-granular tree needs them
        return cls(workload, block_size=memory.block_size, want_hashes=caching or memory.shares_prefixes,
                   start_s=start_s, own_identity=caching, lookahead_hashes=lookahead_hashes and caching)

    @staticmethod
    def _has_identity(workload) -> bool:
        groups = getattr(workload, "prefix_group", None)
        has_groups = groups is not None and bool((np.asarray(groups) >= 0).any())
        return has_groups or bool(getattr(workload, "has_prefix_hashes", False) or
                                  getattr(workload, "has_sessions", False))

    @staticmethod
    def _anonymous(workload) -> np.ndarray:
        """Rows with no prefix identity (no prefix group, prefix hashes or session): their only hashes are
        their own blocks', so no `Request` need be built to find them."""
        anonymous = np.asarray(workload.prefix_group) < 0
        offsets = getattr(workload, "hash_offsets", None)
        if offsets is not None:
            anonymous &= np.diff(np.asarray(offsets)) == 0
        sessions = getattr(workload, "session_id", None)
        if sessions is not None:
            anonymous &= np.asarray(sessions) < 0
        return anonymous

    def next_time(self) -> float | None:
        if self.cursor >= self.size:
            return None
        if self.closed is not None:
            return self.ready[0] if self.ready else None
        if self.sessions:
            head = self._session_head()
            return None if head is None else head[0]
        return float(self.times[self.cursor])

    def time_of(self, count: int) -> float | None:
        """The earliest time the ``count``-th arrival of the run (from 1) can come, as far as is known now (a
        memory snapshot falls due there, `SnapshotSchedule.next_moment`): -inf if it has come; its own time
        where no arrival is released by another; else the next known arrival's, as any arrival may be the
        one that releases it (a request rejected on delivery releases its user's next request, or its
        session's next turn, a think time later); None if none is known (the next is released by a request
        still running, whose leaving ends a decode run)."""
        if count <= self.cursor:
            return -np.inf
        if count > self.size:
            return None
        return self.next_time() if self.released_arrivals else float(self.times[count - 1])

    def _session_head(self) -> tuple[float, int] | None:
        """The next session-workload arrival ``(time, row)``: a row due at its own time or a released turn."""
        head = self.due[0] if self.due else None
        if self.position < len(self.scheduled):
            i = int(self.scheduled[self.position])
            own = (float(self.times[i]), i)
            if head is None or own < head:
                return own
        return head

    @property
    def released_arrivals(self) -> bool:
        """Whether some arrivals are released by earlier requests leaving (a closed loop, or session turns with
        a think time): their times are known only as the simulation runs."""
        return self.closed is not None or self.sessions

    @property
    def min_think_s(self) -> float:
        """The shortest think time between a request leaving and the arrival it releases (inf: none is)."""
        if self.closed is not None:
            return self.closed.think_time_s
        if self.sessions:
            return float(np.min(self.workload.think_time_s[self.next_turn[self.next_turn >= 0]]))
        return np.inf

    def on_done(self, t: float, index: int = -1, not_before: float = -np.inf) -> None:
        """Request ``index`` left the system at ``t`` (closed loop: its user thinks, then sends the next one;
        a session turn releases the session's next turn after its think time). ``not_before``: the earliest
        time the released arrival may take (a fleet's, `sim.kernel.fleet`)."""
        if self.closed is not None:  # every user that leaves is ready again (more than rows left: the earliest go)
            heapq.heappush(self.ready, max(released_at(t + self.closed.think_time_s), not_before))
        elif self.sessions and index >= 0 and (following := int(self.next_turn[index])) >= 0:
            think = float(self.workload.think_time_s[following])
            heapq.heappush(self.due, (max(released_at(t + think), not_before), following))

    def pop_due(self, now: float) -> tuple[float, int] | None:
        """The next arrival due at or before ``now``, as ``(time, row)``, taken and its time recorded; None if
        none is due. Rows due at the same time come in row order."""
        if self.cursor >= self.size:
            return None
        if self.sessions:
            head = self._session_head()
            if head is None or head[0] > now:
                return None
            t, i = head
            if self.due and self.due[0] == head:
                heapq.heappop(self.due)
            else:
                self.position += 1
        elif self.closed is not None:
            if not self.ready or self.ready[0] > now:
                return None
            t, i = heapq.heappop(self.ready), self.cursor
        else:
            t, i = float(self.times[self.cursor]), self.cursor
            if t > now:
                return None
        self.cursor += 1
        self.arrival_s[i] = t
        return t, i

    def deliver(self, now: float, sched) -> None:
        """Hand every request due at or before ``now`` to the scheduler, in order."""
        while (due := self.pop_due(now)) is not None:
            t, i = due
            sched.add(self.make_group(i, t), t, self.samples_of(i))

    def samples_of(self, i: int) -> int | None:
        """The sequences request ``i``'s row occupies in a fanned-out workload (its children; None: its group's
        own), which an API server counts at once (`sim.kernel.queue_limits`)."""
        return None if self.samples is None else int(self.samples[i])

    def _known_hashes(self, request, i: int) -> tuple[int, ...]:
        """Row ``i``'s (``request``'s) block ids from its prefix identity (`Request.block_hashes`), numbered by the
        workload's dense units where it has them. With a drafter's lookahead hashes a trace's prefix hashes give
        each block's with the token after it; the other identities drop the block ending where the known tokens
        end (`_lookahead_drop`)."""
        w = self.workload
        if not request.prefix_hashes:
            return self._lookahead_drop(request, request.block_hashes(self.block_size))
        units = w.prefix_units(i) if hasattr(w, "prefix_units") else None
        return request.block_hashes(self.block_size, units, lookahead=self.lookahead_hashes)

    def _lookahead_drop(self, request, hashes: tuple[int, ...]) -> tuple[int, ...]:
        """``hashes`` less their last with a drafter's lookahead hashes (``get_request_block_hasher``'s
        ``num_hash_lookahead_tokens``) where it ends where the known tokens end: the token after it is the
        request's own (a session turn's or a shared system prompt's block ending there is the request's own)."""
        if self.lookahead_hashes and hashes and request.known_prefix_tokens == len(hashes) * self.block_size:
            return hashes[:-1]
        return hashes

    def _child_hashes(self, i: int, prompt: int, output: int) -> tuple[tuple[int, ...], int, int]:
        """A fanned-out child's block ids, its shared-prefix blocks and where its own start: its row's prefix
        identity (a group's or the trace's prefix hashes), then the rest of its prompt as its siblings have it
        (ids by the row it came from), then its own generated blocks. With a drafter's lookahead hashes
        (`make_group`) a block is hashed with the token after it: one ending where the known prefix ends is its
        row's, one ending where the prompt ends the child's own (the token after it is the child's first)."""
        size = self.block_size
        request = None if self.anonymous[i] else self.workload[i]
        known = () if request is None else self._known_hashes(request, i)
        siblings = prompt - 1 if self.lookahead_hashes else prompt  # the tokens whose blocks the siblings share
        shared = own_block_hashes(int(self.rows[i]), len(known), siblings, size, base=_SIBLING_BASE)
        own = own_block_hashes(i, siblings // size, prompt + output, size) if self.own_identity else ()
        return known + shared + own, len(known), siblings // size

    def make_group(self, i: int, t: float) -> SequenceGroup:
        w = self.workload
        prompt, output = int(w.prompt_tokens[i]), int(w.output_tokens[i])
        max_tokens, group_id = int(w.max_tokens[i]), int(w.prefix_group[i])
        hashes: tuple[int, ...] = ()
        prefix_blocks = own_from = 0
        if self.fanned is not None and self.fanned[i]:
            hashes, prefix_blocks, own_from = self._child_hashes(i, prompt, output)
        elif self.want_hashes and self.anonymous[i]:
            if self.own_identity:
                hashes = own_block_hashes(i, 0, prompt + output, self.block_size)
        elif self.want_hashes:
            request = w[i]
            hashes = self._known_hashes(request, i)  # with lookahead hashes as a drafter's
            prefix_blocks = own_from = len(hashes)
            if request.session_id is not None:  # identity covers the whole turn; the group's part is shared
                prefix_blocks = request.prefix_len // self.block_size if group_id >= 0 else 0
            elif self.own_identity:
                hashes += own_block_hashes(i, len(hashes), prompt + output, self.block_size)
        return SequenceGroup(
            i, int(w.ids[i]), t, prompt, output, n=int(w.n[i]), beam_width=int(w.beam_width[i]),
            max_total=prompt + max_tokens - 1 if max_tokens >= 0 else None, hashes=hashes,
            prefix_group=group_id if group_id >= 0 else None, prefix_blocks=prefix_blocks,
            priority=int(w.priority[i]) if getattr(w, "priority", None) is not None else 0, own_from=own_from,
            row=int(self.rows[i]) if self.rows is not None else None,
            child=int(self.child[i]) if self.child is not None else None,
        )
