"""vLLM's ``max_num_active_seqs``: the sequences admitted to run at once, capped below ``max_num_seqs`` (which also
sizes the model runner and its CUDA graphs, none of which kvsim's clock models, so the cap is what acts); vLLM's
scheduler holds it to the step on the oracle case ``active_seqs_priority`` (`test_sim_vllm_parity`,
`test_sim_async_scheduling`)."""

import numpy as np
import pandas as pd
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from workloads import Workload

BASE = dict(kv_tokens=4000 * 16, step_time=0.01, memory_snapshots=0)


def burst(n: int = 12, samples: int = 1) -> Workload:
    rng = np.random.default_rng(5)
    return Workload(arrival_time_s=np.zeros(n), prompt_tokens=rng.integers(20, 300, n),
                    output_tokens=rng.integers(5, 60, n), n=np.full(n, samples), name="burst")


def test_admissions_stop_at_the_cap_as_at_a_lower_max_num_seqs():
    capped = run_simulation(SimConfig(**BASE, max_num_active_seqs=3), burst())
    assert capped.summary["max_running"] == 3
    lower = run_simulation(SimConfig(**BASE, max_num_seqs=3), burst())
    pd.testing.assert_frame_equal(capped.requests, lower.requests, check_exact=True)


def test_a_group_past_the_cap_is_rejected_naming_it():
    result = run_simulation(SimConfig(**BASE, max_num_active_seqs=2, parallel_sampling="fork"), burst(2, samples=4))
    assert result.requests["rejected"].all()
    assert set(result.requests["reject_reason"]) == {"needs 4 sequences but max_num_active_seqs is 2"}


def test_the_cap_may_not_pass_max_num_seqs():
    with pytest.raises(ValueError, match=r"--max-num-active-seqs \(300\) cannot be greater than --max-num-seqs "
                                         r"\(256\), as vLLM requires"):
        SimConfig(max_num_active_seqs=300)
