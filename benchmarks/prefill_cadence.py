"""What vLLM's prefill cadence (``--prefill-schedule-interval N``) trades: first tokens later for decode steps that
carry no prefill. For each rate and interval, one run of ``--preset sharegpt-demo`` (Llama-3-8B on an A100-80GB,
the default ``vllm-v1`` clock) and one markdown row: TTFT p50 and p99 (the summary's), the time of the steps decode
tokens were computed in (p50, p90, p99, each step weighted by the decode tokens it computed: the inter-token gap a
running request sees, a step it sits out left aside) and the share of decode tokens computed in a step that also
prefilled.

Run: ``python benchmarks/prefill_cadence.py [--rates 4,8,16] [--intervals 1,4,8]`` (about 0.3 s a run).
"""

from __future__ import annotations

import argparse

import numpy as np

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_config


def weighted_percentiles(values: np.ndarray, weights: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """The smallest value whose weight share reaches each q."""
    order = np.argsort(values, kind="stable")
    share = np.cumsum(weights[order]) / weights.sum()
    return [float(values[order][min(np.searchsorted(share, q), len(values) - 1)]) for q in qs]


def row(rate: float, interval: int) -> str:
    result = run_config(SimConfig(preset="sharegpt-demo", model="llama-3-8b", gpu="a100-80gb", rate=rate,
                                  prefill_schedule_interval=interval), warn=False)
    steps = result.steps
    per_step = steps["duration_s"].to_numpy() / steps["num_steps"].to_numpy()
    tokens = steps["decode_seqs"].to_numpy() * steps["num_steps"].to_numpy()
    mixed = float((tokens * (steps["prefill_tokens"].to_numpy() > 0)).sum() / tokens.sum())
    gaps = weighted_percentiles(per_step, tokens, (0.5, 0.9, 0.99))
    s = result.summary
    return (f"| {rate:g} | {interval} | {s['ttft_p50_s'] * 1e3:.1f} | {s['ttft_p99_s'] * 1e3:.1f} | "
            + " | ".join(f"{g * 1e3:.1f}" for g in gaps) + f" | {mixed:.1%} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", default="4,8,16")
    p.add_argument("--intervals", default="1,4,8")
    a = p.parse_args()
    print("| rate (req/s) | interval | TTFT p50 (ms) | TTFT p99 (ms) | decode step p50 (ms) | p90 | p99 | "
          "decode tokens in prefill steps |")
    print("|---|---|---|---|---|---|---|---|")
    for rate in map(float, a.rates.split(",")):
        for interval in map(int, a.intervals.split(",")):
            print(row(rate, interval), flush=True)


if __name__ == "__main__":
    main()
