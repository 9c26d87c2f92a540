"""vLLM's API server processes (``--api-server-count``) in front of data-parallel engines: which one each
request reaches.

Why: vLLM's data-parallel load balancer (`sim.kernel.routers.DataParallelLB`) does not run once per deployment but
once per API server process, each a ``DPLBAsyncMPClient`` (vLLM 0.33, ``v1/engine/core_client.py``) with its own
``client_index`` of ``client_count``: its own copy of the DP coordinator's published counts (every publish goes to
every client: ``coordinator.py`` sends each on one ZMQ XPUB socket they all subscribe to), its own in-flight
counts (``engine_inflight``: only the requests it routed), its own scan start (``eng_start_index =
len(core_engines) * client_index // client_count``, then moved on by one per request) and its own bumps
(``current_counts[eng_index][0] += client_count``), its in-flight count scaled by ``client_count`` in the score.
``vllm serve`` with its internal load balancer starts ``data_parallel_size`` of them unless told otherwise
(``entrypoints/cli/serve.py``: ``args.api_server_count = args.data_parallel_size``; 1 with an external
load balancer, the local size with a hybrid one, neither modelled), so the default balancer is that many
balancers, each seeing the engines' shared state through the coordinator and its own share of the requests.

Which server a request reaches: all of them accept on one listening socket, made in the parent process
(``run_multi_api_server`` -> ``setup_server``) and handed to each (``APIServerProcessManager``,
``v1/utils.py``). vLLM 0.33 does not leave the choice to the kernel: with several servers each publishes its
number of open connections in a shared array (``api_server_loads``) and a server woken by a pending connection
accepts it only if its count is the least (``NoSignalServer._accept``, ``entrypoints/launchers/launcher.py``:
"a pending connection is accepted by the least loaded worker"; a busier one defers, rechecking every 1 ms for up
to 5 ms). kvsim models that rule with one connection per request, open from its arrival until its last child
finishes (a streamed response ends with its last token, when a client that does not keep connections alive
closes it): a request goes to the server with the fewest requests open. When several tie, every one of them
passes its check and the first to call ``accept`` wins, a race between processes that vLLM does not decide;
kvsim draws the winner uniformly among the tied servers from a generator of its own (spawned from the run's
seed, so no other draw moves), a draw made only when there is a tie. Every child of a fanned-out request
(``n`` > 1) goes through the server its request came to: vLLM's front end fans it out in that process
(``AsyncLLM.add_request``). What it does not model: clients that keep connections alive and send several
requests over one (``vllm bench serve``'s aiohttp pool does: ``keepalive_timeout=60``, ``force_close=False``), which
ties a request to the server of the connection it reuses; the 5 ms a busier server may wait; the time a
connection takes to close.
"""

from __future__ import annotations

import heapq

import numpy as np

from sim.kernel.arrivals import ARRIVAL_TIE_S

API_SERVERS_STREAM = 1000
"""The spawn key of the API servers' generator under the run's seed: no other draw of a run uses it (the router
draws from the seed's child 0, a generated workload from its children 0 to 2), so ties drawn here move nothing
else, and adding API servers changes no other stream."""


def front_rng(seed: int) -> np.random.Generator:
    """The API servers' own generator for a run seeded ``seed``."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(API_SERVERS_STREAM,)))


class APIServers:
    """The API servers' open connections and which server each request came through (``client_of``, by workload
    position). ``rows``: a fanned-out workload's parent row of each request (None: each request is its own)."""

    def __init__(self, count: int, rng: np.random.Generator, size: int, rows: np.ndarray | None = None) -> None:
        self.count = count
        self.rng = rng
        self.rows = rows
        self.client_of = np.zeros(size, np.int64)
        self.connections = [0] * count  # open connections of each server (requests not yet finished)
        self.children_left = np.bincount(rows) if rows is not None else None  # a request's children not done
        self.server_of_row: dict[int, int] = {}  # a fanned-out request's server, while its connection is open
        self.last_done: dict[int, float] = {}  # a fanned-out request's latest child finish so far
        self.closing: list[tuple[float, int]] = []  # heap: (when a connection closes, its server)

    def accept(self, index: int, row: int, t: float) -> int:
        """The server request ``index`` (workload row ``row``) reaches at ``t``: its request's if a sibling
        came first, else the one with the fewest connections open (a seeded draw among those tied)."""
        if self.count == 1:
            return 0
        server = self.server_of_row.get(row)
        if server is None:
            server = self._least_loaded(t)
            self.connections[server] += 1
            if self.children_left is not None and self.children_left[row] > 1:
                self.server_of_row[row] = server
        self.client_of[index] = server
        return server

    def leaves(self, t: float, index: int) -> None:
        """Request ``index`` finished (or was rejected) at ``t``: its connection closes then, once its request's
        last child has (with one server, nothing to count)."""
        if self.count == 1:
            return
        server = int(self.client_of[index])
        if self.children_left is not None:
            row = int(self.rows[index])
            self.children_left[row] -= 1
            t = max(t, self.last_done.pop(row, t))  # children finish in any order
            if self.children_left[row]:
                self.last_done[row] = t
                return
            self.server_of_row.pop(row, None)
        heapq.heappush(self.closing, (t, server))

    def _least_loaded(self, t: float) -> int:
        """The server with the fewest connections open at ``t``, a connection closing within ``ARRIVAL_TIE_S``
        after ``t`` counting as closed (as `sim.kernel.fleet_replica.Replica.in_flight` counts a finish)."""
        closing, t = self.closing, t + ARRIVAL_TIE_S
        while closing and closing[0][0] <= t:
            self.connections[heapq.heappop(closing)[1]] -= 1
        least = min(self.connections)
        tied = [s for s, n in enumerate(self.connections) if n == least]
        return tied[int(self.rng.integers(len(tied)))] if len(tied) > 1 else tied[0]
