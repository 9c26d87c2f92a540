"""The decode fast-forward under ``--scheduling-policy priority``: equal to stepping one step at a time."""

from dataclasses import replace

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
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
