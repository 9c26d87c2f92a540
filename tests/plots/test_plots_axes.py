"""Second user pass: plot functions driven from a notebook on real sweep results.

Two things a researcher hit: a waste panel whose values are all under 2% showed the tick labels
"0%, 0%, 1%, 1%, 1%, 2%" (whole percents only), and a latency-vs-rate plot of a sweep whose points have no
``rate`` (a trace replayed at its own timestamps) came back as an empty figure with no word of why.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from sim.plots import plot_block_size_sweep, plot_latency_vs_rate  # noqa: E402


def _tick_labels(fig, panel: int = 0) -> list[str]:
    ax = fig.axes[panel]
    return [label.get_text() for label in ax.get_yticklabels() if label.get_text()]


def test_small_percent_panel_has_distinct_tick_labels():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    rows = pd.DataFrame({"block_size": [8, 16, 32, 64], "waste_frac": [0.001, 0.004, 0.009, 0.017],
                         "throughput_tok_s": [400.0, 410.0, 405.0, 390.0], "workload": ["w"] * 4})
    fig = plot_block_size_sweep(rows)
    FigureCanvasAgg(fig).draw()
    labels = _tick_labels(fig)
    assert len(labels) >= 3
    assert len(set(labels)) == len(labels), f"repeated percent tick labels: {labels}"


def test_latency_vs_rate_without_rate_values_is_a_clear_error():
    curves = pd.DataFrame({"allocator": ["paged", "paged"], "rate": [None, None],
                           "normalized_latency_s_per_tok": [0.03, 0.04]})
    with pytest.raises(ValueError, match="rate"):
        plot_latency_vs_rate(curves)
