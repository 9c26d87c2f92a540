"""Prefix reuse: how much prefill each run's cache saved, from which memory tier, when, and what it did to TTFT.

Three panels over several runs (say ``paged``, ``radix``, each with and without a host tier, and a run without
prefix caching as the baseline):

- hit rate by tier over time: prompt tokens found cached in GPU memory (and, with a host tier, loaded back from
  host memory) over all prompt tokens admitted in each time bin, from the steps table's per-step
  ``gpu_hit_tokens``/``host_hit_tokens`` columns; a steps table without them (an older run) falls back to the
  requests table's ``cached_tokens`` at admission, as the GPU tier;
- prefill tokens saved: the summary's hit tokens by tier beside the prefill tokens computed;
- TTFT: the distribution over served requests, where reuse shows as a shift to the left.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sim.plots.data import is_result, require_columns, require_count, summaries_by_run, tables_by_run
from sim.plots.latency import values_for
from sim.plots.style import allocator_label, count_axis, new_figure, percent_axis, run_colors, wrap_label

TIERS = ("gpu", "host")
TIER_STYLES = {"gpu": "-", "host": "--"}
TIER_LABELS = {"gpu": "GPU", "host": "host"}


def hit_rate_over_time(steps: pd.DataFrame, requests: pd.DataFrame | None = None, *,
                       bins: int = 40) -> pd.DataFrame:
    """Hit rate by tier in ``bins`` equal bins of simulated time: a tidy frame with ``time_s`` (bin start),
    ``tier`` and ``hit_rate`` (tier hits over hits plus prefill tokens computed in the bin). Bins without prompt
    work are left out."""
    require_columns(steps, ["time_s", "prefill_tokens"], "steps table")
    if "gpu_hit_tokens" in steps.columns:
        times = steps["time_s"].to_numpy(float)
        tiers = {t: steps[f"{t}_hit_tokens"].to_numpy(float) for t in TIERS if f"{t}_hit_tokens" in steps}
        computed = steps["prefill_tokens"].to_numpy(float)
    else:
        if requests is None:
            raise ValueError("steps table lacks gpu_hit_tokens (an older run): pass its requests table too")
        require_columns(requests, ["admitted_s", "cached_tokens", "prompt_tokens"], "requests table")
        admitted = requests[requests["admitted_s"].notna()]
        times = admitted["admitted_s"].to_numpy(float)
        tiers = {"gpu": admitted["cached_tokens"].to_numpy(float)}
        computed = admitted["prompt_tokens"].to_numpy(float) - tiers["gpu"]
    if len(times) == 0:
        return pd.DataFrame({"time_s": [], "tier": [], "hit_rate": []})
    bins = require_count("hit_rate_over_time", "bins", bins)
    edges = np.linspace(times.min(), times.max() + 1e-9, bins + 1)
    which = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, bins - 1)
    total = np.bincount(which, computed, bins) + sum(np.bincount(which, v, bins) for v in tiers.values())
    busy = total > 0
    frames = [pd.DataFrame({"time_s": edges[:-1][busy], "tier": tier,
                            "hit_rate": np.bincount(which, hits, bins)[busy] / total[busy]})
              for tier, hits in tiers.items()]
    return pd.concat(frames, ignore_index=True)


def prefill_saved(summaries: Mapping[str, Mapping]) -> pd.DataFrame:
    """Per run: prompt tokens served from each tier and computed, from the summaries (tidy: ``run``,
    ``gpu_hit_tokens``, ``host_hit_tokens``, ``prefill_tokens``, ``saved_frac``). A summary without the tier
    split counts all its cached prompt tokens as GPU hits."""
    rows = []
    for name, s in summaries.items():
        gpu = s.get("gpu_hit_tokens", s.get("cached_prompt_tokens", 0))
        host = s.get("host_hit_tokens", 0)
        computed = s.get("prefill_tokens", 0)
        total = gpu + host + computed
        rows.append({"run": name, "gpu_hit_tokens": gpu, "host_hit_tokens": host, "prefill_tokens": computed,
                     "saved_frac": (gpu + host) / total if total else 0.0})
    return pd.DataFrame(rows)


def plot_reuse(steps: Mapping[str, pd.DataFrame], requests: Mapping[str, pd.DataFrame] | None = None,
               summaries: Mapping[str, Mapping] | None = None, *, bins: int = 40,
               title: str | None = "Prefix reuse") -> Figure:
    """The three reuse panels (module docstring) for runs keyed by name (allocator or run directory); the
    three mappings hold the same names, of tables or `SimResult` objects. Given the runs' `SimResult` objects
    (what `sim.reproduce.reuse.run_setups` returns) as ``steps``, ``requests`` and ``summaries`` may be left
    out: each result holds all three."""
    results = is_result(steps) or (isinstance(steps, Mapping) and bool(steps)
                                   and all(is_result(v) for v in steps.values()))
    if (requests is None or summaries is None) and not results:
        raise ValueError("plot_reuse: pass `requests` and `summaries` with the steps tables, or pass the runs' "
                         "SimResults (the dict run_setups returns) alone")
    requests = tables_by_run(steps if requests is None else requests, "requests", "plot_reuse", "requests")
    summaries = summaries_by_run(steps if summaries is None else summaries, "plot_reuse")
    steps = tables_by_run(steps, "steps", "plot_reuse", "steps")
    names = list(summaries)
    if not names:
        raise ValueError("no runs to plot")
    if set(steps) != set(names) or set(requests) != set(names):
        raise ValueError(f"steps, requests and summaries must name the same runs, got {sorted(steps)}, "
                         f"{sorted(requests)} and {sorted(names)}")
    colors = run_colors(names)
    fig = new_figure((13.5, 3.8))
    over_time, saved_ax, ttft_ax = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.4, 1, 1]})
    for name in names:
        rates = hit_rate_over_time(steps[name], requests[name], bins=bins)
        for tier in TIERS:
            line = rates[rates["tier"] == tier]
            if tier == "host" and not (line["hit_rate"] > 0).any():
                continue  # no host tier (or it never hit): the GPU line says it all
            over_time.plot(line["time_s"], line["hit_rate"], TIER_STYLES[tier], color=colors[name],
                           label=f"{allocator_label(name)}, {TIER_LABELS[tier]}")
    over_time.set_xlabel("time (s)")
    over_time.set_ylabel("prefix hit rate (of prompt tokens)")
    over_time.set_ylim(0, 1)
    percent_axis(over_time)
    over_time.legend(fontsize="x-small", frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2),
                     ncol=2)  # below the panel: a line per run and tier would cover the curves
    over_time.set_title("hit rate by tier over time", fontsize="medium")

    saved = prefill_saved(summaries)
    y = np.arange(len(saved))
    left = np.zeros(len(saved))
    for column, label, color in (("gpu_hit_tokens", "hit in GPU memory", "#4c72b0"),
                                 ("host_hit_tokens", "loaded from host memory", "#64b5cd"),
                                 ("prefill_tokens", "computed (prefill)", "#c8c8c8")):
        values = saved[column].to_numpy(float)
        if column == "host_hit_tokens" and not values.any():
            continue
        saved_ax.barh(y, values, left=left, color=color, label=label)
        left += values
    for yi, (total, frac) in enumerate(zip(left, saved["saved_frac"], strict=True)):
        saved_ax.text(total, yi, f" {frac:.0%} hit", va="center", fontsize="x-small")  # of its own prompt tokens
    labels = [wrap_label(allocator_label(n)) for n in saved["run"]]
    saved_ax.set_yticks(y, labels, fontsize="x-small" if any("\n" in label for label in labels) else "small")
    saved_ax.invert_yaxis()
    saved_ax.set_xlabel("prompt tokens")
    count_axis(saved_ax)
    saved_ax.margins(x=0.25)
    saved_ax.legend(fontsize="x-small", frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    saved_ax.set_title("prefill tokens saved", fontsize="medium")

    for name in names:
        ttft = np.sort(values_for(requests[name], "ttft_s", name))
        if len(ttft):
            ttft_ax.step(ttft, np.arange(1, len(ttft) + 1) / len(ttft), where="post",
                         color=colors[name], label=allocator_label(name))
    ttft_ax.set_xscale("log")
    ttft_ax.set_xlabel("time to first token (s)")
    ttft_ax.set_ylabel("share of requests")
    ttft_ax.legend(fontsize="x-small", frameon=False, loc="upper center",
                   bbox_to_anchor=(0.5, -0.2))  # below, as the others: eight runs' entries covered the curves
    ttft_ax.set_title("TTFT with and without reuse", fontsize="medium")
    if title:
        fig.suptitle(title)
    return fig
