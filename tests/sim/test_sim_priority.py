"""The decode fast-forward under ``--scheduling-policy priority``: equal to stepping one step at a time."""

from dataclasses import replace

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_step_totals
from workloads.named import generate


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_fast_forward_equals_step_by_step_when_an_arrival_outranks_a_refused_head(prefix_caching):
    """A request of higher priority that arrives while the queue's head is refused memory goes ahead of it and
    may fit, so a decode run ends at every arrival under ``priority`` (under FCFS only while the queue is
    empty: an arrival joins the back). Before, runs went past such arrivals: finish times up to 29 s apart and
    64 preemptions fast-forwarded against stepping's 72 (without prefix caching)."""
    w = generate("lognormal:prompt_mean=400,prompt_cv=1,output_mean=200,output_cv=1,max_total=3000",
                 "poisson:rate=3", 120, seed=0)
    w = replace(w, priority=np.random.default_rng(1).integers(0, 3, len(w)))
    options = dict(kv_tokens=3000, scheduling_policy="priority", prefix_caching=prefix_caching)
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert len(fast.steps) < len(slow.steps) / 5 and fast.summary["preemptions"] > 50
    assert fast.summary["preemptions"] == slow.summary["preemptions"]
    for column in ("admitted_s", "first_token_s", "finished_s"):
        np.testing.assert_allclose(fast.requests[column], slow.requests[column], rtol=1e-9)
    assert_same_step_totals(fast, slow)


def test_a_decoder_preempted_after_the_running_loop_passed_it_holds_that_steps_slot():
    """Under ``priority`` the victim of a preemption can be a group the running loop has passed this step:
    step by step that loop grew it for this step's token, and a block that slot fills is cached (as vLLM's
    scheduler caches the blocks it allocates, before it preempts), so after the preemption a host tier
    receives it when it is evicted. A lazily grown decoder not due at that step was not grown, so it is told
    the slot as it is freed. Before, it was not: one block (562,176 bytes) less offloaded fast-forwarded."""
    w = generate("lognormal:prompt_mean=300,prompt_cv=1,output_mean=150,output_cv=1,max_total=2048",
                 "constant:rate=8", 150, seed=1)
    w = replace(w, priority=np.random.default_rng(1).integers(0, 3, len(w)))
    options = dict(model="deepseek-v3", gpu="h200", tensor_parallel=8, kv_tokens=3000, block_size=8,
                   cpu_offload_gib=1.0, long_prefill_token_threshold=64, scheduler_reserve_full_isl=False,
                   scheduling_policy="priority")
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert fast.summary["preemptions"] == slow.summary["preemptions"] > 100
    assert fast.summary["offload_bytes"] == slow.summary["offload_bytes"]
    assert fast.requests["cached_tokens"].tolist() == slow.requests["cached_tokens"].tolist()
    assert_same_step_totals(fast, slow)
