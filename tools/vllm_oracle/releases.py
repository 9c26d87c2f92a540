"""When the driver adds each trace row to vLLM's scheduler: at its arrival, or when an earlier request's finish
releases it, as kvsim's `sim.kernel.arrivals.ArrivalSource` releases rows.

vLLM's scheduler has no notion of a client; a benchmark client in a closed loop (``closed_loop_users`` users,
each sending its next request ``think_time_s`` after its last one finished) or a session whose next turn waits
for the last (a ``think_time_s`` on a turn) adds requests as earlier ones finish. The driver plays that client:
a request finished by step ``s``'s output left at the step's end, ``s + 1`` (one unit of time a step, kvsim's
``step_time`` 1.0), so a whole-step think time releases the next row at a step's start, where kvsim's clock
puts it too. (A fractional one would put kvsim's clock off the step grid when the engine idles: not drawn.)
Rows due by a step are added in the order of their times, ties in row order, as kvsim delivers them.
"""

from __future__ import annotations

import heapq


class Releases:
    """The rows not yet added, each with its arrival time once known, and the requests each row makes (a row sampled
    ``n`` times fanned out is ``n`` requests, `driver.make_requests`)."""

    def __init__(self, rows: list[dict], requests: list, parent: dict[str, str]) -> None:
        self.rows = rows
        self.by_row: dict[int, list] = {}
        for req in requests:
            self.by_row.setdefault(int(parent[req.request_id]), []).append(req)
        self.users = rows[0]["closed_loop_users"] if rows else 0
        self.due: list[tuple[float, int]] = []  # (time, row) of rows whose arrival is known
        self.following: dict[int, int] = {}  # row -> the session turn it releases
        self.cursor = 0  # a closed loop: the next row a ready user sends
        self.ready: list[float] = []  # a closed loop: when each user not waiting for a reply sends again
        if self.users:
            self.ready = [0.0] * min(self.users, len(rows))
            return
        last: dict[str, int] = {}
        for i, r in enumerate(rows):
            if r["session"] != "" and r["think"] is not None:
                self.following[last[r["session"]]] = i
            else:
                self.due.append((float(r["arrival"]), i))
            if r["session"] != "":
                last[r["session"]] = i
        heapq.heapify(self.due)

    def take(self, step: int) -> list[tuple[float, int]]:
        """The rows due at or before ``step``, as ``(arrival time, row)``, in the order they are added."""
        while self.ready and self.ready[0] <= step and self.cursor < len(self.rows):
            heapq.heappush(self.due, (heapq.heappop(self.ready), self.cursor))
            self.cursor += 1
        taken = []
        while self.due and self.due[0][0] <= step:
            taken.append(heapq.heappop(self.due))
        return taken

    def add_due(self, step: int, scheduler) -> int:
        """Add the requests of the rows due at or before ``step`` to vLLM's ``scheduler`` (`take`'s order, each
        arriving at its row's time, ties broken by row); returns how many were added."""
        added = 0
        for t, row in self.take(step):
            for req in self.by_row[row]:
                req.arrival_time = t + row * 1e-9
                scheduler.add_request(req)
                added += 1
        return added

    def finished(self, row: int, step: int) -> None:
        """Row ``row``'s request was finished by step ``step``'s output: release what waits for it."""
        if self.users:
            think = self.rows[row]["closed_loop_think"]
            heapq.heappush(self.ready, step + 1 + think)
        elif (following := self.following.pop(row, None)) is not None:
            heapq.heappush(self.due, (step + 1 + self.rows[following]["think"], following))
