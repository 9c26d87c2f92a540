"""The memory map shows the paper's Fig. 3 view: every slot coloured by its state (token, reserved, internal
fragmentation, overhead, free) with each request's slots outlined, at the instant asked for and saying so;
single-run breakdowns keep their title; sweep plots label axes with units and name what they average."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from matplotlib.colors import to_rgb

from allocators import ALLOCATORS, make_allocator
from allocators.base import SLOT_STATES, waiting_states
from sim.cli import main
from sim.plots import plot_breakdown
from sim.plots.memory_map import STATE_COLORS, plot_memory_map
from sim.plots.sweep import plot_sweep


@pytest.mark.parametrize("waiting", [False, True])
@pytest.mark.parametrize("name", sorted(ALLOCATORS))
def test_slot_states_add_up_to_the_breakdown(name, waiting):
    """The map's states are the accounting's shares, slot for slot: with a request waiting that memory cannot
    take, the free slots are external fragmentation in both (`waiting_states`), free in neither."""
    rng = np.random.default_rng(0)
    alloc = make_allocator(name, 4000, block_size=16, max_model_len=400)
    for seq in range(12):
        prompt = int(rng.integers(1, 150))
        if alloc.admit(seq, prompt, final_tokens=prompt + int(rng.integers(1, 200))) is not None:
            alloc.grow(seq, int(rng.integers(0, 3)))
    states = alloc.slot_states()
    states = waiting_states(states) if waiting else states
    counts = dict(zip(SLOT_STATES, np.bincount(states, minlength=len(SLOT_STATES)), strict=True))
    b = alloc.breakdown(waiting)
    external = counts["overhead"] + counts["external_frag"]
    assert (counts["token"], counts["reserved"], counts["internal_frag"], external, counts["free"]) == (
        b.token_states, b.reservation, b.internal_frag, b.external_frag, b.free)
    assert (counts["free"] if waiting else counts["external_frag"]) == 0 < b.free + b.external_frag


@pytest.mark.parametrize("name", ["contiguous-max", "paged"])
def test_pending_decode_tokens_fill_reserved_slots(name):
    """The simulator tells the allocator about decoded tokens lazily; the map must still show them as tokens
    (a Max map once showed mostly "reserved" slabs whose tokens had been decoded long before)."""
    alloc = make_allocator(name, 4000, block_size=16, max_model_len=400)
    alloc.admit(1, 20, final_tokens=60)
    before = np.bincount(alloc.slot_states(), minlength=len(SLOT_STATES))
    after = np.bincount(alloc.slot_states({1: 5}), minlength=len(SLOT_STATES))
    assert after[0] - before[0] == 5 and before[1] - after[1] == 5


def run_dir(tmp_path, allocator: str):
    out = tmp_path / allocator
    result = CliRunner().invoke(main, ["run", "--allocator", allocator, "--num-requests", "60", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_contiguous_max_internal_fragmentation_is_visible(tmp_path):
    """The old map coloured whole slabs by owner, so Max's internal fragmentation, the paper's point, was
    invisible. Now the slots a request will never fill are orange, and each request is outlined."""
    memory = pd.read_parquet(run_dir(tmp_path, "contiguous-max") / "memory.parquet")
    assert set(memory["state"].astype(str)) >= {"token", "reserved", "internal_frag", "free"}
    fig = plot_memory_map(memory)
    ax = fig.axes[0]
    pixels = ax.images[0].get_array().reshape(-1, 3)
    orange = np.all(np.isclose(pixels, to_rgb(STATE_COLORS["internal_frag"])), axis=1)
    assert orange.mean() > 0.1
    assert len(ax.collections[0].get_segments()) > 0  # request outlines
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"token states", "internal fragmentation", "allocator overhead", "free"} <= set(labels)


def test_a_map_taken_while_a_request_waits_shows_external_fragmentation(tmp_path):
    """A queued Pow2 run: the free slots of a map taken while a request waits are drawn in the breakdown's
    external-fragmentation colour, named in the legend and the caption, as its stacked bar counts them."""
    out = tmp_path / "pow2"
    result = CliRunner().invoke(main, ["run", "--allocator", "contiguous-pow2", "--num-requests", "60", "--rate",
                                       "20", "--kv-tokens", "6000", "--out", str(out)])
    assert result.exit_code == 0, result.output
    memory = pd.read_parquet(out / "memory.parquet")
    waiting = memory[memory["state"] == "external_frag"]["time_s"]
    assert len(waiting)
    t = float(waiting.iloc[0])
    fig = plot_memory_map(memory, time_s=t)
    ax = fig.axes[0]
    pixels = ax.images[0].get_array().reshape(-1, 3)[:6000]
    red = np.all(np.isclose(pixels, to_rgb(STATE_COLORS["external_frag"])), axis=1)
    assert red.sum() == (memory[memory["time_s"] == t]["state"] == "external_frag").sum() > 0
    assert "external frag. (free, a request waits)" in [x.get_text() for x in ax.get_legend().get_texts()]
    assert "external frag. " in ax.get_title(loc="left")


def test_plot_time_says_which_snapshot_it_shows(tmp_path):
    """`kvsim plot RUN --kind memory-map --time T` silently snapped to one of three snapshots."""
    run = run_dir(tmp_path, "paged")
    memory = pd.read_parquet(run / "memory.parquet")
    times = np.sort(memory["time_s"].unique())
    assert len(times) == 12
    title = plot_memory_map(memory, time_s=7.0).axes[0].get_title(loc="left")
    nearest = times[np.argmin(np.abs(times - 7.0))]
    assert f"t = {nearest:.2f} s, the nearest of 12 snapshots" in title and "to the 7 s asked for" in title
    exact = plot_memory_map(memory, time_s=float(times[3])).axes[0].get_title(loc="left")
    assert exact.startswith(f"t = {times[3]:.2f} s\n")
    result = CliRunner().invoke(main, ["plot", str(run), "--kind", "memory-map", "--time", "7"])
    assert result.exit_code == 0 and (run / "memory-map.png").stat().st_size > 0


def test_single_run_breakdown_title_fits_the_figure():
    fig = plot_breakdown({"paged": {f"{s}_frac": v for s, v in zip(
        ("token_states", "reservation", "internal_frag", "external_frag", "free"), (0.35, 0.01, 0, 0, 0.64),
        strict=True)}})
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    title = fig.axes[0].title.get_window_extent(renderer)
    assert title.x0 >= 0 and title.x1 <= fig.bbox.x1


def test_sweep_axes_have_units_and_the_averaged_axes_are_named():
    rows = [{"status": "ok", "allocator": a, "rate": r, "seed": s, "block_size": b,
             "ttft_p50_s": r + s + b / 100} for a in ("paged", "contiguous-max") for r in (1.0, 2.0)
            for s in (0, 1, 2) for b in (8, 16)]
    ax = plot_sweep(pd.DataFrame(rows), metric="ttft_p50_s").axes[0]
    assert ax.get_xlabel() == "arrival rate (req/s)"
    assert ax.get_ylabel() == "time to first token, median (s)"
    assert ax.get_title() == "mean over block_size (2 values), seed (3 values); band: min-max"
