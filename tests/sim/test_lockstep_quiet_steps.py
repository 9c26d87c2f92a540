"""Lock-step ranks plan their quiet steps from the decode set (`sim.kernel.quiet_step`): the run's tables and
summary are byte for byte those of planning every step (``--step-by-step``), with ranks idling on dummy batches,
waves ending and starting again, snapshots, preemptions, a router that reads the ranks and released turns."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from sim.kernel.scheduler import Scheduler
from workloads import Workload
from workloads.named import generate


def moe(**changes) -> SimConfig:
    """DeepSeek-V3 on data-parallel H200s (lock-step ranks)."""
    return SimConfig(**{"model": "deepseek-v3", "gpu": "h200", "data_parallel_size": 2, "router": "round-robin",
                        "kv_tokens": 200_000, "memory_snapshots": 0, **changes})


def poisson(seed: int, rate: float, n: int = 40, outputs: tuple[int, int] = (2, 120)) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(arrival_time_s=np.cumsum(rng.exponential(1 / rate, n)), prompt_tokens=rng.integers(20, 1500, n),
                    output_tokens=rng.integers(*outputs, n), name="poisson")


def planned_steps(monkeypatch, config: SimConfig, workload: Workload):
    """The run, and how many steps its schedulers planned (`Scheduler.plan_step`)."""
    calls = []
    plan_step = Scheduler.plan_step

    def counted(self, now):
        calls.append(now)
        return plan_step(self, now)

    monkeypatch.setattr(Scheduler, "plan_step", counted)
    result = run_simulation(config, workload)
    monkeypatch.setattr(Scheduler, "plan_step", plan_step)
    return result, len(calls)


def assert_identical(fast, slow) -> None:
    """Every table and the summary (its wall time aside) equal to the last bit."""
    for name in ("requests", "steps"):
        pd.testing.assert_frame_equal(getattr(fast, name), getattr(slow, name), check_exact=True)
    assert fast.memory.equals(slow.memory)
    summary = [json.dumps({k: v for k, v in r.summary.items() if k != "wall_time_s"}, sort_keys=True, default=str)
               for r in (fast, slow)]
    assert summary[0] == summary[1]


def check(monkeypatch, config: SimConfig, workload: Workload):
    """``config`` on ``workload`` gives the same bytes with quiet steps as planning every step, and plans fewer
    steps; returns the run."""
    fast, planned = planned_steps(monkeypatch, config, workload)
    slow, every = planned_steps(monkeypatch, replace(config, step_by_step=True), workload)
    assert_identical(fast, slow)
    assert planned < every
    return fast


@pytest.mark.parametrize("seed, rate", [(0, 0.3), (1, 2.0), (2, 8.0)])
def test_quiet_steps_equal_planning_every_step_with_idle_ranks_and_waves(monkeypatch, seed, rate):
    """Sparse arrivals leave a rank idle on dummy batches and end waves (all ranks pause until the next arrival);
    dense ones keep every rank decoding, prefills beside decodes."""
    result = check(monkeypatch, moe(memory_snapshots=3), poisson(seed, rate))
    assert result.summary["lockstep_dummy_batches"] > 0
    if rate < 1:  # the waves ended: each rank has pause rows beside its common steps
        assert result.steps.groupby("replica").size().min() > result.summary["lockstep_steps"]


def test_quiet_steps_equal_planning_every_step_under_dp_lb_with_preemptions(monkeypatch):
    """Three ranks behind vLLM's DP load balancer (it reads the ranks at each step), pools small enough to
    preempt (the preempted requests wait, so their ranks plan every step until they are back)."""
    w = generate("lognormal:prompt_mean=400,prompt_cv=1,output_mean=200,output_cv=1,max_total=1500",
                 "poisson:rate=6", 60, seed=3)
    result = check(monkeypatch, moe(data_parallel_size=3, router=None, kv_tokens=3000, memory_snapshots=2), w)
    assert result.summary["preemptions"] > 0


def test_quiet_steps_equal_planning_every_step_with_released_turns(monkeypatch):
    """Session turns known only as the turn before leaves, released at that step's time (`Fleet._on_done`)."""
    w = generate("lognormal:prompt_mean=300,prompt_cv=1,output_mean=60,output_cv=1,max_total=3000",
                 "constant:rate=2", 30, seed=0, turns=3, think_time_s=2.5)
    check(monkeypatch, moe(router=None, kv_tokens=20_000), w)
