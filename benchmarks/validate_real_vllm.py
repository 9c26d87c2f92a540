"""kvsim's clock against the two real vLLM 0.11 runs: the tables of ``docs/validation.md``.

Usage::

    python benchmarks/validate_real_vllm.py            # every profile, every phase, plus the held-out fits
    python benchmarks/validate_real_vllm.py --no-fit   # skip kvsim calibrate --from-trace's fits

Reads the shipped fixtures (``tests/sim/fixtures/real_vllm``, Apache-2.0, see the README there); prints markdown.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from allocators.catalog import get_gpu, get_model
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import StepCostModel
from sim.kernel.cost_profiles import make_step_cost
from sim.measured import read_measured
from sim.replay import replay, score
from sim.trace_fit import fit_trace

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "sim" / "fixtures" / "real_vllm"
CASES = {
    "jan21-llama7b-train-1": dict(model="llama-2-7b", kv_tokens=119_008, max_num_seqs=256,
                                  max_num_batched_tokens=4096, max_model_len=4096),
    "jan20-codellama-prefill-1": dict(model="codellama-34b", kv_tokens=44_640, max_num_seqs=32,
                                      max_num_batched_tokens=64, max_model_len=8192),
}


def config(name: str) -> SimConfig:
    return SimConfig(gpu="h100-80gb", block_size=16, prefix_caching=True, watermark=0.0, **CASES[name])


def table(frame: pd.DataFrame) -> str:
    wide = frame.pivot_table(index="phase", columns="metric", values=["mape", "bias"], sort=False)
    phases = ["all"] + [p for p in dict.fromkeys(frame["phase"]) if p != "all"]
    counts = frame.groupby("phase")["requests"].max()
    lines = ["| phase | requests | TTFT MAPE | TTFT bias | TPOT MAPE | TPOT bias | E2E MAPE | E2E bias |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in phases:
        cells = [f"{wide.loc[p, (k, m)]:+.1%}" if k == "bias" else f"{wide.loc[p, (k, m)]:.1%}"
                 for m in ("ttft", "tpot", "e2e") for k in ("mape", "bias")]
        lines.append(f"| {p} | {counts[p]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-fit", action="store_true")
    args = parser.parse_args()
    for name in CASES:
        run = read_measured(FIXTURES / f"{name}.csv")
        cfg = config(name)
        model, gpu = get_model(cfg.model), get_gpu(cfg.gpu)
        costs = {"vllm-v1": make_step_cost("vllm-v1", model, gpu),
                 "paper-2023": make_step_cost("paper-2023", model, gpu),
                 "roofline before profiles (0.8, 0.6, 3 ms)": StepCostModel(model, gpu)}
        for label, cost in costs.items():
            print(f"\n### {name}, {label}\n")
            print(table(score(run.frame, replay(run, cfg, cost), run.scored)))
        if args.no_fit:
            continue
        for holdout in ("random", "time"):
            fit = fit_trace(run, cfg, holdout=holdout)
            values = ", ".join(f"{k} {fit.coefficients[k]:.4g}" for k in fit.fitted)
            print(f"\n### {name}, kvsim calibrate --from-trace (holdout {holdout}): {values}; "
                  f"{fit.simulations} simulations, {fit.seconds:.0f} s\n")
            print("held-out half:\n")
            print(table(fit.heldout_score))
            part = fit.train_score[fit.train_score["phase"] == "all"]
            print("\ntraining half, all phases: " + ", ".join(
                f"{r.metric} MAPE {r.mape:.1%} bias {r.bias:+.1%}" for r in part.itertuples()))


if __name__ == "__main__":
    main()
