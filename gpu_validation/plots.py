"""Plots of a calibration: measured against modelled step time, and the fitted coefficients as a table.

Plot functions take data (a harness table and a calibration table) and return a Figure; no file I/O, no
torch. The modelled times are recomputed from the table's coefficients and peaks (`fit.Coefficients`), so
the figure shows what the simulator would predict for each timed step, not what the fit stored.
"""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter, FormatStrFormatter, LogLocator, NullFormatter

from gpu_validation.fit import coefficients_from_table

_MARKERS = {8: "o", 16: "s", 32: "^", 64: "D", 128: "v"}
_COLORS = {"decode": "tab:blue", "prefill": "tab:orange"}


def _peaks(table: dict) -> tuple[float, float]:
    if "peaks" in table:
        return float(table["peaks"]["flops_s"]), float(table["peaks"]["bandwidth_bytes_s"])
    from allocators.catalog import get_gpu  # tables written elsewhere may rely on the catalog

    gpu = get_gpu(table["gpu"])
    return gpu.bf16_tflops * 1e12, gpu.hbm_bandwidth_gb_s * 1e9


def modelled_step_s(measurements: pd.DataFrame, table: dict) -> np.ndarray:
    """The step time the table's coefficients give each timed step."""
    return coefficients_from_table(table).predict(measurements, *_peaks(table))


def coefficients_frame(table: dict) -> pd.DataFrame:
    """The fitted coefficients and fit quality as a two-column table for display."""
    c, f = table["coefficients"], table["fit"]
    rows = [("bandwidth_frac", c["bandwidth_frac"]), ("flops_frac", c["flops_frac"]),
            ("step_overhead_s", c["step_overhead_s"])]
    rows += [(f"paged_kernel_overhead[{bs}]", v) for bs, v in c["paged_kernel_overhead"].items()]
    rows += [("fit points", f["points"]), ("fit rmse_s", f["rmse_s"]), ("fit mape", f["mape"])]
    return pd.DataFrame(rows, columns=["coefficient", "value"])


def plot_calibration(measurements: pd.DataFrame, table: dict) -> Figure:
    """Left: modelled vs measured step time for every timed step (log-log, the diagonal is a perfect fit).
    Right: decode step time against KV tokens read, measured (markers) and modelled (lines), by block size."""
    modelled = modelled_step_s(measurements, table) * 1e3
    measured = measurements["step_s"].to_numpy() * 1e3
    fig = Figure(figsize=(12, 5), layout="constrained")  # not pyplot's: nothing piles up in its figure list
    ax, ax2 = fig.subplots(1, 2)
    for (kind, bs), idx in measurements.groupby(["kind", "block_size"]).groups.items():
        rows = measurements.index.get_indexer(idx)
        ax.scatter(measured[rows], modelled[rows], color=_COLORS.get(kind, "gray"), marker=_MARKERS.get(bs, "x"),
                   label=f"{kind}, block {bs}", alpha=0.8)
    lo, hi = min(measured.min(), modelled.min()) * 0.8, max(measured.max(), modelled.max()) * 1.25
    ax.plot([lo, hi], [lo, hi], color="black", lw=1, ls="--", label="modelled = measured")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured step time (ms)",
           ylabel="modelled step time (ms)",
           title=f"{table['model']} on {table['gpu']} ({table['device']}, {table['dtype']}): "
                 f"MAPE {table['fit']['mape']:.1%}")
    ax.legend(fontsize=8, loc="upper left")

    decode = measurements[measurements["kind"] == "decode"]
    batches = sorted(decode["batch_size"].unique())
    sizes = sorted(decode["block_size"].unique())
    styles = ["-", "--", ":", "-."]
    def batch_color(i: int):
        return matplotlib.colormaps["viridis"](i / max(1, len(batches) - 1) * 0.85)

    for i, batch in enumerate(batches):
        color = batch_color(i)
        for j, bs in enumerate(sizes):
            g = decode[(decode["batch_size"] == batch) & (decode["block_size"] == bs)]
            g = g.sort_values("context_tokens")
            rows = measurements.index.get_indexer(g.index)
            x = g["context_tokens"].to_numpy()
            ax2.plot(x, modelled[rows], color=color, lw=1, ls=styles[j % len(styles)])
            ax2.scatter(x, measured[rows], color=color, marker=_MARKERS.get(int(bs), "x"), s=25)
    handles = [Line2D([], [], color=batch_color(i), lw=2, label=f"batch {b}") for i, b in enumerate(batches)]
    handles += [Line2D([], [], color="0.3", marker=_MARKERS.get(int(bs), "x"), ls=styles[j % len(styles)],
                           label=f"block {bs}") for j, bs in enumerate(sizes)]
    ax2.legend(handles=handles, fontsize=8, loc="upper left")
    ax2.set(xscale="log", yscale="log", xlabel="KV tokens read per step (batch x context length)",
            ylabel="decode step time (ms)")
    c = table["coefficients"]
    paged = ", ".join(f"{k}: {v:.3g}" for k, v in c["paged_kernel_overhead"].items())
    ax2.set_title(f"decode steps: measured (markers), modelled (lines)\nfit: bandwidth_frac "
                  f"{c['bandwidth_frac']:.3g}, flops_frac {c['flops_frac']:.3g}, overhead "
                  f"{c['step_overhead_s'] * 1e3:.3g} ms\npaged kernel overhead by block size: {paged}",
                  fontsize=10)
    for axis in (ax.xaxis, ax.yaxis, ax2.yaxis):  # step times: 1-2-5 ticks in plain numbers
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FormatStrFormatter("%g"))
        axis.set_minor_formatter(NullFormatter())
    # KV tokens span four decades on a GPU grid: 1-3 ticks with SI prefixes (1k, 3k, ... 1M) stay apart
    ax2.xaxis.set_major_locator(LogLocator(subs=(1.0, 3.0)))
    ax2.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax2.xaxis.set_minor_formatter(NullFormatter())
    if table["device"] == "cpu":
        fig.suptitle("CPU calibration (a pipeline check, not GPU numbers)", fontsize=10, color="tab:red")
    return fig
