"""Sweep executors: parallel speed-up of local worker processes, and the Dask executor's overhead per point.

A 48-point grid (2 allocators x 3 block sizes x 2 rates x 4 seeds) of 2,000-request runs, three times into
fresh results stores: in-process (``--workers 1``), two local worker processes (``--workers 2``), and a Dask
LocalCluster of two single-threaded worker processes started beforehand (its start-up is reported apart, as a
long-lived cluster would not pay it per sweep). Targets: close to 2x from two workers on two idle cores; the
Dask executor within 5% of a point's time per point against the local one.

Each row records ``point_wall_s``, the time a worker spent inside the point, so besides the wall-clock
ratio we report efficiency = sum(point_wall_s) / (wall x workers): the share of the workers' time spent
simulating rather than waiting on the executor.

    python benchmarks/bench_sweep.py                 # the full benchmark (several minutes on 2 cores)
    python benchmarks/bench_sweep.py --requests 200  # a quick check of the machinery
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from sim.config import SimConfig
from sim.sweep.grid import grid_from_flags
from sim.sweep.run import run_sweep


def timed_sweep(grid, out: Path, **kwargs) -> tuple[float, float, int]:
    start = time.perf_counter()
    report = run_sweep(grid, out, **kwargs)
    wall = time.perf_counter() - start
    table = report.table
    if report.failed:
        raise SystemExit(f"{report.failed} points failed: {table['error'].dropna().iloc[0]}")
    return wall, float(table["point_wall_s"].sum()), len(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per run (default 2000)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--skip-dask", action="store_true")
    args = parser.parse_args()
    grid = grid_from_flags(["--allocator", "paged,contiguous-oracle", "--block-size", "8,16,32",
                            "--rate", "1,2", "--seed", "0,1,2,3", "--num-requests", str(args.requests),
                            "--memory-snapshots", "0"], SimConfig)
    print(f"grid: {len(grid)} points of {args.requests} requests; load before: {os.getloadavg()}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        results["local x1"] = (*timed_sweep(grid, tmp / "w1.parquet", workers=1), 1)
        results[f"local x{args.workers}"] = (
            *timed_sweep(grid, tmp / "w2.parquet", workers=args.workers), args.workers)
        if not args.skip_dask:
            from distributed import LocalCluster

            start = time.perf_counter()
            with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                              dashboard_address=None) as cluster:
                startup = time.perf_counter() - start
                results[f"dask x{args.workers}"] = (
                    *timed_sweep(grid, tmp / "dask.parquet", executor="dask",
                                 scheduler=cluster.scheduler_address), args.workers)
            print(f"dask LocalCluster start-up: {startup:.1f} s (not counted below)")
    print(f"load after: {os.getloadavg()}")
    print("| executor | wall (s) | mean point (s) | efficiency | speed-up vs x1 |")
    print("|---|---|---|---|---|")
    base = results["local x1"][0]
    for name, (wall, busy, n, workers) in results.items():
        print(f"| {name} | {wall:.1f} | {busy / n:.2f} | {busy / (wall * workers):.1%} | {base / wall:.2f}x |")
    if f"dask x{args.workers}" in results:
        local_wall, _, n, _ = results[f"local x{args.workers}"]
        dask_wall, busy, n, _ = results[f"dask x{args.workers}"]
        per_point = (dask_wall - local_wall) * args.workers / n
        print(f"dask overhead per point vs local: {per_point * 1000:+.0f} ms "
              f"({per_point / (busy / n):+.1%} of a point's time)")


if __name__ == "__main__":
    main()
