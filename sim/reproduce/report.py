"""Presenting a `Reproduction`: the table of ours against the paper's, its figures, and the files in ``--out``.

Files: ``results.json`` (every number, the checks and how they were run), ``checks.csv``, one CSV per tidy table
(``fig2.csv``, ``latency_curves.csv``, ``latency_curves_sizes.csv``, ``block_sizes.csv``, ``preemption.csv``, ``sharing.csv``) and one
PNG per figure.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from sim.reproduce import paper
from sim.reproduce.checks import Check, checks_frame
from sim.reproduce.run import Reproduction


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return "n/a"
    if unit == "share":
        return f"{value:.1%}"
    if unit == "fine_share":
        return f"{value:.2%}"
    if unit == "slots":
        return f"{int(value):,}"
    if unit in ("tokens", "int"):
        return f"{int(value)}"
    if unit == "ratio":
        return f"{value:.2f}x"
    if unit == "flag":
        return "holds" if value else "broken"
    return f"{value:.2f}"


def format_paper(check: Check) -> str:
    if check.paper_high is not None:
        return f"{format_value(check.paper, check.unit)}-{format_value(check.paper_high, check.unit)}"
    return format_value(check.paper, check.unit)


def verdict(check: Check) -> str:
    return "-" if check.passed is None else ("pass" if check.passed else "MISS")


def checks_table(checks: list[Check]) -> str:
    """A fixed-width text table: experiment, metric, ours, paper, target, result, miss by."""
    header = ("experiment", "metric", "ours", "paper", "target", "result", "miss by")
    rows = [(c.experiment, c.metric, format_value(c.ours, c.unit), format_paper(c), c.target, verdict(c),
             c.miss_by) for c in checks]
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [line.format(*header), line.format(*("-" * w for w in widths))]
    out += [line.format(*r) for r in rows]
    return "\n".join(out)


def tally(checks: list[Check]) -> str:
    judged = [c for c in checks if c.passed is not None]
    return f"{sum(c.passed for c in judged)} of {len(judged)} checks pass"


def markdown_table(checks: list[Check]) -> str:
    """The same table in Markdown, for ``docs/reproduction.md``."""
    lines = ["| experiment | metric | ours | paper | target | result |", "|---|---|---:|---:|---|---|"]
    for c in checks:
        lines.append(f"| {c.experiment} | {c.metric} | {format_value(c.ours, c.unit)} | {format_paper(c)} | {c.target} | "
                     f"{verdict(c)}{' (' + c.miss_by + ')' if c.passed is False and c.miss_by else ''} |")
    return "\n".join(lines)


def figures(rep: Reproduction) -> dict[str, Figure]:
    """Every figure the reproduction's data allow, by file stem."""
    from sim import plots

    figs: dict[str, Figure] = {}
    if rep.fig2:
        summaries = rep.fig2_summaries
        figs["fig2_breakdown"] = plots.plot_breakdown(summaries, reference=paper.FIG2_SHARES,
                                                      title="KV memory shares, ShareGPT at 2 req/s (Fig. 2)")
        figs["fig13_batch_sizes"] = plots.plot_batch_sizes(summaries, reference=paper.FIG13_BATCH,
                                                           title="Mean batch size, ShareGPT at 2 req/s (Fig. 13a)")
        figs["memory_over_time"] = plots.plot_memory_comparison({k: o.steps for k, o in rep.fig2.items()})
        maps = {k: o.memory for k, o in rep.fig2.items() if o.memory is not None and len(o.memory)}
        if maps:
            figs["memory_maps"] = plots.plot_memory_maps(maps)
    for preset, group in (rep.curves.groupby("workload", sort=False) if len(rep.curves) else []):
        figs[f"latency_vs_rate_{preset}"] = plots.plot_latency_vs_rate(
            group, bound=rep.bound_s_per_token, sustained=rep.sustained.get(preset),
            title=f"Normalized latency vs rate, {preset} (Fig. 12)")
    for model, group in (rep.size_curves.groupby("model", sort=False) if len(rep.size_curves) else []):
        gpu, gpus, _ = paper.LARGER_MODELS[model]
        figs[f"latency_vs_rate_sharegpt-paper_{model}"] = plots.plot_latency_vs_rate(
            group, bound=rep.bound_s_per_token, sustained=rep.size_sustained.get(model),
            title=f"Normalized latency vs rate, {model} on {gpus} x {gpu} (Fig. 12)")
    if len(rep.block_sizes):
        figs["block_sizes"] = plots.plot_block_size_sweep(
            rep.block_sizes, panels=("waste_frac", "throughput_tok_s", "normalized_latency_s_per_tok"))
    if len(rep.preemption):
        figs["preemption"] = plots.plot_block_size_sweep(
            rep.preemption, panels=("normalized_latency_s_per_tok", "throughput_tok_s"), hue="preemption",
            log_panels=())  # within a factor of two: a log axis would label one tick
    if len(rep.sharing):
        figs["sharing"] = plots.plot_sharing_savings(rep.sharing)
    return figs


def results_json(rep: Reproduction, command: str) -> dict:
    return {
        "command": command,
        "sizes": rep.sizes.name,
        "setup": {"model": paper.MODEL, "gpu": paper.GPU, "kv_gib": paper.KV_GIB, "block_size": paper.BLOCK_SIZE,
                  "max_model_len": paper.MAX_MODEL_LEN, "chunked_prefill": False, "preemption": "recompute",
                  "watermark": paper.WATERMARK, "prefix_caching": False, "cost_profile": paper.COST_PROFILE},
        "sustained_rate_definition": f"highest rate whose normalized latency stays <= {rep.bound_s_per_token} "
                                     "s/token, interpolated linearly between the measured rates after bisecting the knee",
        "capacity": rep.capacity,
        "fig2_summaries": rep.fig2_summaries,
        "sustained_rates": rep.sustained,
        "larger_models": {m: {"gpu": g, "tensor_parallel": n, "kv_gib": kv}
                          for m, (g, n, kv) in paper.LARGER_MODELS.items()},
        "size_sustained_rates": rep.size_sustained,
        "checks": [c.as_row() for c in rep.checks],
        "tally": tally(rep.checks),
        "wall_s": rep.wall_s,
    }


def write_outputs(rep: Reproduction, out: str | Path, command: str, dpi: int = 120) -> list[Path]:
    """Write the JSON, CSVs and figures into ``out``; returns the paths written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "results.json", out / "checks.csv"]
    paths[0].write_text(json.dumps(results_json(rep, command), indent=2, default=float) + "\n")
    checks_frame(rep.checks).to_csv(paths[1], index=False)
    tables = {"fig2": pd.DataFrame([{"allocator": k, **s} for k, s in rep.fig2_summaries.items()]),
              "latency_curves": rep.curves, "latency_curves_sizes": rep.size_curves, "block_sizes": rep.block_sizes,
              "preemption": rep.preemption, "sharing": rep.sharing}
    for name, frame in tables.items():
        if len(frame):
            paths.append(out / f"{name}.csv")
            frame.to_csv(paths[-1], index=False)
    for name, fig in figures(rep).items():
        paths.append(out / f"{name}.png")
        fig.savefig(paths[-1], dpi=dpi)
    return paths
