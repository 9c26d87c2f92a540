"""A preemption livelock vLLM's scheduler cycles in without end, which kvsim stops by rejecting the request it
keeps preempting (`sim.kernel.livelock`), and the bound that keeps the guard off every run that progresses.

The case (mamba_fuzz.py seed 10, draw 95, shrunk to three rows; vLLM 0.33 still cycling after 10,000 steps):
Jamba with prefix caching on ('align'), a long-prefill threshold of 16 tokens (below its 80-token block, so
prefills advance 16 tokens a step), 43 blocks, the priority policy, and a request fanned out to four children.
The pool holds two children's prefills but not three, and the children tie on vLLM's victim key, so the one
furthest along is preempted each time, just before its prefill ends."""

from types import SimpleNamespace

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.livelock import SILENT_FLOOR, StallWatch
from sim.kernel.runner import run_simulation
from workloads import Workload


def config(**options) -> SimConfig:
    return SimConfig(**(dict(model="jamba-1.5-mini", kv_tokens=43 * 80, max_num_batched_tokens=256,
                             long_prefill_token_threshold=16, parallel_sampling="fan-out", memory_snapshots=0,
                             scheduling_policy="priority") | options))


def workload() -> Workload:
    return Workload(arrival_time_s=np.zeros(3), prompt_tokens=np.array([631, 520, 849]),
                    output_tokens=np.array([18, 17, 13]), n=np.array([2, 1, 4]), priority=np.zeros(3, int),
                    name="livelock")


@pytest.mark.parametrize("step_by_step", [False, True])
def test_a_livelock_ends_with_the_cycled_request_rejected_with_its_reason(step_by_step):
    result = run_simulation(config(step_by_step=step_by_step, debug_invariants=1), workload())
    req = result.requests
    assert req["rejected"].tolist() == [False, False, True]
    assert req.loc[2, "reject_reason"].startswith("preemption livelock: no request produced a token in ")
    assert "vLLM's scheduler cycles so without end" in req.loc[2, "reject_reason"]
    assert result.summary["completed"] == 2
    # the children were preempted over and over before the guard stepped in: its bound, not a hair trigger
    assert req.loc[2, "preemptions"] > 100


def test_fast_forward_equals_step_by_step_through_the_rejection():
    fast = run_simulation(config(), workload())
    slow = run_simulation(config(step_by_step=True), workload())
    assert fast.requests.equals(slow.requests)


def test_without_the_tie_the_same_pool_runs_every_request():
    """First come, first served preempts the latest admitted child, never the one furthest along: no cycle."""
    result = run_simulation(config(scheduling_policy="fcfs"), workload())
    assert result.summary["completed"] == 3 and result.summary["rejected"] == 0


def test_the_watch_counts_steps_without_a_token_and_answers_past_twice_the_prefill_left():
    watch = StallWatch()
    live = [SimpleNamespace(prefill_target=t) for t in (1000, 500)]  # 1,500 prefill tokens: the bound is 3,000 + the floor
    watch.stepped(2 * 1500 + SILENT_FLOOR, produced=False)
    assert watch.stuck(live) is None
    watch.stepped(1, produced=False)
    reason = watch.stuck(live)
    assert reason is not None and f"in {2 * 1500 + SILENT_FLOOR + 1} steps" in reason and "the 1500 prefill" in reason
    assert watch.silent == 0  # a further rejection needs a further stretch


def test_a_token_resets_the_watch_and_the_floor_holds_with_no_prefill_left():
    watch = StallWatch()
    watch.stepped(10_000, produced=False)
    watch.stepped(1, produced=True)
    assert watch.silent == 0
    watch.stepped(SILENT_FLOOR, produced=False)
    assert watch.stuck([]) is None


def mamba1_cycle() -> Workload:
    """mamba_fuzz.py seed 26, draw 65, shrunk to ten rows (vLLM 0.33 still cycling after 100,000 steps): Jamba
    with prefix caching on, 64-token chunks below its 80-token block, 42 blocks, the priority policy, fanned-out
    children and shared system prompts. Preempted before its prefill ends, a Mamba-1 request has cached blocks
    past those it hit, but hits none of them again: its layers export no state from inside a prefill."""
    arrival, prompt, output, group, prefix, priority, n = np.array([
        (0, 416, 65, 0, 416, 2, 2), (0, 416, 25, 0, 416, 2, 5), (1, 403, 115, -1, 0, 2, 5),
        (1, 432, 220, -1, 0, 2, 5), (1, 416, 144, 0, 416, 1, 5), (2, 384, 144, 1, 384, 1, 2),
        (2, 416, 66, 0, 416, 1, 5), (3, 416, 62, 0, 416, 0, 5), (3, 416, 183, 0, 416, 0, 5),
        (3, 384, 201, 1, 384, 0, 2)]).T
    return Workload(arrival_time_s=arrival.astype(float), prompt_tokens=prompt, output_tokens=output,
                    prefix_group=group, prefix_len=prefix, priority=priority, n=n, name="mamba1 cycle")


@pytest.mark.parametrize("async_scheduling,step_by_step", [(True, False), (True, True), (False, False)])
def test_a_victim_that_caches_more_than_it_will_hit_is_still_caught(async_scheduling, step_by_step):
    """Under async scheduling a prefill preempted with more blocks cached than it hit when admitted is requeued,
    not refused as too large (`InFlight.comes_back`); that must not keep the livelock watch from it: kvsim ran
    this case without end (as vLLM does) until the watch looked at every victim."""
    cfg = config(kv_tokens=42 * 80, max_num_batched_tokens=1024, long_prefill_token_threshold=64,
                 scheduler_reserve_full_isl=False, prefix_cache_retention_interval=80, step_time=1.0,
                 async_scheduling=async_scheduling, step_by_step=step_by_step)
    req = run_simulation(cfg, mamba1_cycle()).requests
    assert req["rejected"].tolist() == [False, False, False, True] + [False] * 6
    assert req.loc[3, "reject_reason"].startswith("preemption livelock: no request produced a token in ")
