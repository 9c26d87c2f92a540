"""vLLM's prefill cadence (``--prefill-schedule-interval``) and the long-prefill threshold's adaptive floor
(``--long-prefill-token-threshold-adaptive``) end to end, stepped and skipped ahead alike; vLLM's scheduler on the
oracle cases (``cadence_*``, ``adaptive_threshold_contended``: `test_sim_vllm_parity`, `test_sim_async_scheduling`)
holds them to the step."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.prefill_cadence import PrefillCadence
from sim.kernel.runner import run_simulation
from sim.kernel.sequence_group import SequenceGroup
from tests.sim.summaries import assert_same_requests, assert_same_step_totals, assert_same_summary
from workloads import Workload

STEP = 0.01
BASE = dict(kv_tokens=4000 * 16, step_time=STEP, memory_snapshots=0)


def run(workload: Workload, **settings):
    return run_simulation(SimConfig(**(BASE | settings)), workload)


def steps_of(column: pd.Series) -> list[int]:
    """Times on the step grid as step indices."""
    return [int(round(t / STEP)) for t in column]


def two_requests(b_prompt: int = 200, b_prefix: int = 0) -> Workload:
    """A decodes from step 0; B arrives during step 1 and is delivered at step 2; with ``b_prefix`` B shares that
    many of A's first tokens (A's prompt is 320 tokens)."""
    return Workload(arrival_time_s=np.array([0.0, 0.015]), prompt_tokens=np.array([320, b_prompt]),
                    output_tokens=np.array([60, 5]), prefix_group=np.array([0, 0 if b_prefix else 1]),
                    prefix_len=np.array([320, b_prefix]), name="a-then-b")


def test_the_cadence_decides_from_the_executed_steps_since_the_last_prefill():
    cadence = PrefillCadence(4)
    decoder, prefill = SequenceGroup.__new__(SequenceGroup), SequenceGroup.__new__(SequenceGroup)
    decoder.prefill_done = decoder.prefill_target = 10
    prefill.prefill_done, prefill.prefill_target = 0, 10
    cadence.begin([])  # the first step is never held
    assert not cadence.deferring
    cadence.prefilled = True
    cadence.planned(True)  # executed step 1 carried prefill
    held = []
    for _ in range(5):
        cadence.begin([decoder])
        held.append(cadence.deferring)
        cadence.planned(True)
    assert held == [True, True, True, False, False]  # executed steps 2-4 held, 5 (4 after the prefill) not
    cadence.last_prefill = cadence.executed
    cadence.begin([prefill])  # nothing decodes: nothing to hold prefill for
    assert not cadence.deferring
    cadence.capacity_bound = True  # the last round left requests waiting: no hold
    cadence.begin([decoder])
    assert not cadence.deferring
    cadence.admitted(0)
    assert not cadence.capacity_bound


@pytest.mark.parametrize("step_by_step", [False, True])
def test_a_request_waits_for_the_step_the_cadence_allows(step_by_step):
    """A prefills in step 0 (executed step 1); B, delivered at step 2, waits until 4 executed steps separate it
    from that one: step 4. Every step counts, the decode run's too."""
    plain = run(two_requests(), step_by_step=step_by_step).requests
    held = run(two_requests(), prefill_schedule_interval=4, step_by_step=step_by_step).requests
    assert steps_of(plain.admitted_s) == [0, 2]
    assert steps_of(held.admitted_s) == [0, 4]
    assert steps_of(run(two_requests(), prefill_schedule_interval=2, step_by_step=step_by_step).requests.admitted_s) \
        == [0, 2]


@pytest.mark.parametrize("step_by_step", [False, True])
def test_a_whole_prompt_hit_is_admitted_on_a_held_step(step_by_step):
    """B's 321 tokens start with A's 320-token prompt: its hit of 20 blocks leaves only its last token to compute,
    which a held step admits (vLLM holds back ``num_computed_tokens < num_tokens - 1``); a 304-token hit leaves 17,
    held. (A hit never covers a prompt's last token, so a 320-token prompt of A's hits 304.)"""
    whole = run(two_requests(321, 320), prefill_schedule_interval=4, step_by_step=step_by_step).requests
    partial = run(two_requests(321, 304), prefill_schedule_interval=4, step_by_step=step_by_step).requests
    assert steps_of(whole.admitted_s) == [0, 2]
    assert steps_of(partial.admitted_s) == [0, 4]


@pytest.mark.parametrize("step_by_step", [False, True])
def test_a_running_prefill_computes_only_on_the_steps_the_cadence_allows(step_by_step):
    """A's 320 tokens in chunks of 256 (steps 0 and 1: nothing decodes yet, so nothing is held); B's 1,000 in
    chunks of 255 beside A's decode (one token of the 256). Plainly B is admitted at step 2 and chunked every
    step, its first token at the end of step 5. With an interval of 2 every other step holds prefill: B waits
    for step 3, and its chunks take steps 3, 5, 7 and 9."""
    workload = two_requests(b_prompt=1000)
    settings = dict(max_num_batched_tokens=256, max_num_seqs=4, step_by_step=step_by_step)
    plain = run(workload, **settings)
    held = run(workload, prefill_schedule_interval=2, **settings)
    assert steps_of(plain.requests.admitted_s) == [0, 2]
    assert steps_of(plain.requests.first_token_s) == [2, 6]  # (end times: step 5 ends at 6)
    assert steps_of(held.requests.admitted_s) == [0, 3]
    assert steps_of(held.requests.first_token_s) == [2, 10]
    rows = held.steps
    prefill_steps = [s for t, n, p in zip(rows.time_s, rows.num_steps, rows.prefill_tokens, strict=True) if p
                     for s in range(steps_of([t])[0], steps_of([t])[0] + n)]
    assert prefill_steps == [0, 1, 3, 5, 7, 9]


def test_a_backed_up_engine_is_not_held():
    """Every request arrives at once and two run at a time: each admission round leaves requests waiting, so the
    cadence never holds (vLLM's capacity escape), and the run is the plain one."""
    rng = np.random.default_rng(3)
    workload = Workload(arrival_time_s=np.zeros(20), prompt_tokens=rng.integers(50, 400, 20),
                        output_tokens=rng.integers(5, 40, 20), name="burst")
    plain = run(workload, max_num_seqs=2)
    held = run(workload, max_num_seqs=2, prefill_schedule_interval=8)
    assert_same_requests(plain, held)  # (the held run's decode runs split where it may hold: its sums round apart)


def poisson(seed: int, rate: float, n: int = 300) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(arrival_time_s=np.cumsum(rng.exponential(1 / rate, n)), prompt_tokens=rng.integers(130, 1500, n),
                    output_tokens=rng.integers(2, 300, n), prefix_group=rng.integers(0, 3, n),
                    prefix_len=np.full(n, 128), name="poisson")


def assert_same_run(fast, slow) -> None:
    """`summaries`' fast-forward == step-by-step checks (times to 1e-9: the modes sum step times otherwise)."""
    assert_same_requests(fast, slow)
    assert_same_step_totals(fast, slow)
    assert_same_summary(fast.summary, slow.summary)


@pytest.mark.parametrize("settings", [
    dict(prefill_schedule_interval=4),
    dict(prefill_schedule_interval=8, kv_tokens=300 * 16),  # preemptions, capacity-bound stretches
    dict(prefill_schedule_interval=3, async_scheduling=True, max_num_batched_tokens=512),
    dict(long_prefill_token_threshold=64, long_prefill_token_threshold_adaptive=True, prefill_schedule_interval=2),
])
def test_skipping_ahead_gives_the_bytes_of_stepping(settings):
    """A decode run may start only on a step the cadence does not hold: the step after a held one may prefill."""
    config = SimConfig(**(BASE | dict(step_time=None, model="llama-3-8b", gpu="a100-80gb") | settings))
    workload = poisson(1, 20.0)
    fast = run_simulation(config, workload)
    slow = run_simulation(replace(config, step_by_step=True), workload)
    assert_same_run(fast, slow)
    plain = run_simulation(replace(config, prefill_schedule_interval=1, long_prefill_token_threshold_adaptive=False),
                           workload)
    assert not plain.requests.equals(fast.requests)


def test_lock_step_ranks_are_paced_by_the_wave_step_counter():
    """A mixture of experts on two data-parallel ranks: vLLM's DP engine core holds prefill on every step whose
    wave counter is not a multiple of the interval; quiet steps (planned from the decode set) keep the cadence as
    planning every step does."""
    config = SimConfig(model="deepseek-v3", gpu="h200", data_parallel_size=2, router="round-robin",
                       kv_tokens=200_000, memory_snapshots=0, prefill_schedule_interval=4)
    workload = poisson(2, 8.0, n=60)
    fast = run_simulation(config, workload)
    assert_same_run(fast, run_simulation(replace(config, step_by_step=True), workload))
    plain = run_simulation(replace(config, prefill_schedule_interval=1), workload)
    assert not plain.requests.equals(fast.requests)


@pytest.mark.parametrize("step_by_step", [False, True])
def test_the_adaptive_threshold_floors_the_cap_at_a_fair_share_of_the_budget(step_by_step):
    """Two 1,000-token prompts at once under a 64-token threshold: capped, each computes 64 a step; floored at
    2048 // 2 = 1024, both prefill in the first step."""
    workload = Workload(arrival_time_s=np.zeros(2), prompt_tokens=np.full(2, 1000), output_tokens=np.full(2, 5),
                        name="two")
    capped = run(workload, long_prefill_token_threshold=64, step_by_step=step_by_step)
    floored = run(workload, long_prefill_token_threshold=64, long_prefill_token_threshold_adaptive=True,
                  step_by_step=step_by_step)
    assert capped.steps.prefill_tokens.iloc[0] == 128
    assert floored.steps.prefill_tokens.iloc[0] == 2000
    assert steps_of(floored.requests.first_token_s) == [1, 1]
