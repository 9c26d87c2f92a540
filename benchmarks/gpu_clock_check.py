"""kvsim's step-cost profiles against the forward passes the kernel harness timed on a real GPU.

Usage::

    python benchmarks/gpu_clock_check.py                 # the H200 run of 2026-12-04 (CUDA graphs, full grid)
    python benchmarks/gpu_clock_check.py MEASURED.csv    # any harness CSV (gpu_validation, kvsim calibrate)

The harness times a forward pass (attention on the paged cache, the dense layers, the LM head) with no
scheduler, sampler or detokenizer, so it is a floor under a serving engine's step: a profile that models an
engine should come out at or above it, by the engine's CPU work. Each profile is scored twice: as it runs, and
without its per-sequence CPU term (``seq_overhead_s``), which no forward pass contains. The table fitted to the
same CSV is scored in-sample, as a check of the fit. Prints markdown (MAPE and bias by step kind and batch).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pandas as pd

from allocators.catalog import get_gpu, get_model
from sim.kernel.cost_model import StepCostModel
from sim.kernel.cost_profiles import PROFILES, make_step_cost

RUN = Path(__file__).resolve().parent / "gpu" / "h200-2026-12-04" / "cuda-graph"
GPU = "h200"


def predict(cost: StepCostModel, frame: pd.DataFrame) -> pd.Series:
    return pd.Series([cost.step_time(int(r.prefill_tokens), int(r.decode_seqs), int(r.context_tokens),
                                     attention_pairs=int(r.attention_pairs)) for r in frame.itertuples()],
                     index=frame.index)


def clocks(frame: pd.DataFrame, table: Path | None) -> dict[str, pd.Series]:
    """Predicted step seconds by clock name, each at the row's block size."""
    model, gpu = get_model(frame["model"].iloc[0]), get_gpu(GPU)
    out: dict[str, list[pd.Series]] = {}
    for block_size, rows in frame.groupby("block_size"):
        for name in PROFILES:
            cost = make_step_cost(name, model, gpu, block_size=int(block_size))
            out.setdefault(name, []).append(predict(cost, rows))
            no_cpu = dataclasses.replace(cost, seq_overhead_s=0.0)
            out.setdefault(f"{name}, no per-sequence CPU", []).append(predict(no_cpu, rows))
        if table is not None:
            cost = make_step_cost(str(table), model, gpu, block_size=int(block_size))
            out.setdefault(f"{table.name} (in-sample)", []).append(predict(cost, rows))
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("measured", nargs="?", type=Path, default=RUN / "llama-3-8b-full.csv")
    args = parser.parse_args(argv)
    frame = pd.read_csv(args.measured)
    table = args.measured.with_suffix(".json")
    timing = frame["timing"].iloc[0] if "timing" in frame else "eager"  # CSVs from before the column: eager
    print(f"{args.measured}: {len(frame)} steps of {frame['model'].iloc[0]} ({timing}), "
          f"MAPE / bias of each clock against the measured step")
    print()
    print(scores(frame, clocks(frame, table if table.is_file() else None)))


if __name__ == "__main__":
    main()
