"""Regressions found by using kvsim as a serving engineer would: the engine on awkward workloads."""

import numpy as np

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from workloads import Workload


def _workload(arrivals, prompts, outputs) -> Workload:
    return Workload(arrival_time_s=np.array(arrivals, float), prompt_tokens=np.array(prompts),
                    output_tokens=np.array(outputs))


def test_first_request_rejected_then_later_arrival_still_runs():
    # `kvsim run t.parquet --kv-tokens 500` crashed with SimPy's "No scheduled events left" when the first
    # request could never fit (rejected on arrival) and the next one arrived later: the engine went idle
    # before the arrivals process had started waiting for it.
    workload = _workload([0.0, 3.2], [220, 17], [1270, 91])
    result = run_simulation(SimConfig(allocator="paged", kv_tokens=500, step_time=0.01), workload)
    assert result.summary["rejected"] == 1 and result.summary["completed"] == 1
    assert "pool has only" in result.requests.reject_reason[0]
    assert result.requests.finished_s[1] > 3.2


def test_all_first_arrivals_rejected_contiguous():
    workload = _workload([0.0, 0.0, 5.0], [900, 950, 100], [200, 300, 10])
    result = run_simulation(SimConfig(allocator="contiguous-oracle", kv_tokens=1000, step_time=0.01), workload)
    assert result.summary["rejected"] == 2 and result.summary["completed"] == 1
