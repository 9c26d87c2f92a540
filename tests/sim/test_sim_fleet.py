"""A fleet of replicas in one simulation: one replica is the single engine, round-robin replicas are single
runs of their shares, the fast-forward equals step by step, and the fleet's tables and summary add up."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.fleet import run_fleet
from sim.kernel.routers import ROUTERS
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_fleet_run
from workloads import Workload

FLEET_KEYS = ("wall_time_s", "replicas", "router", "load_imbalance", "per_replica", "api_server_count")


def poisson(count, rate, seed=1, prompt=(20, 400), output=(5, 300), **cols):
    rng = np.random.default_rng(seed)
    return Workload(arrival_time_s=np.cumsum(rng.exponential(1 / rate, count)),
                    prompt_tokens=rng.integers(*prompt, count), output_tokens=rng.integers(*output, count),
                    name="test", **cols)


def shared_prefixes(count, rate):
    """Requests of which every third shares one of four 256-token prefixes, some with n=2 samples."""
    groups = np.where(np.arange(count) % 3 == 0, np.arange(count) % 4, -1)
    return poisson(count, rate, prompt=(300, 600), prefix_group=groups, prefix_len=np.where(groups >= 0, 256, 0),
                   n=np.where(np.arange(count) % 5 == 0, 2, 1))


@pytest.mark.parametrize("router", list(ROUTERS))
def test_one_replica_is_the_single_engine(router):
    """Every router with one replica gives today's single-replica run, table for table."""
    w = shared_prefixes(120, 6.0)
    config = SimConfig(kv_tokens=6000, prefix_caching=True, memory_snapshots=2)
    single = run_simulation(config, w)
    fleet = run_fleet(dataclasses.replace(config, router=router), w)
    assert (fleet.requests["replica"] == 0).all()
    for name in ("requests", "steps", "memory"):
        pd.testing.assert_frame_equal(getattr(fleet, name).drop(columns="replica"), getattr(single, name))
    # seed: run_simulation reports None where the run drew nothing from it and the workload is the caller's
    # own (`runner.draws_from_seed`); run_fleet, below it, reports the config's
    expected = {k: v for k, v in single.summary.items() if k not in ("wall_time_s", "seed")}
    assert single.summary["seed"] is None and fleet.summary["seed"] == 0
    assert {k: v for k, v in fleet.summary.items() if k not in (*FLEET_KEYS, "ignored_settings", "seed")} == expected
    assert fleet.summary["load_imbalance"] == 1.0
    if router != "round-robin":  # the default: a router named for one replica is reported as changing nothing
        assert fleet.summary["ignored_settings"] == {f"--router {router}": "one replica (--replicas 1): every "
                                                                          "request goes to it"}


def test_round_robin_replicas_are_single_runs_of_their_shares():
    """N identical replicas behind round-robin, on independent requests: replica r serves requests r, r+N,
    ... exactly as a single replica serving only those would (its step rows after the idle gap before its
    first request, and every per-request time). Without memory snapshots: a decode run ends where one falls
    due, and the fleet's fall over all arrivals, a share's over its own."""
    n = 3
    w = poisson(150, 9.0)
    config = SimConfig(kv_tokens=5000, memory_snapshots=0)
    fleet = run_fleet(dataclasses.replace(config, replicas=n), w)
    assert fleet.requests["replica"].tolist() == [i % n for i in range(len(w))]
    for r in range(n):
        share = w.select(np.arange(r, len(w), n))
        single = run_simulation(config, share)
        mine = fleet.requests[fleet.requests["replica"] == r].drop(columns="replica").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, single.requests)
        steps = fleet.steps[fleet.steps["replica"] == r].drop(columns="replica").reset_index(drop=True)
        if r > 0:  # the replica exists from the fleet's start: one idle row until its first request
            assert steps.loc[0, "num_steps"] == 0 and steps.loc[0, "time_s"] == w.arrival_time_s[0]
            steps = steps.iloc[1:].reset_index(drop=True)
        last = single.steps.iloc[-1]
        if last["time_s"] + last["duration_s"] < fleet.summary["sim_time_s"] + w.arrival_time_s[0]:
            # and to the fleet's end: one idle row from its last row's end, its pool as that row left it
            tail = steps.iloc[-1]
            assert tail["num_steps"] == 0 and tail["running"] == 0 and tail["time_s"] == last["time_s"] + \
                last["duration_s"] and tail["time_s"] + tail["duration_s"] == pytest.approx(
                    fleet.summary["sim_time_s"] + w.arrival_time_s[0])
            steps = steps.iloc[:-1]
        pd.testing.assert_frame_equal(steps, single.steps)
        mine_summary = fleet.summary["per_replica"][r]
        for key in ("requests", "completed", "rejected", "preemptions", "max_running", "ttft_p50_s", "ttft_p99_s",
                    "tpot_p50_s", "e2e_p50_s", "normalized_latency_s_per_tok", "prefill_tokens"):
            assert mine_summary[key] == single.summary[key], key


@pytest.mark.parametrize("router", list(ROUTERS))
def test_fast_forward_equals_step_by_step_with_replicas(router):
    """Routers read replica state; that state must not depend on how decode steps are grouped into rows."""
    w = shared_prefixes(150, 12.0)
    config = SimConfig(kv_tokens=3000, prefix_caching=True, replicas=3, router=router)
    fast = run_fleet(config, w)
    slow = run_fleet(dataclasses.replace(config, step_by_step=True), w)
    assert len(fast.steps) < len(slow.steps)
    assert fast.summary["preemptions"] > 0
    assert_same_fleet_run(fast, slow)


def test_fleet_tables_and_summary_add_up():
    w = shared_prefixes(200, 10.0)
    config = SimConfig(kv_tokens=4000, prefix_caching=True, replicas=4, router="least-kv", debug_invariants=5)
    result = run_simulation(config, w)  # run_simulation hands a fleet to run_fleet
    s = result.summary
    assert s["replicas"] == 4 and s["router"] == "least-kv" and len(s["per_replica"]) == 4
    per = s["per_replica"]
    assert [p["replica"] for p in per] == [0, 1, 2, 3]
    for key in ("requests", "completed", "rejected", "preemptions", "prefill_tokens", "cached_prompt_tokens"):
        assert sum(p[key] for p in per) == s[key], key
    assert s["completed"] == len(w)
    assert set(result.steps["replica"]) == set(result.memory["replica"]) == {0, 1, 2, 3}
    processed = [p["processed_tokens"] for p in per]
    assert s["load_imbalance"] == pytest.approx(max(processed) / np.mean(processed)) and s["load_imbalance"] >= 1
    steps = result.steps
    decoded = int((steps["decode_seqs"] * steps["num_steps"]).sum())
    assert sum(processed) == s["prefill_tokens"] + decoded
    shares = [s[k] for k in ("token_states_frac", "reservation_frac", "internal_frag_frac", "external_frag_frac",
                             "free_frac")]
    assert sum(shares) == pytest.approx(1.0)


def test_fleet_runs_are_deterministic():
    w = shared_prefixes(100, 8.0)
    config = SimConfig(kv_tokens=4000, prefix_caching=True, replicas=3, router="random", seed=5)
    a, b = run_fleet(config, w), run_fleet(config, w)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    c = run_fleet(dataclasses.replace(config, seed=6), w)
    assert c.requests["replica"].tolist() != a.requests["replica"].tolist()


def test_sweeps_vary_replicas_and_router(tmp_path):
    """`kvsim sweep` needs nothing fleet-specific: replicas and router are configuration fields like any."""
    from sim.sweep.grid import grid_from_flags
    from sim.sweep.run import run_sweep

    grid = grid_from_flags(["--replicas", "1,3", "--router", "round-robin,least-requests", "--num-requests", "30",
                            "--memory-snapshots", "0"], SimConfig)
    table = run_sweep(grid, tmp_path / "sweep.parquet").table
    assert (table["status"] == "ok").all() and len(table) == 4
    assert table["replicas"].tolist() == [1, 1, 3, 3]
    fleets = table[table["replicas"] == 3]
    assert (fleets["load_imbalance"] >= 1).all() and fleets["per_replica"].str.startswith("[").all()


@pytest.mark.parametrize("workers", [1, 3])
def test_a_replica_that_never_gets_a_request_is_idle_the_whole_run(workers):
    """A replica the router never picks (requests a second apart, each done before the next: least-requests, or
    round-robin of one request, sends all to replica 0) is one idle row over the fleet's run, and its idle
    capacity counts: the fleet's mean_running is replica 0's over three. Regression: with a hybrid pool
    (per-group step columns) such a replica once made the steps table fail; and it used to add no time, so
    the fleet's figures were replica 0's alone."""
    w = Workload(arrival_time_s=np.arange(10.0), prompt_tokens=np.full(10, 200), output_tokens=np.full(10, 20),
                 name="spaced")
    config = SimConfig(kv_tokens=8000, replicas=3, router="least-requests" if workers == 1 else "round-robin",
                       model="gemma-3-12b", gpu="h100-80gb")
    r = run_simulation(config, w.head(1) if workers > 1 else w, workers=workers)
    assert set(r.requests["replica"]) == {0}
    for n in (1, 2):
        idle = r.steps[r.steps["replica"] == n]
        assert len(idle) == 1 and idle["running"].iloc[0] == 0 and idle["time_s"].iloc[0] == 0.0
        assert idle["duration_s"].iloc[0] == pytest.approx(r.summary["sim_time_s"])
        assert r.summary["per_replica"][n]["mean_running"] == 0.0
    assert r.summary["mean_running"] == pytest.approx(r.summary["per_replica"][0]["mean_running"] / 3)
    assert "full_token_states" in r.steps.columns and r.summary["completed"] == len(r.requests)


@pytest.mark.filterwarnings("ignore:paged. --router session-affinity ignored")  # (no sessions here)
@pytest.mark.parametrize("router", sorted(ROUTERS))
def test_a_request_rejected_on_arrival_ends_the_window_under_every_router(router):
    """The run's window reaches the arrival of a request rejected on arrival after every step, as the single
    engine's does. A router that reads replica state rejects it at routing, which moved no replica's clock: the
    window ended at the last step (0.24 s where it is 5 s) and the throughputs were 20x those of round-robin."""
    w = Workload(arrival_time_s=np.array([0.0, 0.1, 5.0]), prompt_tokens=np.array([100, 100, 5000]),
                 output_tokens=np.array([10, 10, 10]), name="late")
    config = SimConfig(model="llama-3-8b", kv_tokens=2000, replicas=2, router=router, memory_snapshots=0)
    s = run_simulation(config, w).summary
    assert (s["completed"], s["rejected"], s["sim_time_s"], s["throughput_req_s"]) == (2, 1, 5.0, 0.4)
    gone = run_simulation(config, w.select(np.array([2]))).summary  # nothing runs: an empty window at 5 s
    assert (gone["rejected"], gone["sim_time_s"]) == (1, 0.0)
