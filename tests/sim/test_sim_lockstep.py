"""A mixture of experts' data-parallel ranks step in lock-step (`sim.kernel.lockstep`): every rank's step lasts the
slowest rank's, a rank with nothing to run runs a dummy batch while the wave lasts, the wave pauses only at vLLM's
all-reduce steps; the routed experts of every rank run the sum of the ranks' tokens; the ranks decide as they would
alone; runs are deterministic; dense ranks stay independent."""

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


def prefill_s(cost, tokens: int, expert_tokens: int | None = None) -> float:
    """A first prefill chunk of ``tokens`` tokens, priced as the engine prices it (`engine.step_seconds`), its
    routed experts running ``expert_tokens`` (the common step's, `shared_expert_tokens`)."""
    return cost.step_time(tokens, 0, tokens, 0, 0, tokens * (tokens + 1) // 2, prefill_seqs=1,
                          expert_tokens=expert_tokens)


def test_the_lighter_ranks_step_is_stretched_to_the_slowest_ranks():
    """Rank 0 prefills 1000 tokens, rank 1 100 (round-robin): both rows last the 1000-token prefill (its experts
    running both ranks' 1100 tokens), so rank 1's request gets its first token when rank 0's does; then both
    decode, at rank 0's longer context, the experts running the two ranks' two tokens."""
    w = workload([0.0, 0.0], [1000, 100], [2, 2])
    result = run_simulation(MOE, w)
    cost = cost_of(MOE)
    slow, fast = prefill_s(cost, 1000, 1100), prefill_s(cost, 100, 1100)
    assert fast < slow
    r0, r1 = rows(result, 0), rows(result, 1)
    assert r0["time_s"].tolist() == r1["time_s"].tolist() == [0.0, slow]
    assert r0["duration_s"][0] == r1["duration_s"][0] == slow
    assert r0["prefill_tokens"].tolist() == [1000, 0] and r1["prefill_tokens"].tolist() == [100, 0]
    decode = cost.step_time(0, 1, 1001, 0, 0, 1001, prefill_seqs=0, expert_tokens=2)  # rank 0's: the longer context
    assert decode > cost.step_time(0, 1, 101, 0, 0, 101, prefill_seqs=0, expert_tokens=2)
    assert r0["duration_s"][1] == r1["duration_s"][1] == decode
    req = result.requests.sort_values("replica")
    assert req["first_token_s"].tolist() == [slow, slow]
    assert req["finished_s"].tolist() == [slow + decode] * 2
    assert result.summary["lockstep_steps"] == 2 and result.summary["lockstep_dummy_batches"] == 0
    assert data_parallel_exchange(2) in result.summary["clock_omits"]


def test_the_routed_experts_of_a_common_step_run_the_sum_of_the_ranks_tokens():
    """vLLM 0.33 gathers every rank's tokens into each GPU's MoE layers (all-gather dispatch), so a common step's
    routed-expert FLOPs and the expert weights it touches follow the sum of the ranks' tokens, not the heaviest
    rank's times the ranks. By hand, DeepSeek-V3 on two one-H200 ranks under the plain roofline (paper-2023: 60%
    of peak FLOP/s, 80% of HBM bandwidth, 3 ms a step and 0.236 ms a sequence, no overlap discount): rank 0
    prefills 1000 tokens, rank 1 100. Rank 0's step is compute-bound: 2 x (active - 8 experts' parameters) FLOPs
    a token of its own 1000, each GPU's half of the routed experts, 2 x 8 experts' / 2, a token of both ranks'
    1100, and 4 x layers x heads x head_dim a query-key pair of its causal triangle."""
    config = moe(cost_profile="paper-2023")
    m, gpu = get_model("deepseek-v3"), get_gpu("h200")
    routed = 2 * m.num_experts_per_tok * m.expert_params
    pairs = 1000 * 1001 // 2

    def by_hand(expert_tokens: int) -> float:
        flops = (1000 * (2 * m.active_params - routed) + expert_tokens * routed / 2
                 + pairs * 4 * m.num_layers * m.num_heads * m.head_dim)
        return 0.003 + 0.236e-3 + flops / (0.6 * gpu.bf16_tflops * 1e12)

    result = run_simulation(config, workload([0.0, 0.0], [1000, 100], [2, 2]))
    step = rows(result, 0)["duration_s"][0]
    assert step == pytest.approx(by_hand(1100), rel=1e-9) and rows(result, 1)["duration_s"][0] == step
    # the independent ranks' reading (each rank as full as rank 0: 2000 tokens through the experts) costs more
    cost = cost_of(config)
    as_full = cost.step_time(1000, 0, 1000, 0, 0, pairs, prefill_seqs=1)
    assert as_full == pytest.approx(by_hand(2000), rel=1e-9) and as_full > step * 1.2
    # the expert weights touched follow the sum too: ranks decoding 3 sequences and 1 touch what 4 tokens do
    touched = m.routed_expert_bytes / 2 * (1 - (1 - 8 / 256) ** 4)
    bandwidth = 0.8 * gpu.hbm_bandwidth_gb_s * 1e9
    assert cost.weights_time(3, 4) == pytest.approx((m.weight_bytes - m.routed_expert_bytes + touched) / bandwidth,
                                                    rel=1e-12)


def test_with_expert_parallelism_a_gpu_runs_the_common_steps_tokens_routed_to_its_whole_experts():
    """Three ranks with --enable-expert-parallel hold DeepSeek-V3's 256 experts as 86, 85 and 85: the fullest GPU
    runs 86 / 256 of the common step's routed-expert FLOPs (uniform routing), against 1 / 3 without it."""
    m = get_model("deepseek-v3")
    flops_s = 0.6 * get_gpu("h200").bf16_tflops * 1e12  # paper-2023's flops_frac; a compute-bound step
    routed = 2 * m.num_experts_per_tok * m.expert_params
    for ep, share in ((True, 86 / 256), (False, 1 / 3)):
        cost = cost_of(moe(data_parallel_size=3, enable_expert_parallel=ep, cost_profile="paper-2023"))
        one_more = (cost.step_time(2000, 0, 2000, 0, 0, 2000, prefill_seqs=1, expert_tokens=30_001)
                    - cost.step_time(2000, 0, 2000, 0, 0, 2000, prefill_seqs=1, expert_tokens=30_000))
        assert one_more == pytest.approx(routed * share / flops_s, rel=1e-6)


def test_an_idle_rank_runs_dummy_batches_while_the_other_works_and_the_wave_pauses_at_a_sync_step():
    """One request on rank 0 for 3 steps; a second arrives at 100 s. Rank 1 runs a dummy batch every step rank 0
    works; after the request leaves both run dummy batches up to the wave's next all-reduce (step 16), then pause
    until the arrival, which starts a new wave on both ranks."""
    w = workload([0.0, 100.0], [200, 200], [3, 3])  # round-robin: one each
    result = run_simulation(MOE, w)
    cost = cost_of(MOE)
    dummy = dummy_step_s(cost, 2)  # both ranks' dummy token through the experts
    r0, r1 = rows(result, 0), rows(result, 1)
    assert r0["duration_s"][0] == prefill_s(cost, 200, 201)  # the prefill's 200 tokens and the dummy batch's one
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
