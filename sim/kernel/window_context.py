"""`WindowContext`: the decoders' context clipped to a sliding window, for the clock of a model with windows;
`ChunkContext`: the same for chunked-local attention (Llama 4's).

Why: a sliding-window layer attends to (and reads the KV of) at most the window's last ``W`` tokens, so a
decode step's attention cost on those layers is ``sum_i min(c_i, W)`` over its sequences, not ``sum_i c_i``.
The decode fast-forward prices a run of steps in closed form, which needs that sum to be linear in the step:
it is, between the steps at which a sequence reaches the window (it stops growing there). So this keeps the
sequences still inside the window (their count and offsets, O(1) to sum) and a heap of the steps at which they
reach it; a run ends before the next one (`next_exit`), and each sequence does so once.

A tracked sequence's attended context at step ``s`` is ``off + s + 1`` (``off`` = its synced tokens minus its
sync step, which a sync leaves unchanged and a deferred step lowers by one; the 1 is the token it feeds), so
it is inside the window while ``s < W - off``: its *exit step*.

A chunked-local layer attends within the token's own chunk of ``C`` tokens only: at step ``s`` a sequence
attends ``(off + s) mod C + 1`` keys, a sawtooth that grows by one a step and drops back to 1 when the fed token
starts a chunk. That is linear in the step between those steps (every sequence grows), so `ChunkContext` keeps
each sequence's offset less the chunk starts it has passed (``base``) and a heap of the step at which each next
starts a chunk; a run ends before the next one, once per ``C`` steps of a sequence.
"""

from __future__ import annotations

import heapq

from sim.kernel.lazy_heap import earliest


class WindowContext:
    """Decoders inside a window of ``window`` tokens: count, sum of offsets, and their exit steps."""

    __slots__ = ("window", "exit_at", "heap", "inside", "sum_off")

    def __init__(self, window: int) -> None:
        self.window = window
        self.exit_at: dict[int, int] = {}  # seq id -> exit step, for the sequences inside
        self.heap: list[tuple[int, int]] = []  # (exit step, seq id); stale entries skipped lazily
        self.inside = 0
        self.sum_off = 0

    def enter(self, seq_id: int, off: int) -> None:
        """Track a sequence with offset ``off`` (taken as inside: `clip` drops it at once if it is not)."""
        exit_step = self.window - off
        self.exit_at[seq_id] = exit_step
        heapq.heappush(self.heap, (exit_step, seq_id))
        self.inside += 1
        self.sum_off += off

    def leave(self, seq_id: int, off: int) -> None:
        """Stop tracking (finished or preempted)."""
        if self.exit_at.pop(seq_id, None) is not None:
            self.inside -= 1
            self.sum_off -= off

    def defer(self, seq_id: int, off: int) -> None:
        """The sequence (offset ``off`` before) skipped a step: its offset drops by one, so it leaves the
        window a step later (or, if it had just left, is back inside for a step)."""
        exit_step = self.exit_at.get(seq_id)
        if exit_step is None:
            self.enter(seq_id, off - 1)
            return
        self.sum_off -= 1
        self.exit_at[seq_id] = exit_step + 1
        heapq.heappush(self.heap, (exit_step + 1, seq_id))

    def clip(self, step: int, off_of) -> None:
        """Drop the sequences that have left the window by ``step`` (``off_of(seq_id)``: a sequence's offset)."""
        heap, exit_at = self.heap, self.exit_at
        while heap and heap[0][0] <= step:
            exit_step, seq_id = heapq.heappop(heap)
            if exit_at.get(seq_id) == exit_step:
                del exit_at[seq_id]
                self.inside -= 1
                self.sum_off -= off_of(seq_id)

    def total(self, step: int, n: int) -> int:
        """``sum_i min(off_i + step + 1, W)`` over ``n`` tracked sequences, after `clip` to ``step``."""
        return self.sum_off + self.inside * (step + 1) + self.window * (n - self.inside)

    def next_exit(self) -> int | None:
        """The earliest exit step of a sequence still inside (after `clip`), or None."""
        return earliest(self.heap, self.exit_at)


class ChunkContext:
    """Decoders attending within chunks of ``window`` tokens: their offsets less the chunk starts passed, and
    the step at which each next starts a chunk (its *exit step*, as `WindowContext`'s, so that the decode
    fast-forward cuts a run there). Every tracked sequence stays inside (``inside`` counts them all)."""

    __slots__ = ("window", "exit_at", "heap", "inside", "sum_off", "base")

    def __init__(self, window: int) -> None:
        self.window = window
        self.exit_at: dict[int, int] = {}  # seq id -> the step at which its next chunk starts
        self.heap: list[tuple[int, int]] = []  # (that step, seq id); stale entries skipped lazily
        self.base: dict[int, int] = {}  # seq id -> the tokens of the chunks before its current one
        self.inside = 0
        self.sum_off = 0  # sum of off - base

    def enter(self, seq_id: int, off: int) -> None:
        """Track a sequence with offset ``off``, taken as in its first chunk (`clip` moves it on)."""
        self.exit_at[seq_id] = self.window - off
        self.base[seq_id] = 0
        heapq.heappush(self.heap, (self.window - off, seq_id))
        self.inside += 1
        self.sum_off += off

    def leave(self, seq_id: int, off: int) -> None:
        """Stop tracking (finished or preempted)."""
        if self.exit_at.pop(seq_id, None) is not None:
            self.inside -= 1
            self.sum_off -= off - self.base.pop(seq_id)

    def defer(self, seq_id: int, off: int) -> None:
        """The sequence (offset ``off`` before) skipped a step: tracked anew at ``off - 1`` (a chunk start it
        had just reached may be a step away again)."""
        self.leave(seq_id, off)
        self.enter(seq_id, off - 1)

    def clip(self, step: int, off_of) -> None:
        """Move every sequence whose fed token has started a chunk by ``step`` into it (``off_of`` unused: the
        offsets are kept)."""
        heap, exit_at, base, chunk = self.heap, self.exit_at, self.base, self.window
        while heap and heap[0][0] <= step:
            start, seq_id = heapq.heappop(heap)
            if exit_at.get(seq_id) == start:
                passed = ((step - start) // chunk + 1) * chunk  # the chunk starts reached by ``step``, at once
                base[seq_id] += passed
                self.sum_off -= passed
                exit_at[seq_id] = start + passed
                heapq.heappush(heap, (start + passed, seq_id))

    def total(self, step: int, n: int) -> int:
        """``sum_i (off_i + step) mod C + 1`` over the ``n`` tracked sequences, after `clip` to ``step``."""
        return self.sum_off + self.inside * (step + 1)

    def next_exit(self) -> int | None:
        """The earliest step at which a tracked sequence starts a chunk (after `clip`), or None."""
        return earliest(self.heap, self.exit_at)


def attended(context: int, window: int, chunked: bool) -> int:
    """Keys a token at 1-based position ``context`` reads in a local layer: the window's last ``window`` tokens,
    or (``chunked``) those of its own chunk of ``window`` tokens so far; ``context`` itself where it is not
    positive (a decoder deferred before its first step counts that way in the decode set's sums)."""
    if context <= 0:
        return context
    return (context - 1) % window + 1 if chunked else min(context, window)


def chunked_sum(first: int, last: int, chunk: int) -> int:
    """``sum ((q - 1) mod chunk) + 1`` for q = first..last: the keys a chunked-local layer pairs the queries at
    those positions with (a prefill chunk's attention pairs there)."""
    def upto(q: int) -> int:
        whole, part = divmod(q, chunk)
        return whole * chunk * (chunk + 1) // 2 + part * (part + 1) // 2

    return upto(last) - upto(first - 1) if last >= first else 0


def clipped_sum(first: int, last: int, window: int) -> int:
    """``sum min(q, window)`` for q = first..last: the keys a window layer pairs the queries at those positions
    with (a prefill chunk's attention pairs on a window layer)."""
    if last < first:
        return 0
    if last <= window:
        return (first + last) * (last - first + 1) // 2
    if first >= window:
        return window * (last - first + 1)
    return (first + window) * (window - first + 1) // 2 + window * (last - window)
