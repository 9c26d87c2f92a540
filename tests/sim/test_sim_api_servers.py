"""``--api-server-count``: vLLM's API server processes in front of data-parallel engines (`sim.kernel.api_servers`),
each running the ``dp-lb`` balancer for the requests that reach it; which server a request reaches; vLLM's
default (one per engine); what is refused; one server is the balancer as it was."""

from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import pytest

from sim.kernel.api_servers import APIServers, front_rng
from sim.kernel.config import SimConfig
from sim.kernel.dp_coordinator import DPCoordinator
from sim.kernel.ignored_settings import SettingWarning
from sim.kernel.routers import make_router
from sim.kernel.runner import run_simulation
from sim.kernel.sequence_group import SequenceGroup
from tests.sim.summaries import assert_same_fleet_run
from workloads import Workload


class FirstTied:
    """A generator stand-in whose draw among tied servers is always the first of them."""

    def integers(self, n: int) -> int:
        return 0


@dataclass
class Engine:
    routed: Counter = field(default_factory=Counter)  # each API server's requests in flight here

    def in_flight(self, t: float, client: int = 0) -> int:
        return self.routed[client]


def route_burst(servers: int, times: list[float]) -> tuple[list[int], list[int], DPCoordinator]:
    """Route one request at each of ``times`` over two idle engines behind ``servers`` API servers (ties among
    servers to the first), as the fleet does (`Fleet._route`: the chosen engine counts the request in flight for
    its server); the engines chosen, the servers reached, and the coordinator."""
    coordinator = DPCoordinator(2, 0.0, clients=servers)
    front = APIServers(servers, FirstTied(), len(times))
    router = make_router("dp-lb", rng=np.random.default_rng(0), coordinator=coordinator, api_servers=front)
    engines = [Engine(), Engine()]
    chosen = []
    for i, t in enumerate(times):
        engine = router.choose(SequenceGroup(i, i, t, 100, 10), engines)
        engines[engine].routed[int(front.client_of[i])] += 1
        chosen.append(engine)
    return chosen, front.client_of.tolist(), coordinator


def test_two_api_servers_split_a_burst_by_their_own_counts():
    """Two idle engines, published idle at 0 (no report before 4.9 s: no publish in the burst); requests a, b,
    c, d at 10, 20, 30, 40 ms. vLLM 0.33 (``DPLBAsyncMPClient``, client_count = 2): server k starts its scan at
    ``eng_start_index = 2 * k // 2 = k``; score = max(2 * its own in flight, waiting + running) from its own copy
    of the counts; the chosen engine's waiting += 2 in that copy only; its start moves on by one. A request
    reaches the server with the fewest open connections (ties: the first here):

    * a: connections (0, 0), server 0; from engine 0: e0 max(0, 0) = 0, e1 0 -> e0 (the first lowest); server
      0's copy: e0 waiting 2; its start 1;
    * b: connections (1, 0), server 1; from engine 1: e1 max(0, 0) = 0, e0 max(2 * 0, 0) = 0 (server 1 neither
      routed there nor sees server 0's bump) -> e1; server 1's copy: e1 waiting 2; its start 0;
    * c: connections (1, 1), server 0; from engine 1: e1 max(0, 0) = 0, e0 max(2 * 1, 2 + 0) = 2 -> e1; server
      0's copy: e1 waiting 2; its start 0;
    * d: connections (2, 1), server 1; from engine 0: e0 max(0, 0) = 0, e1 max(2 * 1, 2) = 2 -> e0.

    So e0, e1, e1, e0, each copy holding only its own server's bumps (2 per request). One server
    (client_count 1, bumps of 1, start 0): a e0; b from e1: e1 0, e0 max(1, 1) = 1 -> e1; c from e0: 1 and 1 ->
    e0; d from e1 -> e1: e0, e1, e0, e1."""
    chosen, servers, coordinator = route_burst(2, [0.01, 0.02, 0.03, 0.04])
    assert (chosen, servers) == ([0, 1, 1, 0], [0, 1, 0, 1])
    assert [[w for w, _, _ in copy] for copy in coordinator.copies] == [[2, 2], [2, 2]]
    assert coordinator.publishes == 0
    chosen, servers, coordinator = route_burst(1, [0.01, 0.02, 0.03, 0.04])
    assert (chosen, servers) == ([0, 1, 0, 1], [0, 0, 0, 0])
    assert [w for w, _, _ in coordinator.lb_engines] == [2, 2]


def test_a_publish_reaches_every_server_and_replaces_its_bumps():
    coordinator = DPCoordinator(2, 0.0, clients=3)
    coordinator.view(0.0, 1)[0][0] += 3  # server 1's bump
    assert coordinator.view(0.0, 0) == [[0, 0, 0.0], [0, 0, 0.0]] and coordinator.view(0.0, 1)[0][0] == 3
    coordinator.report(0.01, 1, 2, 5, 0.4)  # after a quiet 100 ms: published at once
    assert all(coordinator.view(0.01, k) == [[0, 0, 0.0], [2, 5, 0.4]] for k in range(3))


def test_a_request_reaches_the_server_with_fewest_open_and_its_children_follow_it():
    """Rows 0 (two children), 1 and 2 (one each). Row 0 at 0 s: a tie (the first); its second child goes through
    the same server without opening another connection. Row 1 at 1 s: the other server. Row 0's children finish
    at 3 s and 2 s (reported in that order): its connection closes at 3 s, the later. At 2.5 s both servers hold
    one connection (a tie); at 3 s server 0 holds none."""
    rows = np.array([0, 0, 1, 2])
    front = APIServers(2, FirstTied(), 4, rows)
    assert front.accept(0, 0, 0.0) == 0 and front.accept(1, 0, 0.0) == 0
    assert front.accept(2, 1, 1.0) == 1
    front.leaves(3.0, 0)
    front.leaves(2.0, 1)
    assert front.connections == [1, 1] and front.closing == [(3.0, 0)]
    assert front._least_loaded(2.5) == 0 and front.connections == [1, 1]  # tied: the first
    assert front._least_loaded(3.0) == 0 and front.connections == [0, 1]  # row 0's closed at 3 s
    # ties are drawn from the servers' own generator, seeded by the run: the same seed, the same draw
    drawn = [APIServers(4, front_rng(7), 1).accept(0, 0, 0.0) for _ in range(3)]
    assert len(set(drawn)) == 1


@pytest.mark.filterwarnings("ignore:.*--router dp-lb ignored")
def test_vllms_default_is_one_api_server_per_engine_and_what_is_refused():
    assert SimConfig(data_parallel_size=4).api_servers == 4
    assert SimConfig(replicas=3, router="dp-lb").api_servers == 3
    assert SimConfig(replicas=3).api_servers == 1 and SimConfig().api_servers == 1
    assert SimConfig(data_parallel_size=4, api_server_count=2).api_servers == 2
    with pytest.raises(ValueError, match=r"^--api-server-count must be a positive integer, got 0$"):
        SimConfig(data_parallel_size=2, api_server_count=0)
    with pytest.raises(ValueError, match="--api-server-count 2: only vLLM's data-parallel load balancer "
                                         r"\(--router dp-lb\) routes per API server; with --router round-robin"):
        SimConfig(data_parallel_size=2, router="round-robin", api_server_count=2)
    assert SimConfig(api_server_count=1).api_servers == 1  # one is what any run has
    # one engine: nothing to balance, reported ignored rather than refused (`kvsim plan` brackets from one replica)
    w = poisson(5, 10.0)
    with pytest.warns(SettingWarning, match="--api-server-count 2 ignored: one engine"):
        summary = run_simulation(SimConfig(router="dp-lb", api_server_count=2, kv_tokens=3000), w).summary
    assert summary["ignored_settings"]["--api-server-count 2"] == ("one engine (--replicas 1): every API server "
                                                                  "sends every request to it")


def poisson(count: int, rate: float, seed: int = 3, n=None) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(arrival_time_s=np.cumsum(rng.exponential(1 / rate, count)),
                    prompt_tokens=rng.integers(50, 600, count), output_tokens=rng.integers(5, 200, count),
                    n=n if n is None else n(rng, count), name="test")


@pytest.mark.parametrize("servers", [None, 1, 2])
def test_fast_forward_equals_step_by_step_with_several_api_servers(servers):
    """Children (n of 2 to 4 on a third of the requests) go through their request's server; the servers'
    counts and connections must not depend on how decode steps are grouped."""
    w = poisson(150, 14.0, n=lambda rng, k: np.where(rng.random(k) < 1 / 3, rng.integers(2, 5, k), 1))
    config = SimConfig(kv_tokens=3000, data_parallel_size=3, memory_snapshots=2, api_server_count=servers)
    fast = run_simulation(config, w)
    slow = run_simulation(replace(config, step_by_step=True), w)
    assert len(fast.steps) < len(slow.steps)
    assert_same_fleet_run(fast, slow)
    assert fast.summary["api_server_count"] == (servers or 3)


def test_the_default_changes_the_routing_and_one_server_keeps_it():
    """One server is the balancer kvsim ran before ``--api-server-count`` (commit 18fe061, the default then): its
    choices and figures, taken from that commit; vLLM's default of three servers routes differently; the run is
    deterministic either way."""
    w = poisson(200, 20.0)
    one = run_simulation(SimConfig(kv_tokens=3000, data_parallel_size=3, api_server_count=1), w)
    replica = one.requests["replica"].to_numpy()
    assert np.bincount(replica).tolist() == [63, 70, 67]
    assert "".join(map(str, replica[:60])) == "012012012012012022102112002020121212220220120122101012021112"
    assert (one.summary["ttft_p99_s"], one.summary["preemptions"]) == (12.745065328238452, 49)
    three = run_simulation(SimConfig(kv_tokens=3000, data_parallel_size=3), w)
    again = run_simulation(SimConfig(kv_tokens=3000, data_parallel_size=3), w)
    pd.testing.assert_frame_equal(three.requests, again.requests)
    assert one.requests["replica"].tolist() != three.requests["replica"].tolist()
    assert (one.summary["api_server_count"], three.summary["api_server_count"]) == (1, 3)
