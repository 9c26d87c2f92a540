"""kvsim's step-cost profiles against the forward passes the kernel harness timed on a real GPU.

Usage::

    python benchmarks/gpu_clock_check.py                 # the H200 run of 2026-12-04 (CUDA graphs, full grid)
    python benchmarks/gpu_clock_check.py --whole-steps   # that day's whole steps (one graph per forward pass)
    python benchmarks/gpu_clock_check.py --models        # that day's batch-1 steps of three models: the slope
    python benchmarks/gpu_clock_check.py --transfers     # that day's KV copies between host and GPU memory
    python benchmarks/gpu_clock_check.py MEASURED.csv    # any harness CSV, whole_steps.csv or host_transfers.csv
                                                         # (--gpu NAME unless a table beside it names the GPU)

The harness times a forward pass (attention on the paged cache, the dense layers, the LM head) with no
scheduler, sampler or detokenizer, so it is a floor under a serving engine's step: a profile that models an
engine should come out at or above it, by the engine's CPU work. Each profile is scored twice: as it runs, and
without its per-sequence CPU term (``seq_overhead_s``), which no forward pass contains. The table fitted to the
same CSV is scored in-sample, as a check of the fit; a whole-steps CSV (`gpu_validation.whole_step`: all layers
as one call, the time the composition stands for) is scored against the full grid's table, fitted to composed
steps. Prints markdown (MAPE and bias by step kind and batch). ``--models`` reads the batch-1 whole steps of
models of different sizes instead and prints the weight-read bandwidth their slope implies, the way `vllm-v1`'s
bandwidth_frac and step_overhead_s were derived from vLLM's batch-1 steps. ``--transfers`` reads KV copied
between pinned host memory and the GPU (`gpu_validation.host_transfer` times them) and sets what kvsim charges a
swap or a host-tier load (its ``transfer_time``: the catalog GPU's ``pcie_gb_s`` and ``swap_copy_latency_s`` per
copy call) beside each measured per-block transfer. Every mode only reads CSVs: none needs torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pandas as pd

from allocators import roofline
from allocators.catalog import get_gpu, get_model
from gpu_validation.features import decode_step, prefill_step
from gpu_validation.fit import fit_link
from sim.kernel.cost_model import StepCostModel
from sim.kernel.cost_profiles import PROFILES, make_step_cost

RUNS = Path(__file__).resolve().parent / "gpu" / "h200-2026-12-04"
RUN = RUNS / "cuda-graph"
TRANSFERS = [RUNS / "host-transfers" / run / f"host_transfers_{name}.csv" for run in ("run1", "run2")
             for name in ("llama-3-8b_bs1", "llama-3-8b_bs16", "llama-3-8b_bs32", "llama-2-7b_bs16")]
"""Two sessions' calls of the four block shapes; the second also timed the per-layer transfer kernel."""


def whole_step_features(frame: pd.DataFrame) -> pd.DataFrame:
    """A whole-steps CSV with the step's features (as the harness CSV has them) and ``step_s`` its whole time;
    points skipped for memory (no time) are left out."""
    frame = frame.dropna(subset=["whole_step_s"])
    shapes = [decode_step(r.batch_size, r.context_len, r.block_size) if r.kind == "decode"
              else prefill_step(r.chunk, r.offset, r.block_size) for r in frame.itertuples()]
    return frame.assign(prefill_tokens=[s.prefill_tokens for s in shapes], decode_seqs=[s.decode_seqs for s in shapes],
                        context_tokens=[s.context_tokens for s in shapes],
                        attention_pairs=[s.attention_pairs for s in shapes], step_s=frame["whole_step_s"])


def predict(cost: StepCostModel, frame: pd.DataFrame) -> pd.Series:
    return pd.Series([cost.step_time(int(r.prefill_tokens), int(r.decode_seqs), int(r.context_tokens),
                                     attention_pairs=int(r.attention_pairs)) for r in frame.itertuples()],
                     index=frame.index)


def clocks(frame: pd.DataFrame, gpu_name: str, table: Path | None, table_label: str = "") -> dict[str, pd.Series]:
    """Predicted step seconds on ``gpu_name`` by clock name (``table_label`` for the table's), each at the row's
    block size."""
    model, gpu = get_model(frame["model"].iloc[0]), get_gpu(gpu_name)
    out: dict[str, list[pd.Series]] = {}
    for block_size, rows in frame.groupby("block_size"):
        for name in PROFILES:
            cost = make_step_cost(name, model, gpu, block_size=int(block_size))
            out.setdefault(name, []).append(predict(cost, rows))
            no_cpu = dataclasses.replace(cost, seq_overhead_s=0.0)
            out.setdefault(f"{name}, no per-sequence CPU", []).append(predict(no_cpu, rows))
        if table is not None:
            cost = make_step_cost(str(table), model, gpu, block_size=int(block_size))
            out.setdefault(table_label, []).append(predict(cost, rows))
    return {name: pd.concat(parts).sort_index() for name, parts in out.items()}


def scores(frame: pd.DataFrame, predicted: dict[str, pd.Series]) -> str:
    """A markdown table: one row per step kind and batch size (decode) plus all steps, one column per clock,
    each cell ``MAPE / bias``."""
    groups = [(f"{kind} x{batch}", rows.index) for (kind, batch), rows in frame.groupby(["kind", "batch_size"])]
    groups.append(("all", frame.index))
    lines = ["| steps | n | " + " | ".join(predicted) + " |", "|---|---:|" + "---:|" * len(predicted)]
    for label, index in groups:
        cells = []
        for seconds in predicted.values():
            error = (seconds[index] - frame["step_s"][index]) / frame["step_s"][index]
            cells.append(f"{error.abs().mean():.1%} / {error.mean():+.1%}")
        lines.append(f"| {label} | {len(index)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def slope(frame: pd.DataFrame, gpu_name: str) -> str:
    """Markdown: each model's batch-1 whole step against its weight bytes, and the line through the smallest and
    largest model (bandwidth as a fraction of the data sheet's, intercept)."""
    steps = frame[frame["batch_size"] == 1].assign(
        weight_bytes=lambda f: [roofline.weight_bytes(get_model(m), 2) for m in f["model"]])
    steps = steps.sort_values("weight_bytes")
    peak = get_gpu(gpu_name).hbm_bandwidth_gb_s * 1e9
    lines = ["| model | weights (GB) | batch-1 step (ms) |", "|---|---:|---:|"]
    lines += [f"| {r.model} | {r.weight_bytes / 1e9:.2f} | {r.whole_step_s * 1e3:.2f} |" for r in steps.itertuples()]
    small, large = steps.iloc[0], steps.iloc[-1]
    per_byte = (large.whole_step_s - small.whole_step_s) / (large.weight_bytes - small.weight_bytes)
    intercept = small.whole_step_s - small.weight_bytes * per_byte
    lines.append(f"\n{small.model} to {large.model}: {1 / per_byte / 1e12:.2f} TB/s, {1 / per_byte / peak:.2f} of "
                 f"the data sheet's {peak / 1e12:.1f} TB/s, intercept {intercept * 1e3:.2f} ms")
    return "\n".join(lines)


def transfers(frames: list[pd.DataFrame], gpu_name: str) -> str:
    """Markdown: the link fitted to each file's contiguous copies, then each per-block transfer's measured
    microseconds per copy call (eager, foreach, graph) beside kvsim's charge for the same blocks (`transfer_time`),
    then each host-to-device load by a transfer kernel a layer beside what `radix` is charged for it."""
    gpu = get_gpu(gpu_name)
    links = pd.concat([fit_link(f) for f in frames])
    lines = ["| direction | link (GB/s) | latency per call (us) | catalog pcie_gb_s |", "|---|---:|---:|---:|"]
    for direction, fits in links.groupby("direction", sort=False):
        lines.append(f"| {direction} | {fits.gb_s.min():.1f}-{fits.gb_s.max():.1f} | "
                     f"{fits.latency_s.min() * 1e6:.1f}-{fits.latency_s.max() * 1e6:.1f} | {gpu.pcie_gb_s:g} |")
    timings = ["eager", "foreach", "cuda-graph"]
    lines += ["", "| run | model, block | KiB per call | direction | " + " | ".join(f"{t} (us)" for t in timings)
              + " | kvsim (us) | kvsim / foreach | kvsim / graph |", "|---|---|---:|---|" + "---:|" * 6]
    for frame in frames:
        lines += _per_block_rows(frame, gpu, timings)
    loads = [f for f in frames if (f.pattern == "per-layer").any()]
    if loads:
        lines += ["", "| model, block | blocks a load | direction | eager (us a load) | cuda-graph (us a load) "
                      "| kvsim radix (us a load) | kvsim / graph |", "|---|---:|---|---:|---:|---:|---:|"]
    for frame in loads:
        lines += _kernel_load_rows(frame, gpu)
    return "\n".join(lines)


def _cost(frame: pd.DataFrame, gpu) -> tuple[StepCostModel, int]:
    """kvsim's cost model for the model and block size whose blocks ``frame`` copied, and that block size."""
    block_size = int(frame["block_size"].iloc[0])
    return StepCostModel(get_model(frame["model"].iloc[0]), gpu, block_size=block_size), block_size


def _per_block_rows(frame: pd.DataFrame, gpu, timings: list[str]) -> list[str]:
    """The largest per-block transfer each way (the per-call cost with the fixed part spread thinnest)."""
    cost, block_size = _cost(frame, gpu)
    blocks = frame[(frame.pattern == "per-block") & (frame.copies == frame.copies.max())]
    lines = []
    for (direction, copies), rows in blocks.groupby(["direction", "copies"], sort=False):
        per_call = rows.set_index("timing").seconds_per_copy.reindex(timings)
        n = copies // (2 * cost.model.num_layers)  # blocks: a call per block, layer and K/V
        kvsim = cost.transfer_time(swap_slots=n * block_size, swap_transfers=n) / copies
        lines.append(f"| {frame['run'].iloc[0]} | {cost.model.name}, {block_size} | "
                     f"{rows.bytes_per_copy.iloc[0] / 1024:g} | {direction} | "
                     + " | ".join(f"{s * 1e6:.2f}" for s in per_call)
                     + f" | {kvsim * 1e6:.2f} | {kvsim / per_call['foreach']:.2f} | {kvsim / per_call['cuda-graph']:.2f} |")
    return lines


def _kernel_load_rows(frame: pd.DataFrame, gpu) -> list[str]:
    """Each host-to-device load by the transfer kernel (loads are what kvsim charges) against `radix`'s charge:
    one latency a layer and K/V, however many blocks."""
    cost, block_size = _cost(frame, gpu)
    block_bytes = frame.loc[frame.pattern == "per-block", "bytes_per_copy"].iloc[0]
    kernel = frame[(frame.pattern == "per-layer") & (frame.direction == "host-to-device")]
    lines = []
    for load_bytes, rows in kernel.groupby("bytes_per_copy", sort=False):
        n = load_bytes // block_bytes
        seconds = rows.set_index("timing").seconds.reindex(["eager", "cuda-graph"])
        kvsim = cost.transfer_time(swap_slots=n * block_size, swap_transfers=1)
        lines.append(f"| {cost.model.name}, {block_size} | {n} | host-to-device | {seconds['eager'] * 1e6:.1f} | "
                     f"{seconds['cuda-graph'] * 1e6:.1f} | {kvsim * 1e6:.1f} | {kvsim / seconds['cuda-graph']:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("measured", nargs="?", type=Path, default=None)
    parser.add_argument("--whole-steps", action="store_true", help="the committed run's whole steps")
    parser.add_argument("--models", action="store_true", help="the committed run's batch-1 steps of three models")
    parser.add_argument("--transfers", action="store_true", help="the committed runs' KV copies over PCIe")
    parser.add_argument("--gpu", help="catalog GPU the measurements ran on (default: the table's, or h200 for the "
                                      "committed run)")
    args = parser.parse_args(argv)
    if args.measured is not None and args.gpu is None and not args.measured.with_suffix(".json").is_file():
        parser.error(f"{args.measured}: no calibration table beside it names its GPU: pass --gpu")
    if args.models:
        measured = args.measured or RUNS / "models" / "models.csv"
        print(f"{measured}: whole decode steps at batch 1, 1,024 tokens of context\n")
        print(slope(pd.read_csv(measured), args.gpu or "h200"))
        return
    if args.transfers or (args.measured is not None and args.measured.name.startswith("host_transfers")):
        paths = [args.measured] if args.measured is not None else TRANSFERS
        frames = [pd.read_csv(path).assign(run=path.parent.name) for path in paths]
        if "model" not in frames[0]:
            parser.error(f"{args.measured}: no model and block_size columns (gpu_validation writes them since "
                         "2026-12-04): run python -m gpu_validation.host_transfer again")
        gpu = args.gpu or "h200"
        print(f"KV copied between pinned host memory and an {gpu}, against kvsim's charge for the same copies\n")
        print(transfers(frames, gpu))
        return
    measured = args.measured or (RUNS / "whole-step" / "whole_steps.csv" if args.whole_steps
                                 else RUN / "llama-3-8b-full.csv")
    frame = pd.read_csv(measured)
    if "whole_step_s" in frame:
        frame, table = whole_step_features(frame), RUN / "llama-3-8b-full.json"
        if args.measured is not None:  # a user's whole steps: no table of theirs to score
            table = measured.with_suffix(".json")
        label, what = f"{table.name} (fitted to composed steps)", "whole steps"
    else:
        table, what = measured.with_suffix(".json"), "steps"
        label = f"{table.name} (in-sample)"
    gpu = args.gpu or (json.loads(table.read_text())["gpu"] if table.is_file() else "h200")
    timing = frame["timing"].iloc[0] if "timing" in frame else "eager"  # CSVs from before the column: eager
    print(f"{measured}: {len(frame)} {what} of {frame['model'].iloc[0]} on {gpu} ({timing}), "
          f"MAPE / bias of each clock against the measured step")
    print()
    print(scores(frame, clocks(frame, gpu, table if table.is_file() else None, label)))


if __name__ == "__main__":
    main()
