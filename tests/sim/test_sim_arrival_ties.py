"""Arrivals that fall exactly on a step's start (a constant ``--step-time`` against constant arrivals or a
whole think time) are seen by that step, fast-forwarded or stepped: step starts are sums of durations, which
stepping adds one at a time and the decode fast-forward takes in closed form, so they round differently, and
an exact tie used to land on either side by rounding (`ARRIVAL_TIE_S`)."""

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_memory_map, assert_same_step_totals, assert_same_summary
from workloads.arrivals import retime
from workloads.named import generate, parse_arrivals

LENGTHS = "lognormal:prompt_mean=300,prompt_cv=1,output_mean=150,output_cv=1,max_total=2048"


def assert_fast_equals_stepped(w, options: dict) -> None:
    fast = run_simulation(SimConfig(**options), w, warn=False)  # some cases set a router on one replica
    slow = run_simulation(SimConfig(step_by_step=True, **options), w, warn=False)
    assert len(fast.steps) < len(slow.steps)
    assert fast.requests["preemptions"].tolist() == slow.requests["preemptions"].tolist()
    for column in ("arrival_s", "admitted_s", "first_token_s", "finished_s"):
        np.testing.assert_allclose(fast.requests[column], slow.requests[column], rtol=1e-9)
    assert_same_summary(fast.summary, slow.summary)
    assert_same_memory_map(fast, slow)
    assert_same_step_totals(fast, slow)


@pytest.mark.parametrize(("rate", "step_time", "replicas"), [(5.0, 0.02, 1), (8.0, 0.025, 2)])
def test_constant_arrivals_on_constant_steps(rate, step_time, replicas):
    """An arrival every 0.2 s on steps of 0.02 s, or every 0.125 s on steps of 0.025 s (two replicas behind
    least-kv): every arrival falls on a step's start. Before: 81 preemptions fast-forwarded against 82
    stepping and the last request finished 0.06 s earlier (one replica); the fleet's finished at 48.9 s
    against 59.0 s."""
    w = generate(LENGTHS, f"constant:rate={rate}", 150, seed=1)
    assert_fast_equals_stepped(w, dict(model="llama-3-8b", kv_tokens=3000, step_time=step_time,
                                       replicas=replicas, router="least-kv"))


def test_think_time_of_whole_steps():
    """Closed-loop sessions with a 1 s think time on 0.02 s steps: each later turn arrives on a step's start.
    Before: normalized latency 0.32205698 fast-forwarded against 0.32205612 s/token stepping."""
    w = generate(LENGTHS, "poisson:rate=2", 120, seed=3, turns=4, think_time_s=1.0)
    assert_fast_equals_stepped(w, dict(model="llama-3-8b", kv_tokens=3000, step_time=0.02))


def test_a_released_turn_ties_with_a_first_turn():
    """Sessions whose first turns arrive every 0.125 s on 0.025 s steps, each later turn 1 s after its previous
    one ends: a released turn can arrive at the very time of a first turn, and the two must be queued in the
    same order in both modes (release times are kept to the whole nanosecond, `released_at`). Before: 494
    preemptions fast-forwarded against 500 stepping, the last request done 2.1 s apart."""
    w = generate(LENGTHS, "poisson:rate=2", 120, seed=3, turns=4, think_time_s=1.0)
    w = retime(w, parse_arrivals("constant:rate=8"), 0, "constant:rate=8")
    assert_fast_equals_stepped(w, dict(allocator="radix", kv_tokens=1500, block_size=32, step_time=0.025,
                                       long_prefill_token_threshold=64, scheduler_reserve_full_isl=False,
                                       max_num_batched_tokens=512))
