"""`DecodeSet`: the decoding sequences, grown lazily so a decode step costs O(1) instead of O(running).

Every decoding sequence appends one token a step. Telling the allocator about each token would cost a call
per sequence per step; instead each sequence is *synced* only when it runs out of ``headroom`` (the tokens it
can append without allocator work, e.g. the free slots of its last block). Between syncs the allocator lags
behind by the tokens appended since; as those tokens land in slots the sequence already holds and will fill,
the true memory breakdown is the allocator's with ``lag`` slots moved from reservation to token states::

    step index G:        g0            G                deadline = g0 + headroom
    sequence:     synced |<- lag = G - g0 ->|   ...     | needs a new block: grow(seq, lag + 1)

``lag`` sums ``G - g0`` over all sequences (O(1) from ``n`` and ``sum_g0``). A sequence synced at step ``G``
for that step's token gets ``g0 = G + 1`` and so counts -1 during step ``G``: the memory state *during* a
step holds the blocks the step needs but not yet its tokens, in every mode. As in vLLM v1 a slot is
allocated for the token a step computes (fed in), never for the one it samples: a sequence joins holding its
prompt at ``g0 = G + 1`` after its prefill step ``G`` (the engine adds the step's joiners back, as they hold
no slot for a token of step ``G``, and likewise the decoders `defer` moved). With ``lazy=False`` every
sequence is synced every step (the step-by-step mode the fast path is tested against).

`sync_run` is the decode fast-forward's per-block loop: `pop_due` and `resync` inlined (``sum_g0`` and
``sum_tokens`` updated once per run), so a change to how a sync is recorded must be made there too.
"""

from __future__ import annotations

import heapq

from sim.kernel.lazy_heap import earliest
from sim.kernel.window_context import ChunkContext, WindowContext, attended


class DecodeSet:
    """Sequences in the decode phase: their sync step ``g0``, synced tokens, and a heap of sync deadlines."""

    __slots__ = ("lazy", "g0", "tokens", "deadline", "heap", "n", "sum_g0", "sum_tokens", "windows")

    def __init__(self, lazy: bool = True, window: int = 0, chunked: bool = False) -> None:
        """``window``: the model's sliding window in tokens (0: none), or with ``chunked`` its attention chunk,
        for `window_context`."""
        self.lazy = lazy
        self.windows = (ChunkContext if chunked else WindowContext)(window) if window else None
        self.g0: dict[int, int] = {}
        self.tokens: dict[int, int] = {}
        self.deadline: dict[int, int] = {}
        self.heap: list[tuple[int, int]] = []  # (deadline step, seq id); stale entries skipped lazily
        self.n = 0
        self.sum_g0 = 0
        self.sum_tokens = 0

    def __contains__(self, seq_id: int) -> bool:
        return seq_id in self.g0

    def join(self, seq_id: int, tokens: int, headroom: int, next_step: int) -> None:
        """Start tracking a sequence the allocator knows holds ``tokens`` as of the start of ``next_step``."""
        self.g0[seq_id] = next_step
        self.tokens[seq_id] = tokens
        due = next_step + headroom if self.lazy else next_step
        self.deadline[seq_id] = due
        heapq.heappush(self.heap, (due, seq_id))
        self.n += 1
        self.sum_g0 += next_step
        self.sum_tokens += tokens
        if self.windows is not None:
            self.windows.enter(seq_id, tokens - next_step)

    def leave(self, seq_id: int) -> None:
        """Stop tracking (finished or preempted); its heap entry goes stale."""
        if self.windows is not None:
            self.windows.leave(seq_id, self.tokens[seq_id] - self.g0[seq_id])
        self.n -= 1
        self.sum_g0 -= self.g0.pop(seq_id)
        self.sum_tokens -= self.tokens.pop(seq_id)
        del self.deadline[seq_id]

    def resync(self, seq_id: int, added: int, headroom: int, next_step: int) -> None:
        """The allocator was told ``added`` more tokens, as of the start of ``next_step``."""
        self.sum_g0 += next_step - self.g0[seq_id]
        self.g0[seq_id] = next_step
        self.tokens[seq_id] += added
        self.sum_tokens += added
        due = next_step + headroom if self.lazy else next_step
        self.deadline[seq_id] = due
        heapq.heappush(self.heap, (due, seq_id))

    def sync_run(self, step0: int, end: int, grow_due, start_of, spare: int = 1 << 62, begin_step=None,
                 together=None, fits=None, whole_steps: bool = False) -> tuple[int, int, float, int, float, int, float]:
        """Sync every sequence falling due in steps ``step0 .. end - 1`` of a decode run, in (deadline, id)
        order, including the later deadlines the syncs create. ``grow_due(seq_id, tokens)`` is the
        allocator's (headroom, new blocks, reservation change) or None when out of memory: the run then ends
        before that step (it stays due; the scheduler will preempt). ``start_of(m)``: when step ``step0 + m``
        starts, in seconds from the run's start. ``spare``: free blocks that hold nothing; the allocator hands
        them out before it evicts cached blocks, so blocks past them are evictions. ``begin_step(step)``, if
        given, is called before the first sync of each step (a write-through tier's step, `RequestTier`).
        ``together(seq_id, due)``, if given: the decoders of its group due at step ``due`` where there are
        several (`group_growth.due_together`), else None; they are synced together, at the first, once
        ``fits(growth)`` says their growth fits whole (else the run ends before that step: the scheduler
        preempts, `sim.kernel.group_growth`). ``whole_steps``: so are all the decoders due at a step, which
        matters where the order decoders grow in decides what follows a refusal: under async scheduling behind a
        host tier the running loop stops at a decoder that finds no room and no victim it may preempt
        (`InFlight.pinned`), deferring the rest, so which one meets the full pool first must be the running
        order's, which the scheduler then plans, not the run's (deadline, id) order.

        Returns ``(end, blocks, blocks_t, moved, moved_t, evicted, evicted_t)``: the run's end, the used blocks
        gained, the reservation gained (slots: the lag no longer counts the tokens just told) and the cached
        blocks evicted, each also weighted by the time of its step, from which the fast-forward integrates
        memory exactly."""
        heap, deadline, g0, tokens = self.heap, self.deadline, self.g0, self.tokens
        pop, replace = heapq.heappop, heapq.heapreplace
        blocks = moved = synced = evicted = 0
        blocks_t = moved_t = evicted_t = 0.0
        at = None
        while heap:
            due, seq_id = heap[0]
            if due >= end:
                break
            if deadline.get(seq_id) != due:
                pop(heap)  # stale: the sequence left or was re-synced
                continue
            if due != at:
                if whole_steps and not fits([(m, due - g0[m] + 1) for m in
                                             {m for d, m in heap if d == due and deadline.get(m) == due}]):
                    end = due
                    break
                if begin_step is not None:
                    begin_step(due)
                at = due
            members = together(seq_id, due) if together is not None else None
            if members is None:
                members = (seq_id,)
            elif not fits([(m, due - g0[m] + 1) for m in members]):
                end = due
                break
            refused = False
            for m in members:  # ``seq_id`` first: the group's first decoder due
                added = due - g0[m] + 1
                grown = grow_due(m, added)
                if grown is None:
                    refused = True
                    break
                headroom, new_blocks, reserved = grown
                g0[m] = due + 1
                tokens[m] += added
                synced += added
                nxt = due + 1 + headroom
                deadline[m] = nxt
                if m == seq_id:
                    replace(heap, (nxt, m))
                else:  # its entry at ``due`` goes stale
                    heapq.heappush(heap, (nxt, m))
                t = start_of(due - step0)
                gained = reserved + added
                blocks += new_blocks
                blocks_t += new_blocks * t
                moved += gained
                moved_t += gained * t
                if blocks > spare:
                    over = blocks - spare - evicted
                    evicted += over
                    evicted_t += over * t
            if refused:
                end = due
                break
        self.sum_g0 += synced
        self.sum_tokens += synced
        return end, blocks, blocks_t, moved, moved_t, evicted, evicted_t

    def context_of(self, seq_id: int, step: int) -> int:
        """Tokens one tracked sequence holds at the start of ``step``."""
        return self.tokens[seq_id] + step - self.g0[seq_id]

    def defer(self, seq_id: int, due_by: int | None = None) -> None:
        """The sequence computes nothing this step (the token budget ran out before it): its sync step and
        deadline move one step later, its deadline no later than ``due_by`` if given."""
        if self.windows is not None:
            self.windows.defer(seq_id, self.tokens[seq_id] - self.g0[seq_id])
        self.g0[seq_id] += 1
        self.sum_g0 += 1
        due = self.deadline[seq_id] + 1
        if due_by is not None and due_by < due:
            due = due_by
        self.deadline[seq_id] = due
        heapq.heappush(self.heap, (due, seq_id))

    def window_context(self, step: int) -> int:
        """``sum min(c, W)`` over the tracked sequences' attended contexts ``c`` at ``step`` (the fed token
        included, as `context` + ``n``), with the model's window ``W``, or with chunks of ``W`` tokens ``sum (c - 1)
        mod W + 1`` (`sim.kernel.window_context`)."""
        windows = self.windows
        windows.clip(step, self._offset)
        return windows.total(step, self.n)

    def window_of(self, seq_id: int, step: int) -> int:
        """One tracked sequence's attended context at ``step``, clipped to the window (or its chunk's)."""
        return attended(self.tokens[seq_id] - self.g0[seq_id] + step + 1, self.windows.window, self.chunked)

    @property
    def chunked(self) -> bool:
        """Whether the clipped context is a chunked-local model's (`ChunkContext`)."""
        return type(self.windows) is ChunkContext

    def window_run(self, step: int) -> tuple[tuple[int, int], int | None]:
        """For a decode run from ``step``: ((clipped context, sequences inside the window), the step at which
        the next one leaves it, before which the run must end (None: none will))."""
        windows = self.windows
        clipped = self.window_context(step)
        return (clipped, windows.inside), windows.next_exit()

    def _offset(self, seq_id: int) -> int:
        return self.tokens[seq_id] - self.g0[seq_id]

    def advance(self, seq_id: int, tokens: int) -> None:
        """The sequence gained ``tokens`` beyond its step's one (accepted speculative drafts,
        `sim.kernel.spec_decode`): they count as pending until its next sync, as if appended in earlier steps.
        Only for sequences synced every step (``lazy=False``): its deadline does not move."""
        windows = self.windows
        if windows is not None and seq_id in windows.exit_at:  # it leaves the window ``tokens`` steps earlier
            off = self.tokens[seq_id] - self.g0[seq_id]
            windows.leave(seq_id, off)
            windows.enter(seq_id, off + tokens)
        self.g0[seq_id] -= tokens
        self.sum_g0 -= tokens

    def pending(self, seq_id: int, step: int) -> int:
        """Tokens appended before ``step`` that the allocator has not been told about."""
        return step - self.g0[seq_id]

    def all_pending(self, step: int) -> dict[int, int]:
        """`pending` of every tracked sequence, for a memory map taken with the row of ``step``: its terms of
        `lag`, so -1 for one synced for the step's token (its slot held, the token not yet computed)."""
        return {seq_id: step - g0 for seq_id, g0 in self.g0.items()}

    def next_deadline(self) -> int | None:
        """The earliest valid deadline (stale heap entries are dropped on the way)."""
        return earliest(self.heap, self.deadline)

    def pop_due(self, step: int) -> list[int]:
        """Sequences whose deadline is ``step`` (or earlier), removed from the heap, in (deadline, id) order."""
        heap, deadline, due_ids = self.heap, self.deadline, []
        while heap and heap[0][0] <= step:
            due, seq_id = heapq.heappop(heap)
            if deadline.get(seq_id) == due:
                due_ids.append(seq_id)
        return due_ids

    def requeue(self, seq_id: int) -> None:
        """Put back a popped sequence whose sync failed (it stays due)."""
        heapq.heappush(self.heap, (self.deadline[seq_id], seq_id))

    def lag(self, step: int) -> int:
        """Tokens the true state holds beyond the allocator's, at the start of ``step`` (before its tokens)."""
        return self.n * step - self.sum_g0

    def context(self, step: int) -> int:
        """Tokens held by the tracked sequences at the start of ``step``."""
        return self.sum_tokens + self.n * step - self.sum_g0
