"""`SnapshotSchedule`: when a run takes its memory-map snapshots.

Why not always at times spread over the arrival span: where arrivals are released by requests leaving (a
closed loop of users, session turns with a think time) the span is not known before the run (a closed loop's
arrival times are all 0, its rows only an order), so every snapshot fell at the start and the memory map showed
an empty pool once. There the snapshots are spread over the requests instead: snapshot ``k`` of ``n`` once
``ceil(size * (k + 1) / (n + 1))`` requests have arrived. Where every request arrives at once (an offline
batch, a trace without timestamps) there is no span and no order of arrivals: there they are spread over the
requests leaving (finished or refused), snapshot ``k`` once ``ceil(arrived * (k + 1) / (n + 1))`` have left (of
those arrived so far: a fleet replica's own), but never all of them: with fewer requests than snapshots the last
moments would fall after the last request left, on an empty pool, so they come once all but one have left.
Either way a snapshot is taken at the start of the first row at or after its moment, and moments one idle gap
passes together make one snapshot: the summary's ``memory_snapshots`` counts the moments, which do not depend on
how rows group steps, and the table's distinct times the snapshots. A snapshot shows memory as the row it starts
counts it, once that row's step is planned (`sim.kernel.engine.record_snapshot`): its slots of each state are
the row's memory columns, and every map has the step row starting at its time. A moment at the run's start (a
single request's, a closed loop's first users', a replica's only request) is no exception: it is the first
row's, at the run's start, and shows what that row's step allocated (its admissions and prefill chunks), not the
empty pool before it. No moment comes before the first row: a run's clock starts at its first arrival
(`first_arrival_s`), where its first row starts. A fleet replica that stops with moments still to come (idle
from its last row to the fleet's end, where no row starts at or after them) gets one map of its idle pool, at
the start of the idle row that holds it to that end (`sim.kernel.fleet_summary.idle_until`): the same pool
as at the moments, and the map a plot of any instant of that stretch finds nearest. Where a run ends as a map
is taken (its last request refused on arrival), an idle row of no duration there gives the map its row
(`sim.kernel.engine.close_last_map`).

A run of decode steps advanced in one move (`sim.kernel.fast_forward`) ends before the first step starting at
or after the next moment (`next_moment`), so the fast-forward snapshots the same step as step by step does,
and the two modes give the same memory-map table; a request leaves only where a run ends anyway (a completion
ends one, a refusal happens as a step is planned).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from sim.kernel.arrivals import ARRIVAL_TIE_S


class SnapshotSchedule:
    """The moments of ``count`` snapshots of a run of ``size`` requests whose first arrives at ``start``
    and, open loop, whose last at ``end``; ``by_arrivals``: spread over the requests instead; ``by_departures``
    (all arriving at once): over the requests leaving."""

    __slots__ = ("_times", "_arrived", "_shares", "_parts")

    def __init__(self, count: int, size: int, start: float, end: float, *, by_arrivals: bool,
                 by_departures: bool = False) -> None:
        span = end - start
        by_time = not (by_arrivals or by_departures)
        self._times = [start + span * (k + 1) / (count + 1) for k in range(count)] if by_time else []
        self._arrived = [max(1, math.ceil(size * (k + 1) / (count + 1))) for k in range(count)] if by_arrivals else []
        self._shares = list(range(1, count + 1)) if by_departures else []  # snapshot k: (k + 1) / _parts of them
        self._parts = count + 1

    @classmethod
    def for_workload(cls, count: int, workload, start: float, by_arrivals: bool) -> SnapshotSchedule:
        """``count`` snapshots of a run of ``workload`` starting at ``start`` (`first_arrival_s`)."""
        end = float(workload.arrival_time_s[-1]) if len(workload) else start
        at_once = not by_arrivals and len(workload) > 1 and end == start
        return cls(count, len(workload), start, end, by_arrivals=by_arrivals, by_departures=at_once)

    def due(self, now: float, arrived: int, delivered: int = 0, departed: int = 0) -> bool:
        """Whether a row starting at ``now``, ``arrived`` requests having arrived, takes a snapshot (every
        moment it passes is used up); ``delivered``: those of them this engine took, ``departed`` of which left."""
        passed = False
        while self._times and now >= self._times[0] - ARRIVAL_TIE_S:  # as an arrival: a tie is this step's
            self._times.pop(0)
            passed = True
        while self._arrived and arrived >= self._arrived[0]:
            self._arrived.pop(0)
            passed = True
        while self._shares and departed >= min(-(-delivered * self._shares[0] // self._parts), delivered - 1):
            self._shares.pop(0)
            passed = True
        return passed

    @property
    def left(self) -> bool:
        """Whether moments are still to come."""
        return bool(self._times or self._arrived or self._shares)

    def next_moment(self, arrival_time: Callable[[int], float | None]) -> float | None:
        """The earliest time a row could start and find a snapshot due, None if none can be known now: the next
        moment in time, or the arrival that brings the count to the next threshold (``arrival_time(k)``:
        when the ``k``-th arrival of the run comes, None if not known yet), less the tie within which a step
        starting just after it takes it (`ARRIVAL_TIE_S`: step starts are sums of durations, which the
        two modes round differently, and a constant step time can put one on a moment)."""
        t = self._times[0] if self._times else None
        if self._arrived:
            a = arrival_time(self._arrived[0])
            if a is not None and (t is None or a < t):
                t = a
        return None if t is None else t - ARRIVAL_TIE_S
