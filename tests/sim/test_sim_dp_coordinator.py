"""vLLM 0.33's DP coordinator on the simulated clock (`sim.kernel.dp_coordinator`): when the engines' counts are
published, what a lock-step publish holds, the dp-lb router reading them with its local waiting bumps, and its
in-flight count."""

from dataclasses import dataclass

import numpy as np

from sim.kernel.config import SimConfig
from sim.kernel.dp_coordinator import MIN_STATS_UPDATE_INTERVAL_S, DPCoordinator
from sim.kernel.fleet import Fleet
from sim.kernel.routers import make_router
from sim.kernel.sequence_group import SequenceGroup
from workloads import Workload


@dataclass
class Engine:
    load: int = 0  # the client's in-flight count for it

    def in_flight(self, t: float, client: int = 0) -> int:
        return self.load


def arrival(t: float) -> SequenceGroup:
    return SequenceGroup(0, 0, t, 100, 10)


def test_a_burst_within_one_window_spreads_by_the_local_bumps_then_a_publish_replaces_them():
    """Two engines at 90% KV usage, published at 0: engine 0 with 1 waiting and 3 running (4 in flight), engine
    1 with 5 running (5 in flight). By hand, vLLM's scores (max(in flight, waiting + running) + waiting * 6.0 *
    (0.9 - 0.5)), the scan starting at engine 0 and moving on by one per request:

    * 0.01 s: engine 0 max(4, 4) + 1 * 2.4 = 6.4, engine 1 max(5, 5) = 5 -> 1; its waiting bumped to 1;
    * 0.02 s: from 1: engine 1 max(6, 6) + 1 * 2.4 = 8.4, engine 0 6.4 -> 0 (read as it is, engine 1 would
      score max(6, 5) = 6 and take it again); engine 0's waiting bumped to 2;
    * 0.03 s: from 0: engine 0 max(5, 5) + 2 * 2.4 = 9.8, engine 1 8.4 -> 1;
    * 0.04 s: from 1: engine 1 max(7, 7) + 2 * 2.4 = 11.8, engine 0 9.8 -> 0.

    Engine 1 reports at 0.05 s (its step took in 2 and finished 3 more: 0 waiting, 4 running, 60% usage): the
    coordinator published at 0, so it holds that report to 0.1 s; at 0.0999 s the bumped counts still stand, at
    0.1 s the publish has replaced them (the bumps gone, engine 0 back to its 1 waiting)."""
    coordinator = DPCoordinator(2, 0.0)
    coordinator.report(0.0, 0, 1, 3, 0.9)
    coordinator.report(0.0, 1, 0, 5, 0.9)
    router = make_router("dp-lb", rng=np.random.default_rng(0), coordinator=coordinator)
    engines = [Engine(4), Engine(5)]
    chosen = []
    for t in (0.01, 0.02, 0.03, 0.04):
        chosen.append(router.choose(arrival(t), engines))
        engines[chosen[-1]].load += 1
    assert chosen == [1, 0, 1, 0]
    assert coordinator.view(0.04) == [[3, 3, 0.9], [2, 5, 0.9]]
    assert coordinator.publishes == 1
    coordinator.report(0.05, 1, 0, 4, 0.6)
    assert coordinator.view(0.0999) == [[3, 3, 0.9], [2, 5, 0.9]]
    assert coordinator.view(0.1) == [[1, 3, 0.9], [0, 4, 0.6]]
    assert coordinator.publishes == 2
    # a later arrival reads the publish: engine 0 max(6, 4) + 1 * 2.4 = 8.4, engine 1 max(6, 4) = 6 (start at 0)
    assert router.choose(arrival(0.2), engines) == 1


def test_reports_after_a_quiet_100_ms_are_published_at_once_else_at_the_end_of_the_100_ms():
    coordinator = DPCoordinator(2, 10.0)
    coordinator.report(10.0, 0, 1, 0, 0.1)  # the run's start finds the coordinator quiet: published at once
    assert coordinator.view(10.0) == [[1, 0, 0.1], [0, 0, 0.0]]
    coordinator.report(10.03, 1, 1, 0, 0.2)
    coordinator.report(10.06, 0, 0, 1, 0.3)
    assert coordinator.view(10.0999)[1] == [0, 0, 0.0]
    assert coordinator.view(10.1) == [[0, 1, 0.3], [1, 0, 0.2]]
    assert coordinator.publishes == 2
    coordinator.report(10.7, 1, 0, 1, 0.25)  # 0.6 s after the last publish: at once
    assert coordinator.view(10.7)[1] == [0, 1, 0.25]


def test_without_reports_it_publishes_every_5_s_and_so_clears_the_local_bumps():
    coordinator = DPCoordinator(2, 0.0)
    coordinator.report(0.0, 0, 0, 2, 0.4)
    coordinator.view(0.0)[1][0] += 1  # the client's bump
    assert coordinator.view(4.9999)[1] == [1, 0, 0.0]
    assert coordinator.view(5.0)[1] == [0, 0, 0.0]
    assert coordinator.publishes == 2


def test_an_engine_sends_its_usage_only_with_a_count_change():
    """vLLM's ``_maybe_publish_request_counts`` compares (running, waiting) with the counts it last sent."""
    coordinator = DPCoordinator(1, 0.0)
    coordinator.report(0.0, 0, 1, 2, 0.3)
    coordinator.report(0.5, 0, 1, 2, 0.8)  # the same counts, more KV: no message
    assert coordinator.view(1.0) == [[1, 2, 0.3]]
    coordinator.report(1.5, 0, 2, 1, 0.8)
    assert coordinator.view(1.5) == [[2, 1, 0.8]]


def test_lock_step_ranks_publish_the_counts_of_a_step_boundary():
    """Wave coordination (a mixture of experts): at 0 rank 0 takes in a request (step 0's report); the poll then
    waits at least 50 ms. At the boundary at 0.02 s rank 0 reports step 0's end (running it), and rank 1 takes in a
    request, the first report stamped step 1: the counts as they stood before it are copied, and published at
    once (100 ms since the last publish): rank 1's waiting request is not in it. The counts as they are follow
    100 ms later, no boundary having come."""
    coordinator = DPCoordinator(2, 0.0, wave_coordination=True)
    coordinator.report(0.0, 0, 1, 0, 0.1, step=0)
    assert coordinator.view(0.0) == [[0, 0, 0.0], [0, 0, 0.0]]  # held at least 50 ms
    coordinator.report(0.02, 0, 0, 1, 0.1, step=0)
    coordinator.report(0.02, 1, 1, 0, 0.2, step=1)
    assert coordinator.view(0.02) == [[0, 1, 0.1], [0, 0, 0.0]]
    assert coordinator.view(0.1199) == [[0, 1, 0.1], [0, 0, 0.0]]
    assert coordinator.view(0.1201) == [[0, 1, 0.1], [1, 0, 0.2]]
    assert coordinator.publishes == 2


def test_a_request_stays_in_flight_until_its_last_step_ends():
    """The replica's scheduler lets a request go when it plans its last step; vLLM's client counts it until
    that step's output comes back (``process_engine_outputs``)."""
    w = Workload(arrival_time_s=np.array([0.0, 0.5]), prompt_tokens=np.array([100, 100]),
                 output_tokens=np.array([5, 5]), name="test")
    replica = Fleet(SimConfig(kv_tokens=3000, data_parallel_size=2), w).replicas[0]
    replica.routed()  # routed by the one API server, whose output comes back at 1.0
    replica.leaves_at(1.0)
    assert (replica.load, replica.in_flight(0.5), replica.in_flight(1.0)) == (0, 1, 0)


def test_a_data_parallel_run_publishes_at_most_every_100_ms():
    rng = np.random.default_rng(5)
    w = Workload(arrival_time_s=np.cumsum(rng.exponential(1 / 20, 300)), prompt_tokens=rng.integers(50, 600, 300),
                 output_tokens=rng.integers(5, 200, 300), name="test")
    fleet = Fleet(SimConfig(kv_tokens=4000, data_parallel_size=3, memory_snapshots=0), w)
    end = fleet.run()
    assert end / MIN_STATS_UPDATE_INTERVAL_S / 2 < fleet.coordinator.publishes <= end / MIN_STATS_UPDATE_INTERVAL_S + 1
