"""Sweep and SLO figures: what they draw from a results table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from sim.plots.sweep import plot_slo, plot_sweep


def _sweep_table() -> pd.DataFrame:
    rows = []
    for allocator in ("paged", "contiguous-max"):
        for rate in (1.0, 2.0, 4.0):
            for seed in (0, 1):
                rows.append({"point_id": f"{allocator}{rate}{seed}", "status": "ok", "allocator": allocator,
                             "rate": rate, "seed": seed, "block_size": 16,
                             "normalized_latency_s_per_tok": rate * (1 if allocator == "paged" else 3) + seed,
                             "token_states_frac": 0.5})
    rows.append({"point_id": "bad", "status": "failed", "allocator": "paged", "rate": 8.0, "seed": 0,
                 "block_size": 16, "normalized_latency_s_per_tok": np.nan, "token_states_frac": np.nan})
    return pd.DataFrame(rows)


def test_one_line_per_hue_value_through_the_means():
    fig = plot_sweep(_sweep_table(), "normalized_latency_s_per_tok", "rate", hue="allocator")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"Paged", "Max (contiguous)"}  # the failed point adds no x value
    np.testing.assert_allclose(lines["Paged"].get_xdata(), [1.0, 2.0, 4.0])
    np.testing.assert_allclose(lines["Paged"].get_ydata(), [1.5, 2.5, 4.5])  # mean over the two seeds
    np.testing.assert_allclose(lines["Max (contiguous)"].get_ydata(), [3.5, 6.5, 12.5])
    assert len(ax.collections) == 2  # a min-max band per line (two seeds per point)
    assert ax.get_xlabel() == "arrival rate (req/s)" and ax.get_ylabel() == "normalized latency (s/token)"


def test_defaults_pick_the_swept_rate_and_categorical_axes_work():
    table = _sweep_table()
    fig = plot_sweep(table)
    assert fig.axes[0].get_xlabel() == "arrival rate (req/s)"
    fig = plot_sweep(table, "token_states_frac", "allocator", hue="seed")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["Max (contiguous)", "Paged"]
    assert {line.get_label() for line in ax.get_lines()} - {"_nolegend_"} == {"seed=0", "seed=1"}


def test_bad_columns_are_named():
    with pytest.raises(ValueError, match="lacks column"):
        plot_sweep(_sweep_table(), "nope", "rate")
    failed = _sweep_table().assign(status="failed")
    with pytest.raises(ValueError, match="no successful points"):
        plot_sweep(failed, "normalized_latency_s_per_tok", "rate")


def test_slo_plot_draws_brackets():
    table = pd.DataFrame({
        "allocator": ["paged", "contiguous-max", "contiguous-pow2"], "block_size": [16, 16, 16],
        "status": ["ok", "ok", "below-min"], "sustained_rate": [6.0, 1.5, np.nan],
        "rate_ok": [6.0, 1.5, np.nan], "rate_fail": [6.2, 1.6, 0.5], "target": ["e2e_p50_s<=0.5"] * 3,
    })
    fig = plot_slo(table, x="allocator")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["Max (contiguous)", "Paged"]
    line = ax.get_lines()[0]
    np.testing.assert_allclose(line.get_ydata(), [1.5, 6.0])
    assert "e2e_p50_s<=0.5" in ax.get_title()
    with pytest.raises(ValueError, match="no configuration met the target"):
        plot_slo(table.iloc[2:], x="allocator")
