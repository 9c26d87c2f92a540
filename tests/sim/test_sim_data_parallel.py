"""``--data-parallel-size``: N replicas of one engine behind vLLM's data-parallel load balancer (``dp-lb``, the
default router then), the same run as that fleet; the balancer's score on hand-made states; the clock of a
mixture of experts' ranks; determinism."""

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import pytest

from allocators.catalog import get_gpu, get_model
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import StepCostModel
from sim.kernel.data_parallel import data_parallel_exchange
from sim.kernel.dp_coordinator import DPCoordinator
from sim.kernel.routers import make_router
from sim.kernel.runner import run_simulation
from sim.kernel.sequence_group import SequenceGroup
from workloads import Workload


@dataclass
class FakeReplica:
    load: int = 0  # the client's in-flight count for it

    def in_flight(self, t: float, client: int = 0) -> int:
        return self.load


GROUP = SequenceGroup(0, 0, 0.0, 100, 10)


def poisson(count: int, rate: float, seed: int = 3) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(arrival_time_s=np.cumsum(rng.exponential(1 / rate, count)),
                    prompt_tokens=rng.integers(50, 600, count), output_tokens=rng.integers(5, 200, count),
                    name="test")


def test_the_default_router_is_vllms_balancer_only_for_data_parallelism():
    assert SimConfig().router == "round-robin"
    assert SimConfig(replicas=4).router == "round-robin"
    dp = SimConfig(data_parallel_size=4)
    assert (dp.router, dp.replicas) == ("dp-lb", 4)
    assert SimConfig(data_parallel_size=4, router="least-requests").router == "least-requests"  # given: kept
    assert SimConfig.from_dict(dp.to_dict()) == dp  # config.json round trip: replicas == data_parallel_size
    with pytest.raises(ValueError, match="give --data-parallel-size 4 .* or --replicas 2, not both"):
        SimConfig(data_parallel_size=4, replicas=2)
    with pytest.raises(ValueError, match="--data-parallel-size must be a positive integer"):
        SimConfig(data_parallel_size=0)


def balancer(engines: int, **reported):
    """A dp-lb router over ``engines`` engines whose coordinator has published ``reported`` (engine ->
    (waiting, running, kv_cache_usage)) at time 0, and that coordinator."""
    coordinator = DPCoordinator(engines, 0.0)
    for engine, counts in reported.items():
        coordinator.report(0.0, int(engine[1:]), *counts)
    return make_router("dp-lb", rng=np.random.default_rng(0), coordinator=coordinator), coordinator


def test_the_balancer_takes_fewest_in_flight_and_penalises_a_published_queue_on_a_full_cache():
    router, _ = balancer(3)
    assert router.choose(GROUP, [FakeReplica(3), FakeReplica(1), FakeReplica(2)]) == 1
    # 2 waiting, 2 running at 90% usage: max(4, 4) + 2 * 6 * 0.4 = 8.8 against 6; at 50% usage no penalty: 4
    router, _ = balancer(2, e0=(2, 2, 0.9))
    assert router.choose(GROUP, [FakeReplica(4), FakeReplica(6)]) == 1
    router, _ = balancer(2, e0=(2, 2, 0.5))
    assert router.choose(GROUP, [FakeReplica(4), FakeReplica(6)]) == 0
    # a published count above the client's in flight (requests it finished since) is what the score takes
    router, _ = balancer(2, e0=(0, 9, 0.0))
    assert router.choose(GROUP, [FakeReplica(4), FakeReplica(6)]) == 1


def test_ties_go_to_the_first_from_a_scan_start_that_moves_on_each_request():
    """Equal engines: the scan start rotates by one per request, so equal scores go round-robin (vLLM's
    eng_start_index), and a lower score anywhere still wins."""
    router, coordinator = balancer(3)
    same = [FakeReplica() for _ in range(3)]
    assert [router.choose(GROUP, same) for _ in range(5)] == [0, 1, 2, 0, 1]
    assert [waiting for waiting, _, _ in coordinator.lb_engines] == [2, 2, 1]  # the local bumps since the publish
    # start at 2: max(3, 1) = 3 there, max(0, 2) = 2 on engine 0, the lowest
    assert router.choose(GROUP, [FakeReplica(0), FakeReplica(3), FakeReplica(3)]) == 0


@pytest.mark.parametrize("router", [None, "least-requests"])
def test_a_data_parallel_run_is_the_same_fleet_run(router):
    """A dense model: --data-parallel-size 3 is --replicas 3 behind the same router (dp-lb by default), table for
    table and in the summary."""
    w = poisson(150, 12.0)
    dp = SimConfig(kv_tokens=4000, data_parallel_size=3, router=router, memory_snapshots=2)
    fleet = replace(dp, data_parallel_size=1, replicas=3, router=dp.router)
    a, b = run_simulation(dp, w), run_simulation(fleet, w)
    for name in ("requests", "steps", "memory"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name))
    skip = ("wall_time_s",)
    assert {k: v for k, v in a.summary.items() if k not in skip} == {k: v for k, v in b.summary.items()
                                                                     if k not in skip}
    assert a.summary["router"] == dp.router and a.requests["replica"].nunique() == 3


def test_a_data_parallel_run_is_deterministic():
    w = poisson(120, 10.0, seed=8)
    config = SimConfig(kv_tokens=3000, data_parallel_size=4)
    first, second = run_simulation(config, w), run_simulation(config, w)
    pd.testing.assert_frame_equal(first.requests, second.requests)
    pd.testing.assert_frame_equal(first.steps, second.steps)
    assert ({k: v for k, v in first.summary.items() if k != "wall_time_s"}
            == {k: v for k, v in second.summary.items() if k != "wall_time_s"})


def test_a_mixture_of_experts_rank_holds_its_share_and_says_what_its_clock_leaves_out():
    """DeepSeek-V3 on 8 ranks of one H200 each, with EP: each rank's pool is kv_capacity's for the rank, and the clock
    notes the expert exchange its lock-step clock does not charge."""
    w = poisson(40, 4.0)
    config = SimConfig(model="deepseek-v3", gpu="h200", data_parallel_size=8, enable_expert_parallel=True,
                       memory_snapshots=0)
    with pytest.warns(UserWarning, match="--enable-expert-parallel ignored: its 8 GPUs divide"):
        result = run_simulation(config, w)
    without = run_simulation(replace(config, enable_expert_parallel=False), w)  # the same bytes either way
    assert without.summary["kv_capacity_tokens"] == result.summary["kv_capacity_tokens"]
    assert result.summary["replicas"] == 8 and result.summary["router"] == "dp-lb"
    assert result.summary["kv_capacity_tokens"] == 488_290
    assert data_parallel_exchange(8) in result.summary["clock_omits"]
    dense = run_simulation(SimConfig(kv_tokens=3000, data_parallel_size=2, memory_snapshots=0), w)
    assert "clock_omits" not in dense.summary  # a dense model's ranks are independent in vLLM too


def test_the_clock_reads_a_gpus_share_of_the_experts_as_every_ranks_tokens_touch_them():
    model, gpu = get_model("deepseek-v3"), get_gpu("h200")
    one = StepCostModel(model, gpu)
    dp8 = StepCostModel(model, gpu, data_parallel=8, expert_parallel=True)
    assert dp8._t_weights == one._t_weights
    assert dp8._t_routed == pytest.approx(one._t_routed / 8, rel=1e-12)
    from allocators.roofline import expert_read_fraction

    assert dp8.weights_time(3) == pytest.approx(dp8._t_weights + dp8._t_routed * expert_read_fraction(model, 24))
    assert StepCostModel(model, gpu, tensor_parallel=8).weights_time(3) == StepCostModel(
        model, gpu, tensor_parallel=8, data_parallel=1).weights_time(3)
