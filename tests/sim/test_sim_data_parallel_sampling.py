"""A request sampled n > 1 times behind vLLM's data-parallel load balancer (``dp-lb``): vLLM's front end fans it
out into n child requests before it routes (``AsyncLLM.add_request``), so each child is routed on its own, bumping
its engine's counts as any request does; an HTTP router in front of separate servers (every other router) still
sends the request whole. The requests table keeps one row per request; each replica's summary counts the
children it ran."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_fleet_run
from workloads import Workload


def sampled(arrivals: list[float], n: list[int], prompt: list[int], output: list[int]) -> Workload:
    return Workload(arrival_time_s=np.array(arrivals), prompt_tokens=np.array(prompt),
                    output_tokens=np.array(output), n=np.array(n), name="sampled")


def per_replica(result, key: str) -> list:
    return [r[key] for r in result.summary["per_replica"]]


def test_children_are_routed_one_by_one_as_the_scan_start_and_bumps_dictate():
    """Two idle ranks. Request A (100 tokens, n = 4) at 0: child 0 ties at 0 and takes the scan start, rank 0, whose
    waiting and in-flight counts go to 1, and the start moves to rank 1; child 1 scores 0 there (1 on rank 0): rank
    1; child 2 scans from rank 0, both at 1, the first lowest: rank 0; child 3 from rank 1, 1 against 2: rank 1. So
    0, 1, 0, 1: each rank computes the prompt once and its second child hits the 6 full blocks (96 tokens), 2 x 96
    where a request routed whole hits 3 x 96. Request B (200 tokens, n = 3) at 1 s, A long done and the ranks'
    idle counts published: the start is back at rank 0 (four moves), so 0, 1, 0 and one hit of 12 blocks (192).
    One API server (``--api-server-count 1``; two, vLLM's default here, in `tests.sim.test_sim_api_servers`)."""
    w = sampled([0.0, 1.0], [4, 3], [100, 200], [10, 10])
    dp = run_simulation(SimConfig(data_parallel_size=2, step_time=0.01, debug_invariants=1, api_server_count=1), w)
    assert dp.summary["router"] == "dp-lb" and dp.summary["parallel_sampling"] == "fan-out"
    assert per_replica(dp, "requests") == [2 + 2, 2 + 1]  # the child requests each engine ran
    assert dp.requests["cached_tokens"].tolist() == [2 * 96, 192]
    first = dp.steps[dp.steps["num_steps"] > 0].groupby("replica")["prefill_tokens"].first().tolist()
    assert first == [100 + 4, 100 + 4]  # each rank's first step: the prompt, then its sibling's last block
    # the table keeps one row per request (its n, the children folded back), on its first child's rank
    assert dp.requests["replica"].tolist() == [0, 0] and dp.requests["n"].tolist() == [4, 3]
    assert dp.summary["completed"] == 2 and sum(per_replica(dp, "completed")) == 4 + 3
    assert sum(per_replica(dp, "cached_prompt_tokens")) == dp.summary["cached_prompt_tokens"]
    # --replicas 2 --router dp-lb models the same client: the same run; an HTTP router sends each request whole
    fleet = run_simulation(SimConfig(replicas=2, router="dp-lb", step_time=0.01, api_server_count=1), w)
    pd.testing.assert_frame_equal(fleet.requests, dp.requests)
    whole = run_simulation(SimConfig(data_parallel_size=2, router="round-robin", step_time=0.01), w)
    assert whole.requests["replica"].tolist() == [0, 1] and per_replica(whole, "requests") == [1, 1]
    assert whole.requests["cached_tokens"].tolist() == [3 * 96, 2 * 192]


def test_a_mixture_of_experts_lockstep_run_routes_children_one_by_one_too():
    """DeepSeek-V3 on two lock-step ranks (`sim.kernel.lockstep` routes through the same fleet): n = 2 at 0 on idle
    ranks puts one child on each."""
    config = SimConfig(model="deepseek-v3", gpu="h200", data_parallel_size=2, kv_tokens=200_000, memory_snapshots=0)
    result = run_simulation(config, sampled([0.0], [2], [300], [4]))
    assert per_replica(result, "requests") == [1, 1] and result.requests["cached_tokens"].tolist() == [0]


def busy(count: int = 120, rate: float = 14.0, seed: int = 4) -> Workload:
    """Poisson arrivals, a third of them sampled 2 to 5 times: enough load on a small pool for preemptions."""
    rng = np.random.default_rng(seed)
    n = np.where(rng.random(count) < 1 / 3, rng.integers(2, 6, count), 1)
    return Workload(arrival_time_s=np.cumsum(rng.exponential(1 / rate, count)),
                    prompt_tokens=rng.integers(50, 500, count), output_tokens=rng.integers(5, 200, count), n=n,
                    name="busy")


@pytest.fixture(scope="module")
def dp_runs():
    w = busy()
    config = SimConfig(kv_tokens=3000, data_parallel_size=3, memory_snapshots=2)
    return w, config, run_simulation(config, w)


def test_a_data_parallel_run_with_samples_is_deterministic(dp_runs):
    w, config, first = dp_runs
    second = run_simulation(config, w)
    for name in ("requests", "steps", "memory"):
        pd.testing.assert_frame_equal(getattr(first, name), getattr(second, name))
    assert ({k: v for k, v in first.summary.items() if k != "wall_time_s"}
            == {k: v for k, v in second.summary.items() if k != "wall_time_s"})
    assert sum(per_replica(first, "requests")) == int(w.n.sum())  # every child counted where it ran
    assert len(first.requests) == len(w) and first.requests["n"].tolist() == w.n.tolist()


def test_fast_forward_equals_step_by_step_with_children_routed_one_by_one(dp_runs):
    """Each child's routing reads the ranks' state; that must not depend on how decode steps are grouped."""
    w, config, fast = dp_runs
    slow = run_simulation(replace(config, step_by_step=True), w)
    assert len(fast.steps) < len(slow.steps) and fast.summary["preemptions"] > 0
    assert_same_fleet_run(fast, slow)
    assert per_replica(fast, "requests") == per_replica(slow, "requests")
    assert per_replica(fast, "cached_prompt_tokens") == per_replica(slow, "cached_prompt_tokens")
