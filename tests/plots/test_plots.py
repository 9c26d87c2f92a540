"""The plot functions draw what the tables say: checked on small synthetic frames with known values."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from sim.plots import (
    plot_batch_over_time,
    plot_batch_sizes,
    plot_block_size_sweep,
    plot_breakdown,
    plot_latency_cdf,
    plot_latency_vs_rate,
    plot_memory_comparison,
    plot_memory_map,
    plot_memory_maps,
    plot_memory_over_time,
)
from sim.plots.data import time_binned
from sim.plots.memory import memory_shares_over_time
from sim.plots.memory_map import FREE_COLOR, OVERHEAD_COLOR, default_width, memory_snapshot
from sim.plots.style import SHARES, allocator_color, allocator_label

CAP = 1000


def steps_frame(n: int = 50, seed: int = 0) -> pd.DataFrame:
    """A steps table whose five shares sum to the capacity on every row."""
    rng = np.random.default_rng(seed)
    parts = rng.dirichlet(np.ones(5), size=n)
    slots = np.floor(parts * CAP).astype(int)
    slots[:, -1] += CAP - slots.sum(axis=1)
    frame = pd.DataFrame(slots, columns=list(SHARES))
    duration = rng.uniform(0.05, 0.5, n)
    frame.insert(0, "time_s", np.concatenate([[0.0], np.cumsum(duration)[:-1]]))
    frame.insert(1, "duration_s", duration)
    frame["running"] = rng.integers(1, 20, n)
    frame["capacity"] = CAP
    return frame


def summary(**shares: float) -> dict:
    return {"mean_running": shares.pop("running", 1.0), **{f"{k}_frac": v for k, v in shares.items()}}


SUMMARIES = {
    "paged": summary(token_states=0.9, reservation=0.02, internal_frag=0.01, external_frag=0.05, free=0.02,
                     running=28.0),
    "contiguous-max": summary(token_states=0.2, reservation=0.1, internal_frag=0.6, external_frag=0.05, free=0.05,
                              running=7.0),
}


def render(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=40)
    return buffer.getvalue()


def test_time_binned_weights_rows_by_how_long_they_hold():
    steps = pd.DataFrame({"time_s": [0.0, 1.0], "duration_s": [1.0, 3.0], "x": [0.0, 10.0]})
    assert time_binned(steps, ["x"], max_points=1)["x"].tolist() == [7.5]
    two = time_binned(steps, ["x"], max_points=2)
    assert two["time_s"].tolist() == [0.0, 2.0]
    assert two["x"].tolist() == pytest.approx([5.0, 10.0])


def test_time_binned_holds_the_last_state_through_an_idle_gap():
    steps = pd.DataFrame({"time_s": [0.0, 4.0], "duration_s": [1.0, 1.0], "x": [2.0, 0.0]})
    assert time_binned(steps, ["x"], max_points=1)["x"].tolist() == pytest.approx([8 / 5])


def test_memory_shares_sum_to_one_in_every_bin():
    shares = memory_shares_over_time(steps_frame(), max_points=7)
    assert len(shares) == 7
    assert shares[list(SHARES)].sum(axis=1).to_numpy() == pytest.approx(np.ones(7))


def test_memory_over_time_stacks_five_labelled_bands():
    fig = plot_memory_over_time(steps_frame(), title="run")
    ax = fig.axes[0]
    assert len(ax.collections) == 5
    assert ax.get_ylim() == (0, 1)
    assert [t.get_text() for t in ax.get_legend().get_texts()][0] == "Token states"
    render(fig)


def test_memory_over_time_names_missing_columns():
    with pytest.raises(ValueError, match="internal_frag"):
        plot_memory_over_time(steps_frame().drop(columns=["internal_frag"]))


def test_memory_comparison_has_one_panel_per_allocator_in_paper_order():
    fig = plot_memory_comparison({"paged": steps_frame(seed=1), "contiguous-max": steps_frame(seed=2)})
    assert [ax.get_title(loc="left") for ax in fig.axes] == [allocator_label("contiguous-max"),
                                                            allocator_label("paged")]
    render(fig)


def bar_heights(ax) -> list[list[float]]:
    return [[round(p.get_height(), 6) for p in container] for container in ax.containers]


def test_breakdown_bars_are_the_summary_shares_beside_the_reference():
    reference = {"contiguous-max": {"token_states": 0.204, "reservation": 0.133, "internal_frag": 0.573,
                                    "external_and_free": 0.089}}
    fig = plot_breakdown(SUMMARIES, reference=reference)
    heights = [h[0] for h in bar_heights(fig.axes[0])]
    # Max first (paper order): five ours, four paper; then paged's five (no reference).
    assert heights[:5] == [0.2, 0.1, 0.6, 0.05, 0.05]
    assert heights[5:9] == [0.204, 0.133, 0.573, 0.089]
    assert heights[9:] == [0.9, 0.02, 0.01, 0.05, 0.02]
    hatched = [c.patches[0].get_hatch() for c in fig.axes[0].containers]
    assert hatched.count(None) == 10 and hatched.count("///") == 4
    render(fig)


def test_breakdown_accepts_a_summaries_frame_and_rejects_duplicates():
    frame = pd.DataFrame([{"allocator": k, **v} for k, v in SUMMARIES.items()])
    assert len(plot_breakdown(frame).axes[0].containers) == 10
    with pytest.raises(ValueError, match="twice"):
        plot_breakdown(pd.concat([frame, frame]))


def test_batch_sizes_draw_mean_running_and_the_reference():
    fig = plot_batch_sizes(SUMMARIES, reference={"contiguous-max": 7.0, "paged": 30.42})
    assert bar_heights(fig.axes[0]) == [[7.0], [7.0], [28.0], [30.42]]
    render(fig)


def test_batch_over_time_draws_one_line_per_run():
    fig = plot_batch_over_time({"paged": steps_frame(seed=1), "contiguous-oracle": steps_frame(seed=2)})
    assert [line.get_label() for line in fig.axes[0].lines] == [allocator_label("contiguous-oracle"),
                                                               allocator_label("paged")]


def test_batch_over_time_gives_runs_not_named_by_allocator_distinct_colours():
    runs = {name: steps_frame(seed=i) for i, name in enumerate(["TP=8", "DP=8 + EP", "TP=8, DCP=8"])}
    colors = [line.get_color() for line in plot_batch_over_time(runs).axes[0].lines]
    assert len(set(colors)) == 3
    assert plot_batch_over_time({"paged": steps_frame()}).axes[0].lines[0].get_color() == allocator_color("paged")


def test_latency_vs_rate_marks_sustained_rates_on_the_bound():
    curves = pd.DataFrame({"allocator": ["paged"] * 3 + ["contiguous-oracle"] * 3,
                           "rate": [0.5, 1.0, 1.5] * 2,
                           "normalized_latency_s_per_tok": [0.05, 0.06, 0.3, 0.05, 0.4, 2.0]})
    fig = plot_latency_vs_rate(curves, bound=0.2, sustained={"paged": 1.3, "contiguous-oracle": 0.7})
    ax = fig.axes[0]
    markers = [line for line in ax.lines if line.get_marker() == "v"]
    assert sorted(float(m.get_xdata()[0]) for m in markers) == [0.7, 1.3]
    assert all(float(m.get_ydata()[0]) == 0.2 for m in markers)
    assert ax.get_ylim() == (0, pytest.approx(0.6))
    render(fig)


def test_latency_cdf_leaves_out_rejected_and_missing_values():
    requests = pd.DataFrame({"ttft_s": [0.1, 0.2, 0.3, np.nan], "tpot_s": [0.01, 0.02, np.nan, np.nan],
                             "rejected": [False, False, True, True]})
    fig = plot_latency_cdf({"paged": requests})
    ttft, tpot = fig.axes
    assert ttft.lines[0].get_label().endswith("(n=2)")
    assert list(ttft.lines[0].get_ydata()) == [0.5, 1.0]
    assert tpot.lines[0].get_label().endswith("(n=2)")
    render(fig)


def test_latency_cdf_of_runs_with_every_request_rejected_draws_empty_axes_quietly():
    requests = pd.DataFrame({"ttft_s": [np.nan], "tpot_s": [np.nan], "rejected": [True]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # was matplotlib's "No artists with labels found to put in legend"
        fig = plot_latency_cdf({"paged": requests})
    assert all(not ax.lines and ax.get_legend() is None for ax in fig.axes)
    assert [[t.get_text() for t in ax.texts] for ax in fig.axes] == [["no completed request"]] * 2
    render(fig)


def test_block_size_sweep_derives_waste_and_uses_a_log2_axis():
    results = pd.DataFrame({"workload": ["a", "a", "b", "b"], "block_size": [16, 64, 16, 64],
                            "internal_frag_frac": [0.01, 0.04, 0.02, 0.2], "external_frag_frac": [0.01] * 4,
                            "throughput_tok_s": [100.0, 90.0, 50.0, 30.0]})
    fig = plot_block_size_sweep(results)
    waste, throughput = fig.axes
    assert waste.get_xscale() == "log"
    assert list(waste.lines[1].get_ydata()) == pytest.approx([0.03, 0.21])
    assert list(throughput.lines[0].get_ydata()) == [100.0, 90.0]
    render(fig)


def memory_frame() -> pd.DataFrame:
    owners_early = np.array([-2] * 16 + [5] * 100 + [-1] * 140)
    owners_late = np.array([-2] * 16 + [7] * 200 + [-1] * 40)
    return pd.concat([pd.DataFrame({"time_s": t, "slot": np.arange(256), "owner": o})
                      for t, o in [(1.0, owners_early), (9.0, owners_late)]], ignore_index=True)


def test_memory_snapshot_picks_the_nearest_instant():
    assert memory_snapshot(memory_frame(), 8.0).time_s == 9.0
    assert memory_snapshot(memory_frame(), 2.0).owners[16] == 5


def test_memory_map_colours_free_and_overhead_slots():
    fig = plot_memory_map(memory_frame(), time_s=1.0, width=16)
    image = fig.axes[0].images[0].get_array()
    assert image.shape == (16, 16, 3)
    assert tuple(image[0, 0]) == pytest.approx(to_rgb(OVERHEAD_COLOR))
    assert tuple(image[15, 15]) == pytest.approx(to_rgb(FREE_COLOR))
    owner_color = tuple(image[1, 0])
    assert owner_color not in (to_rgb(FREE_COLOR), to_rgb(OVERHEAD_COLOR))
    assert "1 sequences" in fig.axes[0].get_title(loc="left")
    render(fig)


def test_memory_maps_stack_runs_and_reject_gaps():
    fig = plot_memory_maps({"paged": memory_frame(), "contiguous-max": memory_frame()}, time_s=9.0)
    assert len(fig.axes) == 2
    with pytest.raises(ValueError, match="does not cover"):
        plot_memory_map(memory_frame().iloc[1:], time_s=1.0)


def test_default_width_keeps_blocks_within_rows():
    assert default_width(15_728) == 256
    assert default_width(100) == 16


def test_sharing_savings_has_one_panel_per_mode_and_one_bar_per_workload():
    from sim.plots import plot_sharing_savings

    results = pd.DataFrame({"mode": ["parallel sampling"] * 2 + ["beam search"] * 2, "width": [2, 4, 2, 4],
                            "workload": ["a"] * 4, "shared_saved_frac": [0.1, 0.2, 0.3, 0.5]})
    fig = plot_sharing_savings(results)
    assert [ax.get_title() for ax in fig.axes] == ["parallel sampling", "beam search"]
    assert bar_heights(fig.axes[1]) == [[0.3, 0.5]]
    assert fig.axes[1].get_xlabel() == "beam width"
    render(fig)


def test_lines_over_time_draw_the_last_bin_to_the_runs_end():
    """A post-step line through the bins' starts stopped where the last bin began: five rows of a 32-s run drew
    nothing of its last 6.4 s. The memory stack and the batch line now reach the last row's end."""
    steps = steps_frame(n=5)
    end = float(steps["time_s"].iloc[-1] + steps["duration_s"].iloc[-1])
    line = plot_batch_over_time({"paged": steps}).axes[0].lines[0]
    assert line.get_xdata()[-1] == pytest.approx(end) and line.get_ydata()[-1] == line.get_ydata()[-2]
    ax = plot_memory_over_time(steps).axes[0]
    assert ax.get_xlim()[1] == pytest.approx(end)
    assert max(path.vertices[:, 0].max() for c in ax.collections for path in c.get_paths()) == pytest.approx(end)
