"""`WindowContext`: the decoders' context clipped to a sliding window, for the clock of a model with windows.

Why: a sliding-window layer attends to (and reads the KV of) at most the window's last ``W`` tokens, so a
decode step's attention cost on those layers is ``sum_i min(c_i, W)`` over its sequences, not ``sum_i c_i``.
The decode fast-forward prices a run of steps in closed form, which needs that sum to be linear in the step:
it is, between the steps at which a sequence reaches the window (it stops growing there). So this keeps the
sequences still inside the window (their count and offsets, O(1) to sum) and a heap of the steps at which they
reach it; a run ends before the next one (`next_exit`), and each sequence does so once.

A tracked sequence's attended context at step ``s`` is ``off + s + 1`` (``off`` = its synced tokens minus its
sync step, which a sync leaves unchanged and a deferred step lowers by one; the 1 is the token it feeds), so
it is inside the window while ``s < W - off``: its *exit step*.
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
