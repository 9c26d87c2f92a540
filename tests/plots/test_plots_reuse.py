"""The reuse figure (`sim.plots.reuse`): hit rate by tier over time, prefill tokens saved and TTFT, from
result tables; and `kvsim compare --reuse-baseline` writes the runs `kvsim plot --kind reuse` draws."""

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from matplotlib.figure import Figure

from sim.cli import main
from sim.plots import plot_reuse
from sim.plots.reuse import hit_rate_over_time, prefill_saved
from sim.plots.style import ALLOCATOR_COLORS


def test_hit_rate_by_tier_from_per_step_columns():
    steps = pd.DataFrame({"time_s": [0.0, 1.0, 2.0, 3.0], "prefill_tokens": [100, 50, 0, 25],
                          "gpu_hit_tokens": [0, 50, 0, 50], "host_hit_tokens": [0, 0, 0, 25]})
    rates = hit_rate_over_time(steps, bins=4)
    gpu, host = (rates[rates["tier"] == tier] for tier in ("gpu", "host"))
    assert gpu["time_s"].tolist() == pytest.approx([0.0, 0.75, 2.25])  # the idle bin is left out
    assert gpu["hit_rate"].tolist() == pytest.approx([0.0, 0.5, 0.5])
    assert host["hit_rate"].tolist() == pytest.approx([0.0, 0.0, 0.25])


def test_hit_rate_without_tier_columns_comes_from_admissions():
    steps = pd.DataFrame({"time_s": [0.0, 1.0], "prefill_tokens": [10, 10]})
    requests = pd.DataFrame({"admitted_s": [0.0, 0.5, 1.0, np.nan], "prompt_tokens": [100, 100, 200, 50],
                             "cached_tokens": [0, 50, 150, 0]})
    rates = hit_rate_over_time(steps, requests, bins=2)
    assert set(rates["tier"]) == {"gpu"}
    assert rates["hit_rate"].tolist() == pytest.approx([50 / 200, 150 / 200])
    with pytest.raises(ValueError, match="requests table"):
        hit_rate_over_time(steps)


def test_prefill_saved_splits_tiers_and_falls_back_to_cached_tokens():
    saved = prefill_saved({"radix": {"gpu_hit_tokens": 300, "host_hit_tokens": 100, "prefill_tokens": 600},
                           "paged": {"cached_prompt_tokens": 250, "prefill_tokens": 750}})
    assert saved["saved_frac"].tolist() == pytest.approx([0.4, 0.25])
    assert saved["gpu_hit_tokens"].tolist() == [300, 250] and saved["host_hit_tokens"].tolist() == [100, 0]


def test_compare_reuse_baseline_then_plot(tmp_path):
    trace = tmp_path / "sessions.csv"
    runner = CliRunner()
    result = runner.invoke(main, ["trace", "generate", "--lengths", "fixed:prompt=200,output=60", "--arrivals",
                                  "poisson:rate=2", "--num-requests", "60", "--turns", "3", "--think-time-s", "1",
                                  "--out", str(trace)])
    assert result.exit_code == 0, result.output
    out = tmp_path / "cmp"
    result = runner.invoke(main, ["compare", str(trace), "--allocator", "paged,contiguous-oracle",
                                  "--reuse-baseline", "--kv-tokens", "20000", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summaries = json.loads(result.output.strip().splitlines()[-1])
    assert [s.get("run", s["allocator"]) for s in summaries] == ["paged", "paged-no-reuse", "contiguous-oracle"]
    paged, baseline, _ = summaries
    assert paged["cached_prompt_tokens"] > 0 and baseline["cached_prompt_tokens"] == 0
    assert paged["prefill_tokens"] + paged["cached_prompt_tokens"] == baseline["prefill_tokens"]
    assert paged["ttft_p50_s"] < baseline["ttft_p50_s"]
    result = runner.invoke(main, ["plot", *map(str, sorted(out.iterdir())), "--kind", "reuse", "--dpi", "30",
                                  "--out", str(tmp_path / "reuse.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "reuse.png").read_bytes()[:4] == b"\x89PNG"



def test_compare_warnings_name_the_baseline_and_not_its_own_settings(tmp_path):
    """The no-reuse baseline turns prefix caching off, so a host tier means nothing to it: that is kvsim's
    doing, not the user's, and is not warned of; a rejection in it is told under its own name."""
    trace = tmp_path / "long.csv"
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens,prefix_group,prefix_len\n"
                     + "".join(f"{i},300,20,0,256\n" for i in range(6)) + "6,5000,20,1,0\n")
    result = CliRunner().invoke(main, ["compare", str(trace), "--allocator", "paged", "--reuse-baseline",
                                       "--kv-tokens", "2000", "--cpu-offload-gib", "1", "--json"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("Warning")]
    assert any(line.startswith("Warning: paged: 1 of 7 requests rejected") for line in warnings), warnings
    assert any(line.startswith("Warning: paged-no-reuse: 1 of 7 requests rejected") for line in warnings)
    assert not any("ignored" in line for line in warnings), warnings


def test_plot_reuse_returns_three_panels_and_checks_its_runs():
    steps = pd.DataFrame({"time_s": [0.0, 1.0], "prefill_tokens": [10, 5], "gpu_hit_tokens": [0, 5],
                          "host_hit_tokens": [0, 5]})
    requests = pd.DataFrame({"ttft_s": [0.1, 0.2], "rejected": [False, False]})
    summary = {"gpu_hit_tokens": 5, "host_hit_tokens": 5, "prefill_tokens": 15}
    fig = plot_reuse({"radix": steps}, {"radix": requests}, {"radix": summary})
    assert isinstance(fig, Figure) and len(fig.axes) == 3
    assert any("host" in t.get_text() for t in fig.axes[0].get_legend().get_texts())
    with pytest.raises(ValueError, match="same runs"):
        plot_reuse({"radix": steps}, {}, {"radix": summary})


def test_every_run_of_the_reuse_figure_has_its_own_colour():
    """Run names that are not allocators ("no reuse", "radix + host") once hashed to the same grey, so two
    TTFT curves could not be told apart; allocators keep their fixed colours. Notebook 06's eight runs are
    more than the series palette has spare: the colours of allocators not drawn come next, and its legend sits
    below the panel, where eight entries no longer cover the curves."""
    names = ["no reuse", "paged", "paged + host", "paged + host, write-through",
             "paged + host, write-through, threshold 2", "radix", "radix + host", "radix, page 1"]
    steps = pd.DataFrame({"time_s": [0.0, 1.0], "prefill_tokens": [10, 5], "gpu_hit_tokens": [0, 5],
                          "host_hit_tokens": [0, 0]})
    requests = pd.DataFrame({"ttft_s": [0.1, 0.2], "rejected": [False, False]})
    summary = {"gpu_hit_tokens": 5, "host_hit_tokens": 0, "prefill_tokens": 15}
    fig = plot_reuse({n: steps for n in names}, {n: requests for n in names}, {n: summary for n in names})
    colours = [line.get_color() for line in fig.axes[2].get_lines()]
    assert len(colours) == len(names) and len(set(colours)) == len(names)
    assert colours[1] == ALLOCATOR_COLORS["paged"] and colours[5] == ALLOCATOR_COLORS["radix"]
    legend = fig.axes[2].get_legend()
    assert [t.get_text() for t in legend.get_texts()][-1] == "radix, page 1"
    fig.canvas.draw()
    assert legend.get_window_extent().y1 < fig.axes[2].get_window_extent().y0


def test_prefill_saved_panel_reads_millions_without_an_offset_and_wraps_long_run_names():
    """Notebook 06's panel once printed "1e6" beside its axis label and gave its longest run name a margin that
    pushed the panels apart."""
    names = ["paged", "paged + host, write-through, threshold 2"]
    steps = pd.DataFrame({"time_s": [0.0, 1.0], "prefill_tokens": [10, 5], "gpu_hit_tokens": [0, 5],
                          "host_hit_tokens": [0, 0]})
    requests = pd.DataFrame({"ttft_s": [0.1, 0.2], "rejected": [False, False]})
    summary = {"gpu_hit_tokens": 2_000_000, "host_hit_tokens": 0, "prefill_tokens": 4_000_000}
    fig = plot_reuse({n: steps for n in names}, {n: requests for n in names}, {n: summary for n in names})
    saved = fig.axes[1]
    fig.canvas.draw()
    assert saved.xaxis.get_offset_text().get_text() == ""
    assert any(t.get_text().endswith("M") for t in saved.get_xticklabels())
    labels = [t.get_text() for t in saved.get_yticklabels()]
    assert labels == ["Paged", "paged + host, write-through,\nthreshold 2"]
