"""A mixture of experts' data-parallel ranks step in lock-step (`sim.kernel.lockstep`): every rank's step lasts the
slowest rank's, a rank with nothing to run runs a dummy batch while the wave lasts, the wave pauses only at vLLM's
all-reduce steps; the ranks decide as they would alone; runs are deterministic; dense ranks stay independent."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from allocators.catalog import get_gpu, get_model
from sim.kernel.config import SimConfig
from sim.kernel.data_parallel import DP_SYNC_INTERVAL, data_parallel_exchange, steps_in_lockstep
from sim.kernel.fleet_parallel import parallel_note, runs_in_parallel
from sim.kernel.lockstep import dummy_step_s
from sim.kernel.replica import make_cost_model
from sim.kernel.runner import run_simulation
from workloads import Workload
from workloads.named import generate


def moe(**changes) -> SimConfig:
    """DeepSeek-V3 on two data-parallel H200s, routed round-robin (a fresh config: ``replicas`` follows the size)."""
    return SimConfig(**{"model": "deepseek-v3", "gpu": "h200", "data_parallel_size": 2, "router": "round-robin",
                        "kv_tokens": 200_000, "memory_snapshots": 0, **changes})


MOE = moe()


def workload(arrivals, prompts, outputs) -> Workload:
    return Workload(arrival_time_s=np.array(arrivals, float), prompt_tokens=np.array(prompts),
                    output_tokens=np.array(outputs), name="test")


def cost_of(config: SimConfig):
    return make_cost_model(config, get_model(config.model), get_gpu(config.gpu))


def rows(result, replica: int) -> pd.DataFrame:
    return result.steps[result.steps["replica"] == replica].reset_index(drop=True)


def prefill_s(cost, tokens: int) -> float:
    """A first prefill chunk of ``tokens`` tokens, priced as the engine prices it (`engine.step_seconds`)."""
    return cost.step_time(tokens, 0, tokens, 0, 0, tokens * (tokens + 1) // 2, prefill_seqs=1)


def test_the_lighter_ranks_step_is_stretched_to_the_slowest_ranks():
    """Rank 0 prefills 1000 tokens, rank 1 100 (round-robin): both rows last the 1000-token prefill, so rank 1's
    request gets its first token when rank 0's does; then both decode, at rank 0's longer context."""
    w = workload([0.0, 0.0], [1000, 100], [2, 2])
    result = run_simulation(MOE, w)
    cost = cost_of(MOE)
    slow, fast = prefill_s(cost, 1000), prefill_s(cost, 100)
    assert fast < slow
    r0, r1 = rows(result, 0), rows(result, 1)
    assert r0["time_s"].tolist() == r1["time_s"].tolist() == [0.0, slow]
    assert r0["duration_s"][0] == r1["duration_s"][0] == slow
    assert r0["prefill_tokens"].tolist() == [1000, 0] and r1["prefill_tokens"].tolist() == [100, 0]
    decode = cost.step_time(0, 1, 1001, 0, 0, 1001, prefill_seqs=0)  # rank 0's decode reads the longer context
    assert decode > cost.step_time(0, 1, 101, 0, 0, 101, prefill_seqs=0)
    assert r0["duration_s"][1] == r1["duration_s"][1] == decode
    req = result.requests.sort_values("replica")
    assert req["first_token_s"].tolist() == [slow, slow]
    assert req["finished_s"].tolist() == [slow + decode] * 2
    assert result.summary["lockstep_steps"] == 2 and result.summary["lockstep_dummy_batches"] == 0
    assert data_parallel_exchange(2) in result.summary["clock_omits"]


def test_an_idle_rank_runs_dummy_batches_while_the_other_works_and_the_wave_pauses_at_a_sync_step():
    """One request on rank 0 for 3 steps; a second arrives at 100 s. Rank 1 runs a dummy batch every step rank 0
    works; after the request leaves both run dummy batches up to the wave's next all-reduce (step 16), then pause
    until the arrival, which starts a new wave on both ranks."""
    w = workload([0.0, 100.0], [200, 200], [3, 3])  # round-robin: one each
    result = run_simulation(MOE, w)
    cost = cost_of(MOE)
    dummy = dummy_step_s(cost)
    r0, r1 = rows(result, 0), rows(result, 1)
    assert r0["time_s"].tolist() == r1["time_s"].tolist()
    np.testing.assert_allclose(r1["duration_s"], r0["duration_s"], rtol=0, atol=1e-12)
    first_wave = DP_SYNC_INTERVAL  # 3 steps of work, then dummy batches to the 16th step's all-reduce
    assert r0["num_steps"].tolist()[:first_wave] == [1, 1, 1] + [0] * (first_wave - 3)
    assert r1["num_steps"].tolist()[:first_wave] == [0] * first_wave
    assert (r1["running"][:first_wave] == 0).all()
    np.testing.assert_allclose(r0["duration_s"][3:first_wave], dummy, rtol=1e-12)
    pause = r0.iloc[first_wave]  # both ranks idle from the end of step 16 to the arrival
    assert pause["num_steps"] == 0 and pause["time_s"] + pause["duration_s"] == pytest.approx(100.0)
    # the second wave: rank 1 works, rank 0 runs dummy batches; the run ends as its request leaves
    assert r1["num_steps"].tolist()[first_wave + 1:] == [1, 1, 1]
    assert r0["num_steps"].tolist()[first_wave + 1:] == [0, 0, 0]
    assert result.summary["lockstep_steps"] == first_wave + 3
    assert result.summary["lockstep_dummy_batches"] == first_wave + (first_wave - 3) + 3
    assert result.requests["first_token_s"].tolist() == [r0["duration_s"][0], 100.0 + r1["duration_s"][first_wave + 1]]


def test_each_rank_decides_as_it_would_alone():
    """Everything arriving at once, routed round-robin: each rank's steps schedule the same tokens as a single
    engine given its requests (stepping singly), only their times differ."""
    rng = np.random.default_rng(5)
    n = 12
    w = workload(np.zeros(n), rng.integers(100, 1500, n), rng.integers(20, 200, n))
    config = moe(kv_tokens=3000, max_num_seqs=8)
    result = run_simulation(config, w)
    alone = replace(config, data_parallel_size=1, replicas=1, router=None, step_by_step=True)
    cols = ["prefill_tokens", "decode_seqs", "context_tokens", "running", "preempted"]
    for rank in range(2):
        mine = np.flatnonzero(np.arange(n) % 2 == rank)
        single = run_simulation(alone, workload(np.zeros(len(mine)), w.prompt_tokens[mine], w.output_tokens[mine]))
        worked = rows(result, rank)
        worked = worked[worked["num_steps"] > 0].reset_index(drop=True)
        pd.testing.assert_frame_equal(worked[cols], single.steps[single.steps["num_steps"] > 0][cols]
                                      .reset_index(drop=True))
    assert result.summary["preemptions"] > 0  # the small pools made the schedule non-trivial


def test_a_lockstep_run_is_deterministic():
    rng = np.random.default_rng(2)
    n = 80
    w = workload(np.cumsum(rng.exponential(0.3, n)), rng.integers(50, 2000, n), rng.integers(5, 100, n))
    config = moe(data_parallel_size=4, router=None, memory_snapshots=1)  # dp-lb, reading the ranks
    first, second = run_simulation(config, w), run_simulation(config, w)
    for name in ("requests", "steps"):
        pd.testing.assert_frame_equal(getattr(first, name), getattr(second, name))
    assert len(first.memory) and first.memory.equals(second.memory)  # a map per block: compared whole, not cell by cell
    assert ({k: v for k, v in first.summary.items() if k != "wall_time_s"}
            == {k: v for k, v in second.summary.items() if k != "wall_time_s"})
    steps = first.steps
    assert steps.groupby("replica").size().nunique() == 1  # every rank has a row for every common step
    assert first.summary["router"] == "dp-lb" and first.requests["replica"].nunique() == 4


def test_dense_ranks_and_moe_fleets_stay_independent():
    """Only a mixture of experts' data-parallel ranks step together: a dense model's (or an MoE fleet of
    --replicas) keep their own clocks, fast-forward, and split over --workers."""
    dense = SimConfig(kv_tokens=3000, data_parallel_size=2, router="round-robin")
    assert not steps_in_lockstep(dense) and runs_in_parallel(dense, 2)
    assert steps_in_lockstep(MOE) and not runs_in_parallel(MOE, 2)
    assert "lock-step" in parallel_note(MOE, 2)
    assert not steps_in_lockstep(moe(data_parallel_size=1, replicas=2))
    w = workload([0.0, 0.0], [1000, 100], [20, 20])
    result = run_simulation(dense, w)
    assert "lockstep_steps" not in result.summary
    first_token = result.requests.sort_values("replica")["first_token_s"].to_numpy()
    assert first_token[1] < first_token[0]  # each on its own clock: the short prefill is not held back


def test_session_turns_released_by_lockstep_ranks_arrive_their_think_time_after_the_turn_before():
    """Closed-loop turns: a turn is known only once the one before leaves, on whichever rank; the lock-step loop
    routes it at its time (dp-lb reads the ranks) and every request runs."""
    w = generate("lognormal:prompt_mean=300,prompt_cv=1,output_mean=60,output_cv=1,max_total=3000",
                 "constant:rate=2", 30, seed=0, turns=3, think_time_s=2.5)
    r = run_simulation(moe(router=None, kv_tokens=20_000), w).requests
    later = w.turn > 0
    previous = np.flatnonzero(later) - 1
    np.testing.assert_allclose(r["arrival_s"][later], r["finished_s"].to_numpy()[previous] + 2.5, rtol=0, atol=5e-10)
    assert r["finished_s"].notna().all() and r["replica"].nunique() == 2
