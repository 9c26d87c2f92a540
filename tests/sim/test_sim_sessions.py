"""Multi-turn sessions in the simulator: a turn hits its previous turn's prompt AND generated output, and a
closed-loop turn arrives its think time after the previous turn ends; the requests table names each row's
session and turn."""

import numpy as np
import pandas as pd
import pytest

import workloads
from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_step_totals
from workloads import Workload
from workloads.named import generate

LENGTHS = "fixed:prompt=100,output=50"
POOLS = pytest.mark.parametrize("options", [{}, {"allocator": "radix"}, {"allocator": "paged-cow"},
                                            {"model": "gemma-3-12b", "gpu": "h100-80gb"}],
                                ids=["paged", "radix", "paged-cow", "hybrid"])
OPEN_LOOP_TURNS = "lognormal:prompt_mean=400,prompt_cv=1,output_mean=200,output_cv=1,max_total=3000"


def fast_and_stepped(w, options: dict):
    """The run fast-forwarded and step by step, after checking that they decided the same: every request's
    hit tokens and admission, first-token and finish times."""
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert fast.requests["cached_tokens"].tolist() == slow.requests["cached_tokens"].tolist()
    for column in ("admitted_s", "first_token_s", "finished_s"):
        np.testing.assert_allclose(fast.requests[column], slow.requests[column], rtol=1e-9)
    assert_same_step_totals(fast, slow)
    return fast, slow


@pytest.mark.parametrize("timing", [{"turn_gap_s": 1000.0}, {"think_time_s": 5.0}])
def test_next_turn_hits_the_previous_prompt_and_output(timing):
    """Regression: only the prompt part was hit (the cache knew a request's generated blocks under ids of
    its own), so with 100-token messages and 50-token outputs (block 16) turn 2 hit 96 of its 144 shared
    tokens and turn 3 240 of 288. vLLM and SGLang cache generated full blocks too: all 144 and 288."""
    w = generate(LENGTHS, "constant:rate=0.001", 3, seed=0, turns=3, **timing)
    assert w.prompt_tokens.tolist() == [100, 250, 400]
    for step_by_step in (False, True):
        r = run_simulation(SimConfig(allocator="paged", kv_tokens=20_000, prefix_caching=True,
                                     step_by_step=step_by_step), w)
        assert r.requests["cached_tokens"].tolist() == [0, 144, 288]
        assert r.summary["cached_prompt_tokens"] == 432
    off = run_simulation(SimConfig(allocator="paged", kv_tokens=20_000, prefix_caching=False), w)
    assert off.requests["cached_tokens"].tolist() == [0, 0, 0]


def test_closed_loop_turn_arrives_think_time_after_the_previous_end():
    w = generate(LENGTHS, "constant:rate=0.5", 9, seed=0, turns=3, think_time_s=2.5)
    r = run_simulation(SimConfig(kv_tokens=20_000), w).requests
    later = w.turn > 0
    previous = np.flatnonzero(later) - 1
    # to the whole nanosecond, as release times are kept (`released_at`)
    np.testing.assert_allclose(r["arrival_s"][later], r["finished_s"].to_numpy()[previous] + 2.5, rtol=0, atol=5e-10)
    assert (r["arrival_s"][~later].to_numpy() == [0.0, 2.0, 4.0]).all()
    assert r["finished_s"].notna().all()


def test_fast_forward_equals_step_by_step_with_sessions():
    w = generate("lognormal:prompt_mean=300,prompt_cv=1,output_mean=120,output_cv=1,max_total=4000",
                 "poisson:rate=4", 120, seed=3, turns=4, think_time_s=1.0, system_prompt_len=200,
                 system_prompt_frac=0.5)
    options = dict(kv_tokens=6000, prefix_caching=True)
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert len(fast.steps) < len(slow.steps)
    for column in ("arrival_s", "first_token_s", "finished_s"):
        np.testing.assert_allclose(fast.requests[column], slow.requests[column], rtol=1e-9)
    assert fast.requests["cached_tokens"].tolist() == slow.requests["cached_tokens"].tolist()
    assert_same_step_totals(fast, slow)
    assert fast.summary["prefix_hit_frac"] > 0.15


@POOLS
def test_fast_forward_equals_step_by_step_when_a_turn_waits_on_a_running_one(options):
    """Open loop, a turn arrives 0.5 s after the previous one, which is still decoding: the generated
    blocks it will hit are filled while it waits. Each is cached in the step that fills it (vLLM), so a lazily
    grown decoder syncs there (one slot short of the block's end), and a decode run ends before a fill of a
    hash a queued request carries (`Allocator.shared_fill`; a pool without ``reports_growth`` ends it at any
    shared fill: `Allocator.hit_changes`). Before, the fast-forward cached such blocks a step late and ran
    past them: 26,176 hit tokens against stepping's 26,272 (paged), finish times up to 0.14 s apart."""
    w = generate("fixed:prompt=600,output=300", "poisson:rate=4", 60, seed=0, turns=3, turn_gap_s=0.5)
    fast, slow = fast_and_stepped(w, dict(kv_tokens=6000, prefix_caching=True) | options)
    assert len(fast.steps) < len(slow.steps) / 2 and fast.summary["preemptions"] > 0


@POOLS
def test_fast_forward_equals_step_by_step_under_lpm(options):
    """Under ``lpm`` the queue is re-sorted by cached prefix at every step, so a refused head can be passed by
    a request that arrives (a later turn, its history cached) or by one whose hit another's eviction did not
    shorten: a decode run ends at every arrival and, while requests wait, at every growth that evicts a cached
    block. Before, it ended at neither: 42,240 hit tokens fast-forwarded against stepping's 43,920 (paged);
    77,168 against 101,680 on Gemma 3."""
    w = generate(OPEN_LOOP_TURNS, "poisson:rate=3", 80, seed=0, turns=4, turn_gap_s=0.5,
                 system_prompt_len=200, system_prompt_frac=0.5)
    fast, slow = fast_and_stepped(w, dict(kv_tokens=3000, scheduling_policy="lpm") | options)
    assert len(fast.steps) < len(slow.steps) / 2 and fast.summary["preemptions"] > 0


def test_fast_forward_equals_step_by_step_when_a_fill_replaces_a_host_hit():
    """With a host tier a queued turn's hit can be part GPU, part host; a running turn filling a block of the
    host part moves it to GPU memory, where a block a running sequence holds takes no free block, so the turn
    may fit: a run ends before any fill of a hash a queued request carries. Before, it ended only past the
    hit's end: 63,520 hit tokens fast-forwarded against stepping's 64,480."""
    w = generate(OPEN_LOOP_TURNS, "poisson:rate=3", 80, seed=0, turns=4, turn_gap_s=1.0,
                 system_prompt_len=200, system_prompt_frac=0.5)
    fast, slow = fast_and_stepped(w, dict(kv_tokens=3000, prefix_caching=True, cpu_offload_gib=1.0,
                                          block_size=32, long_prefill_token_threshold=64))
    assert fast.summary["host_hit_tokens"] > 0 and len(fast.steps) < len(slow.steps) / 2


@pytest.mark.parametrize("allocator", ["paged", "radix", "paged-cow"])
def test_fast_forward_equals_step_by_step_when_an_eviction_shortens_the_heads_hit(allocator):
    """Closed-loop turns on a small GPU whose first chunk is capped (256 tokens past the hit, nothing reserved
    for the rest of the prompt): when a decoding sequence evicts a cached block in the middle of the refused
    head's hit, the hit gets shorter (19 blocks, part of them on the host, down to 15), and so does what its
    first chunk needs, and it fits: a run ends before such an eviction. Before, the fast-forward ran past it
    (paged: 191 preemptions against stepping's 182, 52,832 hit tokens against 51,168)."""
    w = generate("lognormal:prompt_mean=300,prompt_cv=1,output_mean=150,output_cv=1,max_total=2048",
                 "poisson:rate=2", 120, seed=3, turns=4, think_time_s=1.0)
    fast, slow = fast_and_stepped(w, dict(
        allocator=allocator, model="qwen3-8b", kv_tokens=6000, preemption="swap", cpu_offload_gib=0.05,
        offload_write_policy="write_through", watermark=0.05, step_time=0.02, long_prefill_token_threshold=256,
        scheduler_reserve_full_isl=False))
    assert fast.summary["preemptions"] == slow.summary["preemptions"] > 0 and len(fast.steps) < len(slow.steps) / 2


def test_fast_forward_equals_step_by_step_when_radix_hangs_a_page_late():
    """`radix` leaves a filled page unhung while another page caches its prefix; once that page is evicted,
    the sequence hangs its own at its next fill, and a queued request sharing the prefix hits it at once. A
    lazily grown decoder syncs at that fill (one slot short), as step by step it grows there. Before, it
    synced a step late: 293,616 hit tokens fast-forwarded against stepping's 293,808 (the Mooncake sample,
    Mistral-7B, lpm)."""
    w = workloads.load_preset("mooncake-conv", num_requests=150)
    fast, slow = fast_and_stepped(w, dict(allocator="radix", model="mistral-7b", gpu="h100-80gb", kv_tokens=12000,
                                          scheduling_policy="lpm", long_prefill_token_threshold=64))
    assert fast.summary["cached_prompt_tokens"] == slow.summary["cached_prompt_tokens"]
    assert len(fast.steps) < len(slow.steps) / 2


def test_rejected_turn_still_releases_the_next():
    """A turn that can never run (longer than max_model_len) is rejected; its user still sends the next."""
    w = Workload(arrival_time_s=np.zeros(3), prompt_tokens=[100, 3100, 3200], output_tokens=[50, 50, 50],
                 session_id=[0, 0, 0], turn=[0, 1, 2], think_time_s=[np.nan, 1.0, 1.0])
    r = run_simulation(SimConfig(kv_tokens=20_000, max_model_len=3100), w).requests
    assert r["rejected"].tolist() == [False, True, True]
    assert r["arrival_s"][2] == pytest.approx(r["arrival_s"][1] + 1.0)


@pytest.mark.parametrize("replicas", [1, 2])
def test_requests_table_names_each_requests_session_and_turn(replicas):
    """TTFT per turn needs each row's session and turn, right after ``request_id``, as nullable integers: NA on
    a row that is no session's turn (a fleet's table too)."""
    w = Workload(arrival_time_s=[0.0, 0.5, 1.0, 1.5, 2.0], prompt_tokens=[100, 80, 200, 90, 400],
                 output_tokens=[50, 20, 50, 30, 50], session_id=[4, -1, 4, 9, 4], turn=[0, 0, 1, 0, 2])
    r = run_simulation(SimConfig(kv_tokens=20_000, replicas=replicas), w).requests
    assert list(r.columns[:3]) == ["request_id", "session_id", "turn"]
    assert r["session_id"].dtype == "Int64" and r["turn"].dtype == "Int64"
    assert r["session_id"].tolist() == [4, pd.NA, 4, 9, 4] and r["turn"].tolist() == [0, pd.NA, 1, 0, 2]
    assert r.groupby("turn")["ttft_s"].size().to_dict() == {0: 2, 1: 1, 2: 1}


def test_requests_table_without_sessions_has_them_all_na():
    """Every run's table has the columns (a stable schema); a fanned-out one's rows are folded back first."""
    w = generate(LENGTHS, "constant:rate=1", 4, seed=0, n=2)
    r = run_simulation(SimConfig(kv_tokens=20_000, allocator="paged"), w)
    assert r.summary["parallel_sampling"] == "fan-out" and len(r.requests) == 4
    assert r.requests["session_id"].isna().all() and r.requests["turn"].isna().all()
    assert r.requests["turn"].dtype == "Int64"
