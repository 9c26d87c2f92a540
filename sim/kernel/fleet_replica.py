"""`Replica`: one replica of a fleet (`sim.kernel.fleet`), as the fleet's engine loop and its router see it.

Why its own object: a fleet runs N of them in one SimPy environment, and a router (`sim.kernel.routers`) reads
each one's state at every arrival (``load``, ``free_slots``, ``held_tokens``, ``pending_prefill``,
``cached_tokens``; ``dp-lb`` the counts it reports to the DP coordinator, ``report_counts``), so a replica is its
scheduler, allocator and cost model (`sim.kernel.replica.build_replica`, as the single engine builds them), its own
recorder, and the requests routed to it but not yet delivered (its inbox).
"""

from __future__ import annotations

import heapq
from collections import Counter, deque

import simpy

from sim.kernel.arrivals import ARRIVAL_TIE_S
from sim.kernel.config import SimConfig
from sim.kernel.metrics import Recorder
from sim.kernel.replica import build_replica

_RECORDER_ARRAYS = ("arrival_s", "admitted_s", "first_token_s", "finished_s", "preemptions", "rejected", "reasons")


class Replica:
    """One replica's scheduler, allocator and cost model, its recorder (step rows, memory integrals; the
    per-request arrays are the fleet's) and its inbox of routed requests (workload positions)."""

    def __init__(self, number: int, config: SimConfig, model, gpu, kv_tokens: int, shared: Recorder) -> None:
        self.number = number
        self.rec = Recorder(0)
        for name in _RECORDER_ARRAYS:
            setattr(self.rec, name, getattr(shared, name))
        self.memory, self.cost, self.sched = build_replica(config, model, gpu, kv_tokens, self.rec)
        self.kv_tokens = kv_tokens
        self.inbox: deque[int] = deque()  # routed, not yet delivered, in arrival order
        self.groups: dict[int, object] = {}  # groups built at routing time (the router read their hashes)
        self.delivered = 0
        self.end_s = 0.0
        self.wake: simpy.Event | None = None  # set while idle, waiting for the router
        self.busy_until = 0.0  # the end of the row in flight (inf while idle): it plans nothing before
        self.final_map: tuple | None = None  # its idle pool's memory map, for moments after its last row (`Fleet`)
        self.leaving: list[tuple[float, int]] = []  # heap: when requests finish, and their API servers (`in_flight`)
        self.routed_by: Counter[int] = Counter()  # requests each API server routed here and not seen finish

    def spec_summary(self) -> dict | None:
        """Its engine's spec decoding summary (`sim.kernel.spec_decode.SpecDecode.summary`; None without drafts)."""
        return None if self.sched.spec is None else self.sched.spec.summary()

    # -- what routers read (`sim.kernel.routers.ReplicaState`) ---------------------------------------------------
    @property
    def load(self) -> int:
        return self.sched.load + len(self.inbox)

    @property
    def free_slots(self) -> int:
        return self.memory.breakdown(False).free

    @property
    def held_tokens(self) -> int:
        """KV memory its requests hold, in tokens of the pool: its slots held (whole blocks, so the decode
        fast-forward, which tells the allocator a block's tokens late, reads the same as step by step), a
        hybrid pool's group slots scaled to the tokens its capacity holds."""
        b = self.memory.breakdown(False)
        return (b.token_states + b.reservation + b.internal_frag) * self.kv_tokens // b.capacity

    @property
    def pending_prefill(self) -> int:
        """Prompt tokens still to be prefilled here: routed, queued, and the rest of running prefills."""
        return sum(self.groups[i].prompt for i in self.inbox) + self.sched.pending_prefill()

    def cached_tokens(self, group) -> int:
        return self.memory.cached_tokens(group.hashes, group.prompt)

    @property
    def kv_cache_usage(self) -> float:
        """Its pool's used share in blocks (vLLM's "KV cache usage": blocks a prefix cache alone holds count as
        free, as vLLM's free queue holds them)."""
        b = self.memory.breakdown(False)
        return b.used_blocks / b.total_blocks if b.total_blocks else 0.0

    def routed(self, client: int = 0) -> None:
        """API server ``client`` routed a request here (`in_flight`)."""
        self.routed_by[client] += 1

    def leaves_at(self, t: float, client: int = 0) -> None:
        """One of its requests, routed by API server ``client``, finishes (or is rejected) at ``t``, its last step
        already planned."""
        heapq.heappush(self.leaving, (t, client))

    def in_flight(self, t: float, client: int = 0) -> int:
        """vLLM's ``DPLBAsyncMPClient.engine_inflight`` of API server ``client`` at ``t``: requests it routed here
        and not finished by then. The scheduler lets a request go when its last step (or the decode run ending
        with it) is planned; the client counts it until that step's output, at the step's end
        (``process_engine_outputs``), and counts only the requests it routed itself. A finish within
        ``ARRIVAL_TIE_S`` after ``t`` counts as before it: a closed-loop user's next request arrives at its last
        one's finish rounded to the nanosecond (`sim.kernel.arrivals.released_at`), which the fast-forward and step
        by step compute an ulp apart, and it follows that output in any case."""
        leaving, t = self.leaving, t + ARRIVAL_TIE_S
        while leaving and leaving[0][0] <= t:
            self.routed_by[heapq.heappop(leaving)[1]] -= 1
        return self.routed_by[client]

    def report_counts(self, coordinator, t: float, step: int = 0) -> None:
        """Its counts to vLLM's DP coordinator (`sim.kernel.dp_coordinator.DPCoordinator.report`): the engine's
        own queues (``Scheduler.get_request_counts``: a request loading its KV waits), not the requests routed to
        it and not yet delivered, which the engine has not received."""
        sched = self.sched
        running = len(sched.running)
        waiting = sched.load - running
        if coordinator.sent[self.number] != (running, waiting):  # else no message: its KV usage is not read
            coordinator.report(t, self.number, waiting, running, self.kv_cache_usage, step)
