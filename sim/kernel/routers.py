"""Request routers for a fleet of replicas: each is a small object with one method, `choose`.

A router is asked at each arrival, with the replicas as they are at that instant (`sim.kernel.fleet_replica.Replica`:
``load``, ``free_slots``, ``held_tokens``, ``pending_prefill``, ``cached_tokens``), which replica gets the request; a
request group (``n`` > 1 samples, beams) is one request and goes to one replica whole. ``routes_children`` says
what a router does with a request fanned out into ``n`` child requests (`sim.kernel.parallel_sampling`): False,
the fleet sends every child where the first went; True, it asks the router for each child. Only ``dp-lb`` asks: it
is vLLM's own front end, whose ``AsyncLLM.add_request`` (``vllm/v1/engine/async_llm.py``) fans the request out
first and hands each child (``ParentRequest.get_child_info``: its own request id) to ``add_request_async``, which
routes it (``get_core_engine_for_request``) like any request. The others stand for HTTP routers in front of
separate vLLM servers (gateways, Dynamo, llm-d): they forward the HTTP request, ``n`` included, to one server, and
that server's front end fans it out there. ``ROUTERS`` maps the names
the command line and `SimConfig.router` use to the classes, as `allocators.ALLOCATORS` does for allocators; each is
built from one `RouterSettings`.

``needs_state`` says whether the choice reads the replicas' state. Routers that do not (round-robin, random)
make the same choices whatever the replicas do, so the fleet takes them in arrival order before the run and
each replica then knows its own next arrival, as a single replica does.

The prefix-aware scoring rule (KV-aware routing counting prefill work only): send the request where the least
prefill work stands between it and its first token::

    cost(r) = (prompt_tokens - cached_tokens(r))  +  load_weight * pending_prefill(r)

``cached_tokens(r)``: prompt tokens replica ``r``'s prefix cache (or registered shared prefix) holds for this
request now, the lookup its admission would make, without side effects; ``pending_prefill(r)``: prompt tokens
still to be prefilled there (routed and not yet delivered, queued, and the rest of running chunked prefills).
The lowest cost wins; ties go to fewer requests (running + waiting + routed), then the lower replica number.
With ``load_weight`` 0 it is the longest cached prefix, ties broken by load; with 1 (the default) a hit is
worth exactly the prefill it saves, so a replica whose cache holds the prefix but whose queue holds more
work than that loses the request (overload). A request count is a poor load measure for prompts of very
different lengths (a 100k-token prompt queues like a 100-token one), hence tokens. What it does not count is the
KV the replica's running requests hold: a replica that caches a popular prefix keeps winning new requests as long
as its queue of prompts is short, however many it is decoding (new sessions herd to it).

The kv-cost rule is NVIDIA Dynamo's KV router cost (``--router-mode kv``; its docs, "Routing Concepts": ``cost =
overlap_score_weight * prefill_blocks + decode_blocks``), which adds that decode load::

    cost(r) = kv_overlap_score_weight * (prompt_tokens - cached_tokens(r) + pending_prefill(r))
              + held_tokens(r) + pending_prefill(r)

``held_tokens(r)``: the KV memory the replica's requests hold now, in tokens of its pool (token states,
reservations and partly filled blocks; a block several requests share, once); with ``pending_prefill(r)`` beside
it, the KV they will hold once their prompts are in: Dynamo's active blocks, which it counts from a request's
routing to its completion. Dynamo also adds the incoming request's own blocks, the same on every replica, and
counts blocks where this counts tokens (the same order up to one block's rounding). ``kv_overlap_score_weight``
(Dynamo's ``--router-kv-overlap-score-weight``, default 1) trades cache hits (TTFT) against spreading the decode
load (ITL). Ties as above.

Session affinity (sticky sessions, as gateways route on a session header: llm-d's session-affinity scorer,
AIBrix's session routing) needs no view of any cache: a conversation's first turn goes where the fewest
requests are, every later turn where its first went. It keeps a conversation's KV on one replica as
``prefix-aware`` tends to, without reading caches, and without moving a turn off a replica that is overloaded.

vLLM's data-parallel load balancer (``dp-lb``, the default router of ``--data-parallel-size`` > 1) is vLLM 0.33's
``DPLBAsyncMPClient.get_core_engine_for_request`` (``vllm/v1/engine/core_client.py``), run by each of
``client_count`` API servers (``--api-server-count``, `sim.kernel.api_servers`: which one a request reaches) for
the requests that reach it::

    score(r) = max(client_count * inflight(r), waiting(r) + running(r))
               + [waiting(r) > 0] * waiting(r) * 6.0 * max(0, kv_cache_usage(r) - 0.5)

``inflight(r)``: the requests this API server routed to ``r`` and not finished, the client's own exact count
(`ReplicaState.in_flight`: routed, less those whose last step's output came back).
``waiting``, ``running`` and ``kv_cache_usage`` (the block pool's used share, vLLM's ``BlockPool.get_usage``) are not
the engine's state now but the client's ``lb_engines``: the counts the DP coordinator last published (every 100 ms at
most while the engines report changes, every 5 s otherwise; a lock-step rank's as they stood at a step boundary),
each as its engine reported it after its last step or on taking in requests, plus ``client_count`` waiting
requests for every request this client routed there since that publish (vLLM's ``current_counts[eng_index][0] +=
self.client_count``, which the next publish overwrites; each API server has its own copy and sees the others'
requests only through the publishes). `sim.kernel.dp_coordinator` models that exchange on the simulated clock and says
where each rule is in vLLM's source. So a burst within one publish window is spread by the in-flight floor and the
local bumps alone, and the usage penalty reads a usage up to 100 ms old (or older: an engine sends its usage only
with a count change). The lowest score wins, scanned from a start engine (API server ``k`` of ``client_count``
starts at ``engines * k // client_count``) that moves on by one after every request it routes, the first lowest in that order taking ties (vLLM rotates the scan start "so that ties ... don't
systematically favor the same engine"). A fanned-out request's children (``n`` > 1 samples run as requests) are
routed one by one, in child order at the request's arrival, as ``AsyncLLM.add_request`` sends them: each scores the
engines, bumps its engine's waiting count and in-flight count and moves the scan start on, so the children of one
request spread over idle engines (``routes_children``); each runs there as a request of its own (``Request``; vLLM's
scheduler knows no parent), siblings on one engine sharing the prompt's blocks through its prefix cache only, and
siblings on different engines sharing nothing; every child through the API server its request reached. What it
does not model: a request's explicit ``data_parallel_rank``; the messages' own latency.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from sim.kernel.api_servers import APIServers
from sim.kernel.dp_coordinator import DPCoordinator


@dataclass(frozen=True)
class RouterSettings:
    """What the routers are built from (each takes what it uses): the run's seeded generator (``random``),
    ``load_weight`` (``prefix-aware``), ``kv_overlap_score_weight`` (``kv-cost``), the workload's
    ``session_id`` column, None without sessions (``session-affinity``), the fleet's DP coordinator
    (``dp-lb``, which reads nothing else of the engines' queues) and its API servers (``dp-lb``; None: one)."""

    rng: np.random.Generator
    load_weight: float = 1.0
    kv_overlap_score_weight: float = 1.0
    sessions: np.ndarray | None = None
    coordinator: DPCoordinator | None = None
    api_servers: APIServers | None = None


class ReplicaState(Protocol):
    """What a router may read of a replica (`sim.kernel.fleet_replica.Replica`)."""

    @property
    def load(self) -> int: ...

    @property
    def free_slots(self) -> int: ...

    @property
    def held_tokens(self) -> int: ...

    @property
    def pending_prefill(self) -> int: ...

    def cached_tokens(self, group) -> int: ...

    def in_flight(self, t: float, client: int = 0) -> int: ...


class RoundRobin:
    """Replica 0, 1, ..., N-1, 0, ... in arrival order."""

    needs_state = False
    routes_children = False

    def __init__(self, settings: RouterSettings) -> None:
        self.next = 0

    def choose(self, group, replicas: Sequence[ReplicaState]) -> int:
        chosen = self.next % len(replicas)
        self.next = chosen + 1
        return chosen


class Random:
    """A uniformly random replica, drawn from the run's seeded generator."""

    needs_state = False
    routes_children = False

    def __init__(self, settings: RouterSettings) -> None:
        self.rng = settings.rng

    def choose(self, group, replicas: Sequence[ReplicaState]) -> int:
        return int(self.rng.integers(len(replicas)))


def _least(keys) -> int:
    """The position of the smallest key (the first one on ties)."""
    best, best_key = 0, None
    for i, key in enumerate(keys):
        if best_key is None or key < best_key:
            best, best_key = i, key
    return best


class LeastRequests:
    """Fewest running + waiting (+ routed, not yet delivered) requests; ties to the lower replica number."""

    needs_state = True
    routes_children = False

    def __init__(self, settings: RouterSettings) -> None:
        pass

    def choose(self, group, replicas: Sequence[ReplicaState]) -> int:
        return _least(r.load for r in replicas)


class LeastKV:
    """Most free KV memory once the prompts already routed there take theirs: free blocks in token slots, less
    ``pending_prefill`` (prompt tokens routed, queued or mid-prefill, not yet in memory); ties to fewer requests,
    then the lower number. Counting free blocks alone, every request of a burst (routed before any step places
    one) saw the same free memory and went to the same replica."""

    needs_state = True
    routes_children = False

    def __init__(self, settings: RouterSettings) -> None:
        pass

    def choose(self, group, replicas: Sequence[ReplicaState]) -> int:
        return _least((r.pending_prefill - r.free_slots, r.load) for r in replicas)


class PrefixAware:
    """Least prefill work ahead of this request's first token, its cache hits counted: the rule in the
    module docstring."""

    needs_state = True
    routes_children = False

    def __init__(self, settings: RouterSettings) -> None:
        self.load_weight = settings.load_weight

    def choose(self, group, replicas: Sequence[ReplicaState]) -> int:
        w, prompt = self.load_weight, group.prompt
        return _least((prompt - r.cached_tokens(group) + w * r.pending_prefill, r.load) for r in replicas)


class KVCost:
    """NVIDIA Dynamo's KV router cost: prefill work (cache hits counted) weighted against the KV the replica
    holds and will hold (the module docstring)."""

    needs_state = True
    routes_children = False

    def __init__(self, settings: RouterSettings) -> None:
        self.overlap_weight = settings.kv_overlap_score_weight

    def choose(self, group, replicas: Sequence[ReplicaState]) -> int:
        w, prompt = self.overlap_weight, group.prompt
        costs = []
        for r in replicas:
            pending = r.pending_prefill
            costs.append((w * (prompt - r.cached_tokens(group) + pending) + r.held_tokens + pending, r.load))
        return _least(costs)


class SessionAffinity:
    """A session's turns on the replica its first turn went to, which is the one with the fewest requests (as
    `LeastRequests`); a request outside sessions as `LeastRequests` too. ``sessions``: the workload's
    ``session_id`` column (negative: none), by workload position."""

    needs_state = True
    routes_children = False

    def __init__(self, settings: RouterSettings) -> None:
        self.sessions = settings.sessions
        self.home: dict[int, int] = {}  # session -> the replica of its first turn

    def choose(self, group, replicas: Sequence[ReplicaState]) -> int:
        session = -1 if self.sessions is None else int(self.sessions[group.index])
        home = self.home.get(session)
        if home is None:
            home = _least(r.load for r in replicas)
            if session >= 0:
                self.home[session] = home
        return home


DP_LB_WAITING_WEIGHT = 6.0
"""vLLM 0.33's penalty per waiting request at full KV usage, ramping from 0 at half usage
(``score += waiting * 6.0 * max(0.0, kv_cache_usage - 0.5)`` in ``DPLBAsyncMPClient``)."""


class DataParallelLB:
    """vLLM's data-parallel load balancer: fewest requests in flight or published as queued and running, plus a
    penalty for a published queue on an engine whose KV cache is more than half used; the scan start rotates by
    one engine per request (the module docstring). Reads the coordinator's counts at the request's arrival and
    bumps the chosen engine's waiting count in them, as vLLM's client does in its ``lb_engines``. One per API
    server (``api_servers``; None: one server), each with its own scan start, in-flight counts and copy of the
    counts."""

    needs_state = True
    routes_children = True  # vLLM's front end fans a request out before it routes (the module docstring)

    def __init__(self, settings: RouterSettings) -> None:
        if settings.coordinator is None:
            raise ValueError("the dp-lb router reads a DP coordinator's counts: build it with coordinator=")
        self.coordinator = settings.coordinator
        self.front = settings.api_servers
        self.client_count = 1 if self.front is None else self.front.count
        engines = self.coordinator.engines
        # vLLM's eng_start_index: (len(core_engines) * client_index) // client_count
        self.start = [engines * k // self.client_count for k in range(self.client_count)]

    def choose(self, group, replicas: Sequence[ReplicaState]) -> int:
        t = group.arrival_s
        client = 0 if self.front is None else self.front.accept(group.index, group.row, t)
        counts = self.coordinator.view(t, client)
        n, start, scale = len(replicas), self.start[client], self.client_count
        best, best_score = 0, math.inf
        for i in range(n):
            idx = (start + i) % n
            waiting, running, kv_cache_usage = counts[idx]
            score: float = max(scale * replicas[idx].in_flight(t, client), waiting + running)
            if waiting:
                score += waiting * DP_LB_WAITING_WEIGHT * max(0.0, kv_cache_usage - 0.5)
            if score < best_score:
                best, best_score = idx, score
        counts[best][0] += scale
        self.start[client] = (start + 1) % n
        return best


ROUTERS = {
    "round-robin": RoundRobin,
    "random": Random,
    "least-requests": LeastRequests,
    "least-kv": LeastKV,
    "prefix-aware": PrefixAware,
    "kv-cost": KVCost,
    "session-affinity": SessionAffinity,
    "dp-lb": DataParallelLB,
}


def make_router(name: str, *, rng: np.random.Generator, **settings):
    """The router ``name``, built from ``rng`` and the other `RouterSettings` fields given (defaults else)."""
    try:
        cls = ROUTERS[name]
    except KeyError:
        raise ValueError(f"unknown router {name!r}; choose from {', '.join(ROUTERS)}") from None
    return cls(RouterSettings(rng, **settings))
