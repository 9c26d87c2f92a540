"""``--parallel-sampling``: a request sampled n times runs as vLLM v1's engine runs it (``fan-out``, what ``auto``,
the default, does on `paged`), n requests sharing the prompt through the prefix cache, each admitted and
preempted alone, folded back into one row of the requests table; ``fork`` keeps the n sequences one group. Exactness against vLLM's own scheduler is the
``parallel_sampling`` case of ``test_sim_vllm_parity.py``."""

import dataclasses

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.parallel_sampling import aggregate, fan_out
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_memory_map, assert_same_step_totals, assert_same_summary
from workloads import Workload
from workloads.workload import ClosedLoop


def sampled(n: list[int], prompt: list[int], output: list[int], **columns) -> Workload:
    return Workload(arrival_time_s=np.zeros(len(n)), prompt_tokens=np.array(prompt), output_tokens=np.array(output),
                    n=np.array(n), name="sampled", **columns)


def test_the_children_share_the_prompts_full_blocks_and_compute_its_last_block_each():
    """100 tokens sampled 4 times: the first child computes all 100; the other three, admitted in the same step,
    hit its 6 full blocks (96 tokens: a lookup never covers the last token) and compute the last 4 each. Fork
    computes the prompt once. One row per request either way, with its 4 sequences, its n (vLLM's name) 4."""
    w = sampled([4, 1], [100, 200], [10, 20])
    fan = run_simulation(SimConfig(step_time=1.0, debug_invariants=1), w)  # auto: fan-out on paged
    fork = run_simulation(SimConfig(parallel_sampling="fork", step_time=1.0, debug_invariants=1), w)
    assert fan.steps["prefill_tokens"].iloc[0] == 100 + 3 * 4 + 200
    assert fork.steps["prefill_tokens"].iloc[0] == 100 + 200
    assert fan.requests["cached_tokens"].tolist() == [3 * 96, 0] and fork.requests["cached_tokens"].tolist() == [0, 0]
    assert fan.requests["num_seqs"].tolist() == fork.requests["num_seqs"].tolist() == [4, 1]
    assert fan.requests["n"].tolist() == fork.requests["n"].tolist() == [4, 1]
    assert (fan.requests["beam_width"] == 1).all() and (fork.requests["beam_width"] == 1).all()
    assert fan.summary["completed"] == fork.summary["completed"] == 2
    assert (fan.summary["parallel_sampling"], fork.summary["parallel_sampling"]) == ("fan-out", "fork")
    assert fan.requests["first_token_s"].tolist() == fork.requests["first_token_s"].tolist() == [1.0, 1.0]


def test_a_fanned_out_request_keeps_its_trace_row():
    """Each child carries its request's row of the trace file, and the requests table's one row per request
    names it."""
    w = sampled([4, 1, 2], [100, 200, 50], [10, 20, 5], trace_row=np.array([2, 3, 5]))
    assert fan_out(w).trace_row.tolist() == [2, 2, 2, 2, 3, 5, 5]
    assert run_simulation(SimConfig(step_time=1.0), w).requests["trace_row"].tolist() == [2, 3, 5]

def test_a_request_whose_samples_do_not_fit_together_runs_them_in_turn():
    """A pool of 20 usable blocks; 300 tokens sampled 4 times, 4 tokens each. Fork needs the group's four
    sequences in memory at once (19 blocks each, the partly filled last one copied): it can never fit, so it is
    rejected with a reason. Fanned out, each child holds the prompt's 18 full blocks shared and one of its own:
    two children run at once (20 blocks), the other two once those finish, each hitting the 18 blocks."""
    w = sampled([4], [300], [4])
    options = dict(kv_tokens=21 * 16, step_time=1.0, debug_invariants=1)
    fork = run_simulation(SimConfig(parallel_sampling="fork", **options), w)
    fan = run_simulation(SimConfig(**options), w)
    assert fork.requests["rejected"].tolist() == [True]
    assert not fan.requests["rejected"].any() and fan.summary["completed"] == 1
    assert fan.steps["running"].max() == 2 and fan.requests["cached_tokens"].tolist() == [3 * 288]
    assert fan.steps["prefill_tokens"].tolist()[:3] == [300 + 12, 0, 2 * 12]


def test_more_samples_than_max_num_seqs_queue_instead_of_being_refused():
    """300 samples of one prompt: as one group they can never run under max_num_seqs 256 (rejected with that
    reason); as vLLM v1's 300 requests they queue and all finish."""
    w = sampled([300], [100], [10])
    fork = run_simulation(SimConfig(parallel_sampling="fork", kv_tokens=20_000), w)
    fan = run_simulation(SimConfig(kv_tokens=20_000), w)
    assert fork.requests["reject_reason"].tolist() == ["needs 300 sequences but max_num_seqs is 256"]
    assert fan.summary["completed"] == 1 and fan.requests["num_seqs"].tolist() == [300]
    assert fan.steps["running"].max() == 256


def test_siblings_share_their_whole_prompt_beyond_a_shared_system_prompt():
    """Two requests of one prefix group (a 64-token system prompt), 160-token prompts, the first sampled 3 times:
    its children share all 9 full blocks of their prompt (not only the group's 4), the other request only the
    group's 4 with them."""
    w = sampled([3, 1], [160, 160], [5, 5], prefix_group=np.array([7, 7]), prefix_len=np.array([64, 64]))
    fan = run_simulation(SimConfig(parallel_sampling="fan-out", step_time=1.0), w)
    assert fan.requests["cached_tokens"].tolist() == [2 * 144, 64]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_fleet_sends_a_requests_children_where_its_first_goes(workers):
    """An HTTP router sends a request sampled n times to one server, which fans it out: its children stay together
    (behind dp-lb, vLLM's own front end, each is routed: ``test_sim_data_parallel_sampling.py``),
    one routing decision each request (round-robin alternates requests, not children), and the table has one row
    per request with its replica. Worker processes give the same tables."""
    w = sampled([4, 1, 3, 2], [100, 200, 150, 80], [10, 20, 5, 7])
    w = Workload(**{**{k: getattr(w, k) for k in ("prompt_tokens", "output_tokens", "n")},
                    "arrival_time_s": np.array([0.0, 1.0, 2.0, 3.0])})
    fleet = run_simulation(SimConfig(replicas=2, step_time=0.01), w, workers=workers)
    assert fleet.requests["replica"].tolist() == [0, 1, 0, 1]
    assert fleet.requests["num_seqs"].tolist() == [4, 1, 3, 2] and fleet.summary["parallel_sampling"] == "fan-out"
    assert [r["completed"] for r in fleet.summary["per_replica"]] == [2, 2]
    assert fleet.requests["cached_tokens"].tolist() == [3 * 96, 0, 2 * 144, 64]
    one = run_simulation(SimConfig(replicas=2, step_time=0.01), w)
    assert fleet.requests.equals(one.requests)


def test_the_table_folds_children_into_their_request():
    """The request's id, trace row, session, turn, system prompt and beam width from its first child; earliest
    admission and first token, last finish (none while a child has none), counts summed (its n: one a child),
    rejected if any child was, with that child's reason."""
    nan = np.nan
    columns = {
        "request_id": np.array([5, 5, 6]), "trace_row": np.array([8, 8, 9]), "session_id": np.array([-1, -1, 3]), "turn": np.array([0, 0, 2]),
        "prefix_group": np.array([7, 7, -1]), "prefix_len": np.array([4, 4, 0]), "arrival_s": np.array([0.0, 0.0, 1.0]),
        "prompt_tokens": np.array([10, 10, 20]), "output_tokens": np.array([3, 3, 4]),
        "length_capped_tokens": np.array([2, 2, 0]),
        "admitted_s": np.array([2.0, 1.0, nan]), "first_token_s": np.array([3.0, nan, nan]),
        "finished_s": np.array([9.0, 7.0, nan]), "num_seqs": np.array([1, 1, 1]), "n": np.array([1, 1, 1]),
        "beam_width": np.array([1, 1, 1]),
        "cached_tokens": np.array([0, 8, 0]), "host_tokens": np.array([0, 8, 0]),
        "preemptions": np.array([1, 2, 0]), "rejected": np.array([False, False, True]),
        "reject_reason": np.array(["", "", "too long"], dtype=object), "tpot_s": np.array([3.0, 2.0, nan]),
    }
    out = aggregate(columns, np.array([0, 0, 1]))
    assert out["tpot_s"][0] == 2.5 and np.isnan(out["tpot_s"][1])  # the children's mean
    assert out["request_id"].tolist() == [5, 6] and out["length_capped_tokens"].tolist() == [2, 0]
    assert out["trace_row"].tolist() == [8, 9]
    assert out["session_id"].tolist() == [-1, 3] and out["turn"].tolist() == [0, 2]
    assert out["prefix_group"].tolist() == [7, -1] and out["prefix_len"].tolist() == [4, 0]
    assert out["admitted_s"][0] == 1.0 and out["first_token_s"][0] == 3.0 and out["finished_s"][0] == 9.0
    assert np.isnan(out["finished_s"][1]) and np.isnan(out["admitted_s"][1])
    assert out["num_seqs"].tolist() == out["n"].tolist() == [2, 1] and out["preemptions"].tolist() == [3, 0]
    assert out["beam_width"].tolist() == [1, 1]
    assert out["rejected"].tolist() == [False, True] and out["reject_reason"].tolist() == ["", "too long"]
    columns["finished_s"] = np.array([9.0, nan, nan])
    assert np.isnan(aggregate(columns, np.array([0, 0, 1]))["finished_s"][0])


def test_fan_out_keeps_order_and_beams():
    """Rows in place, children one after another; a beam search keeps its group (vLLM v1's engine has none)."""
    w = sampled([2, 1, 3], [10, 20, 30], [1, 2, 3], beam_width=np.array([1, 1, 1]))
    fanned = fan_out(w)
    assert fanned.fan_parent.tolist() == [0, 0, 1, 2, 2, 2]
    assert fanned.prompt_tokens.tolist() == [10, 10, 20, 30, 30, 30] and (fanned.n == 1).all()
    beams = sampled([1, 1], [10, 20], [1, 2], beam_width=np.array([4, 1]))
    assert fan_out(beams).fan_parent.tolist() == [0, 1]


def test_fast_forward_equals_step_by_step_with_fanned_out_requests():
    rng = np.random.default_rng(3)
    size = 120
    w = Workload(arrival_time_s=np.sort(rng.uniform(0, 60, size)), prompt_tokens=rng.integers(60, 600, size),
                 output_tokens=rng.integers(1, 200, size), n=rng.choice([1, 2, 4, 8], size),
                 prefix_group=rng.integers(-1, 3, size), prefix_len=np.full(size, 48), name="sampled")
    options = dict(parallel_sampling="fan-out", kv_tokens=300 * 16, cpu_offload_gib=0.2, debug_invariants=40,
                   offload_write_policy="write_through", offload_loads="async")
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert fast.summary["preemptions"] > 0 and len(fast.steps) < len(slow.steps)
    for column in ("cached_tokens", "host_hit_tokens", "preemptions", "num_seqs"):
        assert fast.requests[column].tolist() == slow.requests[column].tolist(), column
    np.testing.assert_allclose(fast.requests["finished_s"], slow.requests["finished_s"], rtol=1e-9)
    assert_same_summary(fast.summary, slow.summary)
    assert_same_memory_map(fast, slow)
    assert_same_step_totals(fast, slow)


@pytest.mark.parametrize("options", [dict(allocator="paged-cow"), dict(allocator="radix")])
def test_fan_out_elsewhere_is_reported_ignored_and_runs_the_groups(options):
    """Other allocators (their own models of sharing) run a request's samples as one group, and say the setting
    changed nothing."""
    w = sampled([4, 1], [100, 200], [10, 20])
    fan = run_simulation(SimConfig(parallel_sampling="fan-out", **options), w, warn=False)
    fork = run_simulation(SimConfig(parallel_sampling="fork", **options), w)
    auto = run_simulation(SimConfig(**options), w)
    assert "--parallel-sampling fan-out" in fan.summary["ignored_settings"]
    assert "ignored_settings" not in auto.summary  # auto asks for nothing: it forks where fan-out is not modelled
    assert fan.summary["parallel_sampling"] == auto.summary["parallel_sampling"] == "fork"
    assert auto.requests["finished_s"].tolist() == fork.requests["finished_s"].tolist()
    assert fan.requests["finished_s"].tolist() == fork.requests["finished_s"].tolist()


def test_an_unknown_mode_is_refused_in_one_line():
    with pytest.raises(ValueError, match="--parallel-sampling must be one of auto, fan-out, fork"):
        SimConfig(parallel_sampling="fanout")


def test_fan_out_with_sessions_or_a_closed_loop_is_refused():
    """A session's next turn carries its previous turn's output: with n children, whose?"""
    loop = Workload(arrival_time_s=np.zeros(2), prompt_tokens=np.array([10, 20]), output_tokens=np.array([3, 4]),
                    n=np.array([2, 1]), closed_loop=ClosedLoop(users=1, think_time_s=1.0))
    sessions = Workload(arrival_time_s=np.array([0.0, 5.0]), prompt_tokens=np.array([10, 30]),
                        output_tokens=np.array([5, 5]), n=np.array([2, 1]), session_id=np.array([0, 0]),
                        turn=np.array([0, 1]))
    for w in (loop, sessions):
        with pytest.raises(ValueError, match="fan-out with sessions or a closed loop is not modelled"):
            run_simulation(SimConfig(parallel_sampling="fan-out"), w)
        assert run_simulation(SimConfig(), w).summary["parallel_sampling"] == "fork"  # auto


def test_a_fanned_out_requests_time_per_token_is_its_childrens():
    """Eight samples, four running at a time, 10 ms a step: each child decodes a token a step, so TPOT is 10 ms
    as vLLM times each child; the first child's first token to the last one's finish would say 20 ms."""
    config = SimConfig(kv_tokens=100_000, max_num_seqs=4, step_time=0.01)
    result = run_simulation(config, sampled([8], [100], [100]))
    row = result.requests.iloc[0]
    assert row.tpot_s == pytest.approx(0.01) and result.summary["tpot_p50_s"] == pytest.approx(0.01)
    assert (row.finished_s - row.first_token_s) / 99 == pytest.approx(0.0201, rel=0.02)


@pytest.mark.parametrize("allocator", ["paged", "paged-cow", "radix"])
def test_samples_that_can_never_fit_together_are_rejected_on_arrival(allocator):
    """Four samples of a 100-token prompt and 200-token outputs need at least the prompt's 6 full blocks of 16
    once and 13 blocks each after them (203 tokens to their final 299): 58 blocks, where a 600-token pool has 36
    usable. They were admitted, decoded and preempted before being refused; now they are refused on arrival, and
    never preempt the requests beside them. In a 2,000-token pool they run."""
    config = SimConfig(allocator=allocator, kv_tokens=600, parallel_sampling="fork", step_time=0.01)
    w = sampled([4, 1, 1], [100, 50, 50], [200, 20, 20])
    result = run_simulation(config, w)
    assert result.summary["preemptions"] == 0 and result.requests.rejected.tolist() == [True, False, False]
    assert result.requests.reject_reason[0] == (f"{allocator}: its 4 samples together need at least 58 blocks at "
                                                "their final length (the prompt's 6 full blocks once, each sample's "
                                                "own after them), more than the pool has")
    assert run_simulation(dataclasses.replace(config, kv_tokens=2000), w).summary["rejected"] == 0


def test_a_sampling_mode_on_a_workload_that_samples_nothing_is_reported():
    """--parallel-sampling fork or fan-out where no request has n > 1 (without a beam) changes nothing."""
    import warnings

    single = sampled([1, 1], [100, 50], [20, 20])
    for mode in ("fork", "fan-out"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            summary = run_simulation(SimConfig(kv_tokens=5000, parallel_sampling=mode), single).summary
        assert summary["ignored_settings"][f"--parallel-sampling {mode}"].startswith("no request of this workload")
    summary = run_simulation(SimConfig(kv_tokens=5000, parallel_sampling="fork"), sampled([2], [100], [20])).summary
    assert "ignored_settings" not in summary
