"""What the plot functions take: the results `run_workload` and `compare_allocators` return (a dict of
`SimResult`s, or one), one run's table where several go, a list of summaries; and a one-line ValueError naming
the parameter, what it got and what to pass for anything else, or for a reference that names nothing drawn."""

from __future__ import annotations

import pandas as pd
import pytest
from matplotlib.figure import Figure

from sim.plots import (
    plot_batch_over_time,
    plot_batch_sizes,
    plot_block_size_sweep,
    plot_breakdown,
    plot_hit_rate_by_router,
    plot_latency_cdf,
    plot_latency_vs_rate,
    plot_memory_comparison,
    plot_memory_map,
    plot_memory_maps,
    plot_memory_over_time,
    plot_replicas_over_time,
    plot_reuse,
)
from sim.plots.data import SINGLE_RUN
from sim.plots.style import allocator_label
from sim.reproduce.explore import run_workload
from workloads import load_preset


@pytest.fixture(scope="module")
def runs() -> dict:
    workload = load_preset("sharegpt-demo", num_requests=30)
    return run_workload(workload, ["paged", "contiguous-max"], model="llama-3-8b", gpu="a10g", kv_tokens=20000,
                        memory_snapshots=2)


def bar_heights(fig: Figure) -> list[float]:
    return [round(p.get_height(), 9) for p in fig.axes[0].patches]


def line_labels(fig: Figure) -> list[str]:
    return [line.get_label() for ax in fig.axes for line in ax.lines]


def test_summary_figures_take_results_a_result_and_a_list_of_summaries(runs):
    summaries = {name: r.summary for name, r in runs.items()}
    for plot in (plot_breakdown, plot_batch_sizes):
        drawn = bar_heights(plot(summaries))
        assert bar_heights(plot(runs)) == drawn
        assert bar_heights(plot(list(summaries.values()))) == drawn  # rows named by their allocator
        assert bar_heights(plot(list(runs.values()))) == drawn
        one = plot(runs["paged"])
        assert [t.get_text() for t in one.axes[0].get_xticklabels()] == [allocator_label("paged")]
        assert bar_heights(plot(runs["paged"].summary)) == bar_heights(one)


def test_table_figures_take_results_and_draw_the_same(runs):
    steps = {name: r.steps for name, r in runs.items()}
    requests = {name: r.requests for name, r in runs.items()}
    memory = {name: r.memory for name, r in runs.items()}
    assert line_labels(plot_batch_over_time(runs)) == line_labels(plot_batch_over_time(steps))
    assert line_labels(plot_latency_cdf(runs)) == line_labels(plot_latency_cdf(requests))
    assert ([ax.get_title(loc="left") for ax in plot_memory_comparison(runs).axes]
            == [ax.get_title(loc="left") for ax in plot_memory_comparison(steps).axes])
    assert ([ax.get_title() for ax in plot_memory_maps(runs).axes]
            == [ax.get_title() for ax in plot_memory_maps(memory).axes])
    assert isinstance(plot_memory_over_time(runs["paged"]), Figure)
    assert isinstance(plot_memory_map(runs["paged"]), Figure)
    full = plot_reuse(steps, requests, {name: r.summary for name, r in runs.items()})
    assert line_labels(plot_reuse(runs)) == line_labels(full)


def test_one_table_where_several_go_is_one_run(runs):
    labels = line_labels(plot_latency_cdf(runs["paged"].requests))
    assert labels and all(label.startswith(f"{SINGLE_RUN} (n=") for label in labels)
    assert line_labels(plot_batch_over_time(runs["paged"].steps)) == [SINGLE_RUN]
    assert line_labels(plot_batch_over_time(runs["paged"])) == [allocator_label("paged")]


@pytest.mark.parametrize(("call", "message"), [
    (lambda r: plot_memory_over_time({k: v.steps for k, v in r.items()}),
     "plot_memory_over_time: `steps` must be one run's steps table (a DataFrame, or its SimResult), got a dict "
     "of 2 DataFrames; for several runs use plot_memory_comparison"),
    (lambda r: plot_latency_cdf([v.requests for v in r.values()]),
     "plot_latency_cdf: `requests_by_allocator` must map run name -> requests table (or SimResult), got a list "
     "of 2 DataFrames"),
    (lambda r: plot_breakdown({k: v.steps for k, v in r.items()}),
     "plot_breakdown: `summaries` must map run name -> summary dict (or SimResult), but 'paged' maps to a "
     "DataFrame"),
    (lambda r: plot_batch_sizes(["paged", "contiguous-max"]),
     "plot_batch_sizes: `summaries` as a list must hold summary dicts or SimResults, got a list of 2 strs"),
    (lambda r: plot_hit_rate_by_router(r), "plot_hit_rate_by_router: `results` must be a DataFrame of one row per "
                                           "run with a router column"),
    (lambda r: plot_latency_vs_rate(r), "plot_latency_vs_rate: `curves` must be a DataFrame of rows of "
                                        "allocator, rate and latency"),
    (lambda r: plot_block_size_sweep(r), "plot_block_size_sweep: `results` must be a DataFrame"),
    (lambda r: plot_replicas_over_time(r), "plot_replicas_over_time: `steps` must be one run's steps table"),
    (lambda r: plot_reuse({k: v.steps for k, v in r.items()}), "plot_reuse: pass `requests` and `summaries`"),
    # numeric arguments and lists of columns: 0, a negative number or a lone string failed inside numpy
    (lambda r: plot_memory_over_time(r["paged"], max_points=0), "time_binned: `max_points` must be a whole number "
                                                                ">= 1, got 0"),
    (lambda r: plot_batch_over_time(r, max_points=-5), "`max_points` must be a whole number >= 1, got -5"),
    (lambda r: plot_memory_map(r["paged"], width=-3), "plot_memory_map: `width` must be a whole number >= 1, got -3"),
    (lambda r: plot_memory_map(r["paged"], width=0), "`width` must be a whole number >= 1, got 0"),
    (lambda r: plot_latency_cdf(r, metrics="ttft_s"), "plot_latency_cdf: `metrics` must be a list of column names, "
                                                      "such as ('ttft_s',), got a str"),
    (lambda r: plot_latency_cdf(r, metrics=()), "plot_latency_cdf: `metrics` names no column to draw"),
    (lambda r: plot_block_size_sweep(pd.DataFrame({"block_size": [16]}), panels=()),
     "plot_block_size_sweep: `panels` names no column to draw"),
])
def test_other_inputs_get_one_line_naming_the_parameter(runs, call, message):
    with pytest.raises(ValueError) as info:
        call(runs)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_reference_must_name_runs_drawn_and_known_shares(runs):
    summaries = {name: r.summary for name, r in runs.items()}
    with pytest.raises(ValueError, match=r"plot_batch_sizes: `reference` names 'Paged', not among the runs "
                                         r"plotted \(contiguous-max, paged\)"):
        plot_batch_sizes(summaries, reference={"Paged": 7.0})
    with pytest.raises(ValueError, match=r"`reference` names 'contiguous-oracle', not among the runs plotted"):
        plot_breakdown(summaries, reference={"contiguous-oracle": {"token_states": 0.4}})
    with pytest.raises(ValueError, match=r"`reference\['paged'\]` names 'token_state', not among the shares "
                                         r"\(token_states, reservation, "):
        plot_breakdown(summaries, reference={"paged": {"token_state": 0.9}})
    with pytest.raises(ValueError, match="must map a run to its shares .* but 'paged' maps to 0.9"):
        plot_breakdown(summaries, reference={"paged": 0.9})
    fig = plot_breakdown(summaries, reference={"paged": {"token_states": 0.963, "waste_together": 0.037}})
    assert sum(p.get_hatch() is not None for p in fig.axes[0].patches) == 2


def test_hit_rate_bars_refuse_to_average_different_fleets():
    fleets = pd.DataFrame({"router": ["round-robin", "prefix-aware"] * 2, "replicas": [2, 2, 8, 8],
                           "prefix_hit_frac": [0.50, 0.64, 0.10, 0.62]})
    with pytest.raises(ValueError, match="router 'round-robin' has 2 rows that differ in replicas, and one bar "
                                         "would average them: pass x='replicas'"):
        plot_hit_rate_by_router(fleets)
    assert sorted(bar_heights(plot_hit_rate_by_router(fleets, x="replicas"))) == [0.1, 0.5, 0.62, 0.64]
    # seeds are replicates: their mean is what a bar is for
    seeds = fleets.assign(replicas=4, seed=[0, 0, 1, 1])
    assert bar_heights(plot_hit_rate_by_router(seeds)) == [0.3, 0.63]
