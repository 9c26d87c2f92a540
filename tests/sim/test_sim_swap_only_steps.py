"""A step that preempts every running request, swapping some out, and then has nothing left to run still moves
their blocks: vLLM v0's scheduler output is not empty while it has blocks to swap out or copy
(``SchedulerOutputs.is_empty``), so its engine runs that step and the worker makes the transfers. Its row of no
steps lasts at least an empty step plus those transfers (`engine.transfer_time_of`), with async host loads in
flight too, and fast-forward still equals step by step."""

import numpy as np
import pandas as pd
import pytest

from allocators.catalog import get_gpu, get_model
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import StepCostModel
from sim.kernel.runner import run_simulation
from sim.schedule_jacobian import RecordingStepCost, schedule_jacobian
from tests.sim.summaries import assert_same_step_totals, assert_same_summary, assert_same_tiered_run
from tests.sim.test_sim_host_tier import RecordingCost
from workloads import Workload

POOL = dict(kv_tokens=48 * 16, preemption="swap")
"""47 usable blocks of opt-13b, swapping on preemption."""


def beams_beside_a_decoder() -> Workload:
    """A, 8 beams of a 50-token prompt, admitted before B, a 5-token prompt: when the pool is full A's beams
    need more blocks in one step than B frees, so B is swapped out (3 blocks), then A preempts itself alone and
    is refused (its beams together outgrow the pool), leaving nothing to run in that step."""
    return Workload(arrival_time_s=np.zeros(2), prompt_tokens=np.array([50, 5]), output_tokens=np.full(2, 300),
                    beam_width=np.array([8, 1]), name="beams+decoder")


def swap_rows(steps):
    return steps[(steps["swap_blocks"] > 0) & (steps["num_steps"] == 0)]


@pytest.mark.parametrize("tier", [{}, {"cpu_offload_gib": 1.0}])
def test_a_step_that_swaps_everything_out_lasts_its_transfers(tier):
    """Before, the row lasted no time (the roofline's empty step), and B's swap-out was never charged."""
    cost = RecordingCost()
    fast = run_simulation(SimConfig(**POOL, **tier), beams_beside_a_decoder(), cost=cost)
    slow = run_simulation(SimConfig(step_by_step=True, **POOL, **tier), beams_beside_a_decoder())
    rows = swap_rows(fast.steps)
    assert len(rows) == 1 and fast.requests["rejected"].tolist() == [True, False]
    row = rows.iloc[0]
    assert row[["running", "preempted", "swap_blocks", "swap_slots"]].tolist() == [0, 2, 3, 48]
    moved = cost.transfer_time(row["copy_slots"], row["swap_slots"], row["swap_blocks"], row["page_maps"])
    assert moved > cost.transfer_time(swap_slots=48, swap_transfers=3) > 0 == cost.empty_step_s()
    assert row["duration_s"] == pytest.approx(moved, rel=1e-12)
    after = fast.steps.loc[rows.index[0] + 1]  # B swapped back in once the swap-out step has ended
    assert after["time_s"] == pytest.approx(row["time_s"] + moved, rel=1e-12) and after["swap_blocks"] == 3
    assert swap_rows(slow.steps)["duration_s"].tolist() == pytest.approx([moved], rel=1e-12)
    assert fast.requests["finished_s"].iloc[1] == pytest.approx(slow.requests["finished_s"].iloc[1], rel=1e-9)
    assert_same_summary(fast.summary, slow.summary)
    assert_same_step_totals(fast, slow)


def a_decoder_beside_a_load() -> Workload:
    """X computes its group's 512-token prefix, Y's 700 tokens evict it to the write-back host tier, then D
    decodes alone; C arrives at 22.45 s with that prefix, 32 blocks to load beside the steps, and takes every
    block D does not hold. D's next block finds none: it preempts itself, swapped (15 blocks) rather than
    refused, as C's blocks will free; nothing runs while C's load is still in flight."""
    return Workload(arrival_time_s=np.array([0.0, 10.0, 20.0, 22.45]), prompt_tokens=np.array([512, 700, 128, 600]),
                    output_tokens=np.array([1, 1, 200, 5]), prefix_group=np.array([0, 1, 2, 0]),
                    prefix_len=np.array([512, 0, 0, 512]), name="decoder beside a load")


def test_waiting_for_a_load_lasts_no_less_than_the_swap_out_beside_it():
    """C's load lands 4.1 ms into the row, the swap-out of D's 15 blocks takes 12.2 ms: the row lasts the swap
    (before: until the load landed), and C is scheduled when it ends."""
    options = dict(**POOL, cpu_offload_gib=1.0, offload_loads="async", scheduler_reserve_full_isl=False)
    cost = RecordingCost()
    fast = run_simulation(SimConfig(**options), a_decoder_beside_a_load(), cost=cost)
    slow = run_simulation(SimConfig(step_by_step=True, **options), a_decoder_beside_a_load())
    rows = swap_rows(fast.steps)
    assert len(rows) == 1
    row = rows.iloc[0]
    assert row[["running", "preempted", "swap_blocks", "swap_slots", "copy_slots"]].tolist() == [0, 1, 15, 240, 0]
    moved = cost.transfer_time(swap_slots=240, swap_transfers=15)
    load = cost.transfer_time(swap_slots=32 * 16, swap_transfers=32)
    c_arrives = fast.steps[fast.steps["reload_blocks"] > 0].iloc[0]
    assert c_arrives["time_s"] + load < row["time_s"] + moved  # the load lands inside the swap-out step
    assert row["duration_s"] == pytest.approx(moved, rel=1e-12)
    assert fast.requests["first_token_s"].iloc[3] > row["time_s"] + moved
    assert_same_tiered_run(fast, slow)


def test_the_schedule_jacobian_gives_a_swap_only_row_its_own_transfer():
    """Such a row prices one call, its transfers (`RecordingStepCost`), which `schedule_jacobian` must give to it,
    not to the next busy row: a swap-out of 200 blocks outlasts the decode step after it, which before took that
    call for its own, and every later row the call before its own. A request finishing at that decode step moves
    by its one step's overhead."""
    model, gpu = get_model("opt-13b"), get_gpu("a100-40gb")
    cost = RecordingStepCost(model, gpu, block_size=16)
    step = cost.step_time(0, 1, 100)
    swap = cost.transfer_time(swap_slots=200 * 16, swap_transfers=200)
    assert swap > step
    durations = [step, swap, step, step]
    steps = pd.DataFrame({"time_s": np.cumsum([0.0, *durations[:-1]]), "duration_s": durations,
                          "num_steps": [1, 0, 1, 1], "swap_blocks": [0, 200, 0, 0], "swap_slots": [0, 3200, 0, 0],
                          "copy_slots": 0, "page_maps": 0, "reload_slots": 0})
    cost.step_time(0, 1, 100)
    cost.step_time(0, 1, 100)
    ends = steps["time_s"] + steps["duration_s"]
    requests = pd.DataFrame({"arrival_s": [0.0], "first_token_s": [ends[0]], "finished_s": [ends[2]]})
    h = 1e-4
    slower = StepCostModel(model, gpu, block_size=16, step_overhead_s=cost.step_overhead_s + h)
    d_ttft, d_decode = schedule_jacobian(steps, cost.calls, [slower], h, requests)
    assert d_decode[0, 0] == pytest.approx(1.0)
