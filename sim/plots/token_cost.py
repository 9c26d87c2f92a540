"""What a token costs: KV bytes per token by model and KV dtype, stacked by layer group, beside how many
requests of one length fit per GPU (``sim.token_cost`` builds both tables from the catalog)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sim.plots.data import require_columns, require_frame
from sim.plots.style import SERIES_COLORS, new_figure

ATTENTION_COLORS = {"full": "#4c72b0", "sliding_window": "#55a868", "chunked_local": "#8172b3", "mla": "#c44e52"}
ATTENTION_LABELS = {"full": "full attention", "sliding_window": "sliding window", "chunked_local": "chunked-local",
                    "mla": "MLA latent + rope"}
DTYPE_HATCH = {0: "", 1: "//", 2: "..", 3: "xx"}


def plot_token_cost(costs: pd.DataFrame, requests: pd.DataFrame) -> Figure:
    """Left: KiB per token (every layer, a token inside every window) for each model, one bar per KV dtype
    (hatched by dtype), stacked by attention type. Right: requests of ``request_tokens`` that fit per GPU with
    sliding windows freed, with a tick where they would if every layer kept every token."""
    require_frame(costs, "plot_token_cost", "costs", "token costs (sim.token_cost.token_cost_table())")
    require_frame(requests, "plot_token_cost", "requests", "requests per GPU "
                  "(sim.token_cost.requests_per_gpu_table())")
    require_columns(costs, ["model", "kv_cache_dtype", "attention", "bytes_per_token"], "token costs")
    require_columns(requests, ["model", "kv_cache_dtype", "requests_per_gpu", "requests_all_full",
                               "tensor_parallel", "request_tokens", "gpu"], "requests per GPU")
    models = list(dict.fromkeys(costs["model"]))
    dtypes = list(dict.fromkeys(costs["kv_cache_dtype"]))
    width = 0.8 / len(dtypes)
    fig = new_figure((11.0, 3.8))
    left, right = fig.subplots(1, 2)
    shown = set()
    for j, dtype in enumerate(dtypes):
        x = np.arange(len(models)) + (j - (len(dtypes) - 1) / 2) * width
        bottom = np.zeros(len(models))
        for attention, color in ATTENTION_COLORS.items():
            rows = costs[(costs["kv_cache_dtype"] == dtype) & (costs["attention"] == attention)]
            kib = rows.groupby("model")["bytes_per_token"].sum().reindex(models, fill_value=0).to_numpy() / 1024
            if not kib.any():
                continue
            label = ATTENTION_LABELS[attention] if attention not in shown else None
            shown.add(attention)
            left.bar(x, kib, width, bottom=bottom, color=color, hatch=DTYPE_HATCH[j % 4], edgecolor="white",
                     label=label)
            bottom += kib
        for xi, total in zip(x, bottom, strict=True):
            left.text(xi, total, f"{total:.0f}", ha="center", va="bottom", fontsize="x-small")
        sub = requests[requests["kv_cache_dtype"] == dtype].set_index("model").reindex(models)
        right.bar(x, sub["requests_per_gpu"], width, color=SERIES_COLORS[j % len(SERIES_COLORS)],
                  hatch=DTYPE_HATCH[j % 4], edgecolor="white", label=f"KV in {dtype}")
        right.plot(x, sub["requests_all_full"] / sub["tensor_parallel"], "k_", markersize=14,
                   label="every layer full" if j == 0 else None)
    ticks = [m if requests.set_index("model").loc[m, "tensor_parallel"].max() == 1 else
             f"{m}\n(per GPU of {requests.set_index('model').loc[m, 'tensor_parallel'].max()})" for m in models]
    left.set_xticks(np.arange(len(models)), models, fontsize="small")
    right.set_xticks(np.arange(len(models)), ticks, fontsize="small")
    left.set_ylim(top=left.get_ylim()[1] * 1.1)
    right.set_yscale("log")
    left.set_ylabel("KV KiB per token (all layers)")
    order = ", ".join(f"{d}{' hatched' if DTYPE_HATCH[j % 4] else ''}" for j, d in enumerate(dtypes))
    left.set_title(f"What a token costs ({order})", fontsize="medium")
    left.legend(fontsize="small", frameon=False)
    first = requests.iloc[0]
    right.set_ylabel(f"requests of {first['request_tokens']} tokens per GPU")
    right.set_title(f"What fits on one {first['gpu']}", fontsize="medium")
    right.legend(fontsize="small", frameon=False)
    return fig
