"""Time the workload hot paths against their targets: reading a 1,000,000-row canonical trace (CSV and Parquet,
target < 3 s each) and generating 1,000,000 synthetic requests (target < 2 s).

Run: ``python benchmarks/bench_workloads.py [--rows N]``. Figures are written down in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from workloads import generate, load_trace, write_trace

LENGTHS = "lognormal:prompt_mean=161,prompt_cv=1.2,output_mean=338,output_cv=1.0,max_total=2048"


def best_of(repeats: int, action) -> tuple[float, object]:
    """The fastest of ``repeats`` runs (the machine is shared, so the minimum is the honest figure)."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    seconds, workload = best_of(args.repeats, lambda: generate(LENGTHS, "poisson:rate=2", args.rows, seed=1))
    print(f"generate {args.rows:,} requests (lognormal, Poisson): {seconds:.2f} s (target < 2 s)")
    shared = generate(LENGTHS, "poisson:rate=2", args.rows, seed=1, n=2, system_prompt_len=64,
                      system_prompt_frac=0.5)
    with tempfile.TemporaryDirectory() as tmp:
        for label, trace in (("3 columns", workload), ("6 columns: + n, prefix_group, prefix_len", shared)):
            for suffix in (".csv", ".parquet"):
                path = write_trace(trace, Path(tmp) / f"trace{suffix}")
                seconds, read = best_of(args.repeats, lambda path=path: load_trace(path))
                assert len(read) == args.rows
                size = path.stat().st_size / 2**20
                print(f"read {args.rows:,}-row canonical {suffix[1:]} ({label}; {size:.0f} MiB): {seconds:.2f} s "
                      "(target < 3 s)")


if __name__ == "__main__":
    main()
