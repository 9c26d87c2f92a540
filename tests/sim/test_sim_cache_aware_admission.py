"""vLLM 0.34's cache-aware admission end to end (``--cache-aware-admission-window``, its threshold): a request
whose prefix is cached goes ahead of a cold one that memory holds back, once the pool is used past the threshold,
stepped and skipped ahead alike; vLLM's scheduler on the oracle cases (``cache_aware_*``,
`test_sim_vllm_parity`, `test_sim_async_scheduling`) holds it to the step."""

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from workloads.workload import Workload

POOL = dict(kv_tokens=64 * 16, step_time=0.01, memory_snapshots=0)
"""64 blocks, 63 usable: A's 600-token prompt and 400 tokens more hold 63 by its end, so B's 38 do not fit beside
it while C, which shares A's 512-token prefix (32 blocks A holds), needs 6 new blocks."""


def three_requests(a_output: int = 400) -> Workload:
    """A (prefix group 0, ``a_output`` tokens), then B (cold) and C (group 0) while A decodes."""
    return Workload(arrival_time_s=np.array([0.0, 0.5, 0.6]), prompt_tokens=np.full(3, 600),
                    output_tokens=np.array([a_output, 5, 5]), prefix_group=np.array([0, 1, 0]),
                    prefix_len=np.array([512, 0, 512]), name="cold-then-warm")


def admitted_order(window: int, threshold: float = 0.5, step_by_step: bool = False, a_output: int = 400) -> list[int]:
    result = run_simulation(SimConfig(cache_aware_admission_window=window,
                                      cache_aware_admission_threshold=threshold, step_by_step=step_by_step,
                                      **POOL), three_requests(a_output))
    return list(result.requests.sort_values(["admitted_s", "request_id"]).request_id)


@pytest.mark.parametrize("step_by_step", [False, True])
def test_a_warm_request_goes_ahead_of_a_cold_one_memory_holds_back(step_by_step):
    assert admitted_order(0, step_by_step=step_by_step) == [0, 1, 2]  # FCFS: C waits behind B
    assert admitted_order(2, step_by_step=step_by_step) == [0, 2, 1]


@pytest.mark.parametrize("step_by_step", [False, True])
def test_below_the_threshold_the_queue_keeps_arrival_order(step_by_step):
    """With 100 tokens to generate A holds 38 of 63 blocks when B and C arrive and 44 at its end (the pool
    0.60 to 0.70 used), and B does not fit until A finishes: a threshold of 0.8 is never reached, one of 0.65 is
    mid-decode (the fast-forward steps while the window could reorder, as the pool's use grows within a run)."""
    assert admitted_order(2, threshold=0.8, step_by_step=step_by_step, a_output=100) == [0, 1, 2]
    assert admitted_order(2, threshold=0.65, step_by_step=step_by_step, a_output=100) == [0, 2, 1]
