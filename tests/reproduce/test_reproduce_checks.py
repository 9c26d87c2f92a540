"""The comparison against the paper: sustained rates, tolerances, pass and miss, and by how much."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sim.reproduce import experiments, paper
from sim.reproduce.checks import (
    batch_checks,
    block_size_checks,
    breakdown_checks,
    capacity_checks,
    checks_frame,
    our_fig2_shares,
    preemption_checks,
    sustained_checks,
)
from sim.reproduce.sustained import sustained_rate, sustained_rates


def test_sustained_rate_interpolates_the_crossing():
    assert sustained_rate(np.array([1.0, 2.0, 3.0]), np.array([0.1, 0.1, 0.3]), 0.2) == pytest.approx(2.5)


def test_sustained_rate_edges():
    assert sustained_rate(np.array([1.0, 2.0]), np.array([0.1, 0.15]), 0.2) == 2.0  # never crosses: the last rate
    assert math.isnan(sustained_rate(np.array([1.0, 2.0]), np.array([0.3, 0.4]), 0.2))
    assert sustained_rate(np.array([1.0, 2.0]), np.array([0.1, np.inf]), 0.2) == 1.0
    # a dip back under the bound after the knee does not count; unsorted input is sorted first
    assert sustained_rate(np.array([3.0, 1.0, 2.0]), np.array([0.1, 0.1, 0.3]), 0.2) == pytest.approx(1.5)


def test_latency_curve_bisects_the_crossing_of_a_knee(monkeypatch):
    """Guards the sustained-rate measurement against grid bias: on a curve that blows up past its knee (here
    at 2.1 req/s), a straight line between grid points 2.0 and 2.5 crosses the bound far too early; bisecting
    the bracket finds the knee to within the grid step / 2**bisections, and adds the runs to the curve."""
    def fake_run(spec):
        rate = spec.config.rate
        latency = 0.1 if rate <= 2.1 else 0.1 + 40 * (rate - 2.1)
        return experiments.RunOutput({"normalized_latency_s_per_tok": latency}, spec.labels)

    monkeypatch.setattr(experiments, "run_spec", fake_run)
    grid = experiments.latency_curve("paged", "sharegpt-paper", (1.5, 2.0, 2.5, 3.0), 100.0)
    assert [o.labels["rate"] for o in grid] == [1.5, 2.0, 2.5]  # stops past 3x the bound
    frame = experiments.summary_rows(grid)
    assert sustained_rate(frame["rate"], frame["normalized_latency_s_per_tok"]) == pytest.approx(2.0031, abs=1e-4)

    refined = experiments.latency_curve("paged", "sharegpt-paper", (1.5, 2.0, 2.5, 3.0), 100.0, bisections=5)
    rates = [o.labels["rate"] for o in refined]
    assert len(rates) == 8 and rates == sorted(rates)
    frame = experiments.summary_rows(refined)
    assert sustained_rate(frame["rate"], frame["normalized_latency_s_per_tok"]) == pytest.approx(2.1025, abs=0.5 / 2**5)


def test_sustained_rates_per_allocator():
    curves = pd.DataFrame({"allocator": ["a", "a", "b", "b"], "rate": [1.0, 2.0, 1.0, 2.0],
                           "normalized_latency_s_per_tok": [0.1, 0.3, 0.1, 0.1]})
    assert sustained_rates(curves, 0.2) == {"a": pytest.approx(1.5), "b": 2.0}


def test_capacity_checks_are_exact():
    checks = capacity_checks(15_728, 7, (15_728 - 14_336) / 15_728)
    assert [c.passed for c in checks] == [True, True, True]
    assert capacity_checks(15_727, 7, 0.0885)[0].passed is False


def summary(ts, res, internal, external, free, running):
    return {"token_states_frac": ts, "reservation_frac": res, "internal_frag_frac": internal,
            "external_frag_frac": external, "free_frac": free, "mean_running": running}


def test_fig2_folds_external_and_free_and_applies_six_points():
    summaries = {"contiguous-max": summary(0.25, 0.133, 0.51, 0.05, 0.057, 7.0),
                 "paged": summary(0.90, 0.01, 0.02, 0.05, 0.02, 30.0)}
    rows = {c.metric: c for c in breakdown_checks(summaries)}
    assert rows["Orca (Max) token states"].passed is True  # +4.6 pts
    assert rows["Orca (Max) token states"].miss_by == "+4.6 pts"
    assert rows["Orca (Max) internal frag"].passed is False  # -6.3 pts
    assert rows["Orca (Max) external and free"].ours == pytest.approx(0.107)
    assert rows["vLLM waste together"].ours == pytest.approx(0.09)
    assert rows["vLLM token states"].passed is False
    assert len(rows) == 4 + 3 + 2
    in_use = rows["vLLM token states (of memory in use)"]
    assert in_use.ours == pytest.approx(0.90 / 0.98) and in_use.passed is True  # free excluded
    assert rows["vLLM waste (of memory in use)"].ours == pytest.approx(1 - 0.90 / 0.98)
    assert our_fig2_shares(summaries["paged"])["waste_together"] == pytest.approx(0.09)


def test_fig13_within_twenty_percent_and_order():
    values = {"contiguous-max": 7.0, "contiguous-pow2": 11.9, "contiguous-oracle": 11.0, "paged": 36.0}
    summaries = {k: summary(0, 0, 0, 0, 1, v) for k, v in values.items()}
    rows = {c.metric: c for c in batch_checks(summaries)}
    assert rows["Orca (Pow2) mean batch"].passed is False  # +21.3%
    assert rows["Orca (Pow2) mean batch"].miss_by == "+21.3%"
    assert rows["vLLM mean batch"].passed is True  # +18.3%
    assert rows["order Max < Pow2 < Oracle < vLLM"].passed is False


def test_sustained_ratio_ranges():
    checks = sustained_checks({"paged": 2.0, "contiguous-oracle": 1.0, "contiguous-max": 0.2})
    assert [(c.metric, c.passed) for c in checks] == [("vLLM / Orca (Oracle) sustained rate", True),
                                                      ("vLLM / Orca (Max) sustained rate", False)]
    assert checks[1].ours == pytest.approx(10.0)
    assert checks[1].miss_by == "+2.00x" and checks[0].miss_by == ""


def test_block_size_best_in_paper_range():
    results = pd.DataFrame({"workload": ["alpaca-paper"] * 3, "block_size": [8, 16, 128],
                            "normalized_latency_s_per_tok": [0.2, 0.1, 0.3]})
    (check,) = block_size_checks(results)
    assert check.ours == 16 and check.passed is True and check.paper is None


def test_checks_frame_has_a_row_per_check_with_miss_by():
    frame = checks_frame(capacity_checks(15_728, 7, 0.0885))
    assert list(frame["experiment"]) == ["capacity"] * 3
    assert "miss_by" in frame.columns
    assert paper.FIG2_REQUESTS == 3600 * paper.FIG2_RATE


def test_preemption_checks_read_swap_over_recompute_at_small_and_medium_blocks():
    """Fig. 19 (b): swap above recompute at the smallest block size, within 10% of it at 16-64 (the one farthest
    from 1 is reported: here 0.88 at 64, a miss)."""
    latency = {(1, "recompute"): 1.0, (1, "swap"): 1.5, (16, "recompute"): 1.0, (16, "swap"): 1.05,
               (32, "recompute"): 1.0, (32, "swap"): 0.97, (64, "recompute"): 1.0, (64, "swap"): 0.88,
               (256, "recompute"): 1.0, (256, "swap"): 0.5}
    results = pd.DataFrame([{"block_size": b, "preemption": m, "normalized_latency_s_per_tok": v}
                            for (b, m), v in latency.items()])
    small, medium = preemption_checks(results)
    assert (small.metric, small.ours, small.passed) == ("swap / recompute latency at block size 1", 1.5, True)
    assert medium.metric == "swap / recompute latency at block sizes 16-64, farthest from 1"
    assert medium.ours == pytest.approx(0.88) and medium.passed is False and medium.unit == "ratio"
    assert preemption_checks(results[results.block_size >= 128])[0].passed is False  # 0.5 at 256: swap is faster
    assert preemption_checks(results.iloc[:0]) == []
