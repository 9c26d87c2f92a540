"""Regressions found by looking at kvsim's figures as a user would."""

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
from matplotlib.colors import to_rgb

from allocators.base import SHARED_OWNER
from sim.plots.memory_map import SHARED_COLOR, plot_memory_map, slot_colors


def test_memory_map_shows_shared_blocks_as_shared():
    # `kvsim plot RUN --kind memory-map` of a beam-search run on paged-cow painted the copy-on-write shared
    # blocks (owner -3) in an ordinary sequence hue: the same khaki as the legend's "one colour per sequence"
    # swatch, so 80% of the arena looked like one giant sequence, and the caption ignored them.
    owners = np.array([-2] * 16 + [SHARED_OWNER] * 128 + [5] * 64 + [-1] * 48)
    memory = pd.DataFrame({"time_s": 1.0, "slot": np.arange(len(owners)), "owner": owners})
    colors = slot_colors(owners, np.where(owners >= -1, 0, 3).astype(np.int8))
    assert tuple(colors[16]) == to_rgb(SHARED_COLOR)
    assert tuple(colors[16]) != tuple(colors[16 + 128])
    fig = plot_memory_map(memory, width=16)
    ax = fig.axes[0]
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert any("shared" in label for label in labels)
    assert "50% shared" in ax.get_title(loc="left")


def test_default_sweep_plot_draws_one_line_per_allocator_not_their_mean():
    # `kvsim sweep --allocator paged,contiguous-max --rate 1,2 --seed 0,1 ...` then `kvsim plot sweep.parquet`
    # drew ONE line: the mean of paged and contiguous-max (0.03 and 25 s/token) with a band spanning both.
    from sim.plots.sweep import plot_sweep

    rows = [{"status": "ok", "allocator": a, "rate": r, "seed": s, "block_size": 16,
             "normalized_latency_s_per_tok": (0.03 if a == "paged" else 25.0) * r + s * 0.001}
            for a in ("paged", "contiguous-max") for r in (1.0, 2.0) for s in (0, 1)]
    fig = plot_sweep(pd.DataFrame(rows))
    ax = fig.axes[0]
    lines = [line for line in ax.get_lines() if line.get_label() and not line.get_label().startswith("_")]
    assert len(lines) == 2
    assert ax.get_xlabel() == "arrival rate (req/s)"
    assert {round(float(y), 2) for line in lines for y in line.get_ydata()} == {0.03, 0.06, 25.0, 50.0}


def test_older_rows_of_the_same_configuration_are_left_out_and_said_so():
    """A store keeps the rows of a point re-run after its trace changed beside the old ones (new id, same
    configuration): the newest (listed first) is drawn, not their mean, and the title says how many were left."""
    df = pd.DataFrame({"point_id": list("abcd"), "status": "ok", "allocator": "paged", "rate": [1.0, 2.0, 1.0, 2.0],
                       "normalized_latency_s_per_tok": [0.1, 0.2, 5.0, 6.0]})
    from sim.plots.sweep import plot_sweep

    fig = plot_sweep(df, x="rate")
    ax = fig.axes[0]
    assert list(ax.lines[0].get_ydata()) == [0.1, 0.2]
    assert "2 older row(s) of the same configurations left out" in ax.get_title()
