"""The calibration figure (`gpu_validation.plots`) of the H200 run: a figure of its own, not pyplot's, and a KV
axis whose four decades read as 1k ... 1M rather than run-together plain numbers."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from gpu_validation.fit import load_calibration
from gpu_validation.plots import coefficients_frame, plot_calibration

TABLE = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "h200-2026-12-04" / "cuda-graph" / "llama-3-8b-full.json"


def test_calibration_figure_of_the_h200_run():
    table, measurements = load_calibration(TABLE)
    before = plt.get_fignums()
    fig = plot_calibration(measurements, table)
    assert isinstance(fig, Figure) and plt.get_fignums() == before and len(fig.axes) == 2
    fig.canvas.draw()
    kv_labels = [t.get_text() for t in fig.axes[1].get_xticklabels() if t.get_visible() and t.get_text()]
    assert {"1k", "10k", "100k", "1M"} <= set(kv_labels)
    frame = coefficients_frame(table).set_index("coefficient")["value"]
    assert frame["fit points"] == 114 and frame["flops_frac"] == table["coefficients"]["flops_frac"]
