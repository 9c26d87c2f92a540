"""The fast-forward == step-by-step checks every scenario makes of two runs: their JSON summaries and memory maps."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest


def assert_same_summary(fast: dict, slow: dict, skip: tuple[str, ...] = ("wall_time_s",)) -> None:
    """Every key but ``skip`` equal: floats to 1e-9 (the two modes sum the same steps in another order), nested
    dicts (a hybrid pool's ``kv_groups`` shares) and lists of dicts (a fleet's replicas) key by key the same way,
    everything else exactly."""
    for key, value in fast.items():
        if key in skip:
            continue
        if isinstance(value, dict) and isinstance(slow[key], dict):
            assert value.keys() == slow[key].keys(), key
            assert_same_summary(value, slow[key], skip=())
        elif isinstance(value, list) and value and isinstance(value[0], dict):  # a fleet's ``per_replica``
            assert len(value) == len(slow[key]), key
            for one, other in zip(value, slow[key], strict=True):
                assert_same_summary(one, other, skip=())
        elif isinstance(value, float):
            assert value == pytest.approx(slow[key], rel=1e-9, abs=1e-12), key
        else:
            assert value == slow[key], key


def assert_same_requests(fast, slow) -> None:
    """Two runs' requests tables are the same, every column: floats to 1e-9, NaN where the other is NaN,
    everything else (replicas, hits, preemptions, rejections, hash ids) exactly. A latency (``ttft_s``, ``e2e_s``,
    ...) is a difference of two times, so it keeps their rounding: 1e-9 of the run's clock, not of itself (a
    10 ms TTFT at t = 94 s differs by 1e-11 s between the two modes' sums of step times)."""
    a, b = fast.requests, slow.requests
    assert list(a.columns) == list(b.columns)
    assert len(a) == len(b), f"requests: {len(a)} rows against {len(b)}"
    clock = max(1.0, float(np.nanmax(a["finished_s"].to_numpy(float), initial=1.0)))
    for column in a.columns:
        if a[column].dtype.kind == "f":
            atol = 1e-9 * clock if column.endswith("_s") or "latency" in column else 1e-12
            np.testing.assert_allclose(a[column], b[column], rtol=1e-9, atol=atol, err_msg=column)
        else:
            assert a[column].astype(object).tolist() == b[column].astype(object).tolist(), column


def assert_same_memory_map(fast, slow) -> None:
    """Two runs' memory-map tables (`SimResult.memory`) are the same: the snapshots fall on the same steps
    (times to 1e-9, as the steps' start times) and show every slot with the same owner, request and state."""
    a, b = fast.memory, slow.memory
    assert list(a.columns) == list(b.columns)
    assert len(a) == len(b), f"memory map: {len(a)} rows against {len(b)}"
    np.testing.assert_allclose(a["time_s"], b["time_s"], rtol=1e-9)
    pd.testing.assert_frame_equal(a.drop(columns="time_s"), b.drop(columns="time_s"))


STEP_TOTALS = ("prefill_tokens", "copies", "copy_slots", "page_maps", "swap_blocks", "swap_slots", "preempted",
               "gpu_hit_tokens", "host_hit_tokens", "reload_blocks", "reload_slots", "reload_transfers")
"""The step columns that count events, whose sums do not depend on how rows group steps."""


def assert_same_step_totals(fast, slow) -> None:
    """Two runs' step tables charge the same work: every `STEP_TOTALS` column sums to the same, and so do the
    decode steps' sequences (``decode_seqs`` a step, times the row's ``num_steps``)."""
    for column in STEP_TOTALS:
        assert fast.steps[column].sum() == slow.steps[column].sum(), column
    decoded = [int((r.steps["decode_seqs"] * r.steps["num_steps"]).sum()) for r in (fast, slow)]
    assert decoded[0] == decoded[1], "decode_seqs x num_steps"


def assert_same_hybrid_run(fast, slow) -> None:
    """A run on a hybrid pool (window or Mamba groups) against its step-by-step twin: each request's finish to
    1e-12, the share and occupancy keys of the summary and each group's shares (``kv_groups``) to 1e-9, and the
    steps' totals (`assert_same_step_totals`)."""
    np.testing.assert_allclose(fast.requests["finished_s"], slow.requests["finished_s"], rtol=1e-12)
    for key, value in fast.summary.items():
        if key.endswith("_frac") or key in ("mean_running", "preemptions", "max_running"):
            assert value == pytest.approx(slow.summary[key], rel=1e-9, abs=1e-12), key
    for name, shares in fast.summary["kv_groups"].items():
        assert shares == pytest.approx(slow.summary["kv_groups"][name], rel=1e-9)
    assert_same_step_totals(fast, slow)


def assert_same_tiered_run(fast, slow) -> None:
    """A run with a host tier against its step-by-step twin: each request's hits by tier and preemptions exactly,
    its finish time to 1e-9, the summary, the memory map and the steps' totals (`assert_same_summary`,
    `assert_same_memory_map`, `assert_same_step_totals`)."""
    for column in ("cached_tokens", "gpu_hit_tokens", "host_hit_tokens", "preemptions"):
        assert fast.requests[column].tolist() == slow.requests[column].tolist(), column
    np.testing.assert_allclose(fast.requests["finished_s"], slow.requests["finished_s"], rtol=1e-9)
    assert_same_summary(fast.summary, slow.summary)
    assert_same_memory_map(fast, slow)
    assert_same_step_totals(fast, slow)


def assert_same_fleet_run(fast, slow) -> None:
    """A fleet run against its step-by-step twin: every request on the same replica, its first token and finish
    to 1e-9, the summary (its replicas' apart), the memory map and the steps' totals."""
    assert fast.requests["replica"].tolist() == slow.requests["replica"].tolist()
    for column in ("first_token_s", "finished_s"):
        np.testing.assert_allclose(fast.requests[column], slow.requests[column], rtol=1e-9)
    assert_same_summary(fast.summary, slow.summary, skip=("wall_time_s", "per_replica"))
    assert_same_memory_map(fast, slow)
    assert_same_step_totals(fast, slow)


def mixed_prompts(count: int = 60, seed: int = 5, gap_s: float = 0.03, prompts: tuple[int, int] = (100, 400),
                  outputs: tuple[int, int] = (20, 300)):
    """Poisson arrivals ``gap_s`` apart on average with uniform prompt and output lengths: batches that grow and
    shrink, so a clock whose step cost depends on the batch or the context changes from run to run."""
    from workloads import Workload

    rng = np.random.default_rng(seed)
    return Workload(arrival_time_s=np.cumsum(rng.exponential(gap_s, count)),
                    prompt_tokens=rng.integers(*prompts, count), output_tokens=rng.integers(*outputs, count),
                    name="mixed-prompts")


def assert_fast_forward_equals_stepping(config, workload) -> None:
    """``config`` runs ``workload`` in fewer rows fast-forwarded than step by step, with the same finish times (to
    1e-9), summary, memory maps and step totals."""
    from sim.kernel.runner import run_simulation

    fast = run_simulation(config, workload)
    slow = run_simulation(replace(config, step_by_step=True), workload)
    assert len(fast.steps) < len(slow.steps)
    np.testing.assert_allclose(fast.requests["finished_s"], slow.requests["finished_s"], rtol=1e-9)
    assert_same_summary(fast.summary, slow.summary)
    assert_same_memory_map(fast, slow)
    assert_same_step_totals(fast, slow)
