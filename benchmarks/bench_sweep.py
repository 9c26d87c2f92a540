"""Sweep executors: parallel speed-up of local worker processes, and the Dask executor's overhead per point.

A 48-point grid (2 allocators x 3 block sizes x 2 rates x 4 seeds) of 2,000-request runs, three times into
fresh results stores: in-process (``--workers 1``), two local worker processes (``--workers 2``), and a Dask
LocalCluster of two single-threaded worker processes started beforehand. Both executors' one-time start-up
(the Dask cluster; the local fork server, which imports the simulator once for all later worker processes) is
reported apart, as a long-lived cluster or process would not pay it per sweep. Targets: close to 2x from two
workers on two idle cores; the Dask executor within 5% of a point's time per point against the local one.
A CPU spin check before and after says how many cores were actually free: the speed-up cannot exceed it.

Each row records ``point_wall_s``, the time a worker spent inside the point, so besides the wall-clock
ratio we report efficiency = sum(point_wall_s) / (wall x workers), the share of the workers' time spent
simulating, and idle per point = (wall x workers - sum(point_wall_s)) / points, the executor's cost per point
(pool start-up, dispatch, result transfer, and the tail where one worker waits for the other). Other load
on the machine slows points and executor alike, so the idle figure is steadier than wall-clock ratios.

    python benchmarks/bench_sweep.py                 # the full benchmark (about a minute on 2 cores)
    python benchmarks/bench_sweep.py --requests 200  # a quick check of the machinery
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from sim.kernel.config import SimConfig
from sim.sweep.executors import run_tasks
from sim.sweep.grid import grid_from_flags
from sim.sweep.run import run_sweep


def _spin(n: int) -> float:
    start = time.perf_counter()
    total = 0
    for i in range(n):
        total += i
    return time.perf_counter() - start


def free_cores(workers: int, n: int = 10_000_000) -> float:
    """How many cores the machine gives us right now: ``workers`` x (one spin alone / spins side by side).

    On an idle machine this is ``workers``; when other jobs hold the cores it drops, and so must the speed-up.
    """
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        list(pool.map(_spin, [1000] * workers))  # start the workers first
        alone = pool.submit(_spin, n).result()
        together = max(pool.map(_spin, [n] * workers))
    return workers * alone / together


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
    parser.add_argument("--dask-default-env", action="store_true",
                        help="start Dask workers with the nanny's default MALLOC_TRIM_THRESHOLD_=65536")
    args = parser.parse_args()
    grid = grid_from_flags(["--allocator", "paged,contiguous-oracle", "--block-size", "8,16,32",
                            "--rate", "1,2", "--seed", "0,1,2,3", "--num-requests", str(args.requests),
                            "--memory-snapshots", "0"], SimConfig)
    print(f"grid: {len(grid)} points of {args.requests} requests; load before: {os.getloadavg()}; "
          f"free cores (CPU spin check): {free_cores(args.workers):.2f} of {args.workers}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        results["local x1"] = (*timed_sweep(grid, tmp / "w1.parquet", workers=1), 1)
        start = time.perf_counter()
        list(run_tasks(_spin, [1000] * args.workers, workers=args.workers))  # start the fork server
        print(f"local fork server start-up (imports the simulator once): {time.perf_counter() - start:.1f} s "
              "(not counted below)")
        results[f"local x{args.workers}"] = (
            *timed_sweep(grid, tmp / "w2.parquet", workers=args.workers), args.workers)
        if not args.skip_dask:
            import dask
            from distributed import LocalCluster

            # As kvsim's private cluster does (sim/sweep/executors.py): no MALLOC_TRIM_THRESHOLD_ in the
            # workers, whose default 65536 slows the simulator's small allocations; --dask-default-env keeps it.
            env = {} if args.dask_default_env else {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
            start = time.perf_counter()
            with dask.config.set(env), LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                                    host="127.0.0.1", dashboard_address=None) as cluster:
                startup = time.perf_counter() - start
                results[f"dask x{args.workers}"] = (
                    *timed_sweep(grid, tmp / "dask.parquet", executor="dask",
                                 scheduler=cluster.scheduler_address), args.workers)
            print(f"dask LocalCluster start-up: {startup:.1f} s (not counted below)")
    print(f"load after: {os.getloadavg()}; free cores: {free_cores(args.workers):.2f} of {args.workers}")
    print("| executor | wall (s) | mean point (s) | efficiency | idle per point (ms) | speed-up vs x1 |")
    print("|---|---|---|---|---|---|")
    base = results["local x1"][0]
    idle = {}
    for name, (wall, busy, n, workers) in results.items():
        idle[name] = (wall * workers - busy) / n  # worker time not spent in a point, per point
        print(f"| {name} | {wall:.1f} | {busy / n:.2f} | {busy / (wall * workers):.1%} "
              f"| {idle[name] * 1000:.0f} "
              f"| {base / wall:.2f}x |")
    local, dask = f"local x{args.workers}", f"dask x{args.workers}"
    if dask in results:
        mean_point = results[dask][1] / results[dask][2]
        by_wall = (results[dask][0] - results[local][0]) * args.workers / results[dask][2]
        by_idle = idle[dask] - idle[local]
        print(f"dask overhead per point vs local: {by_idle * 1000:+.0f} ms from idle time "
              f"({by_idle / mean_point:+.1%} of a point), {by_wall * 1000:+.0f} ms from wall time "
              f"({by_wall / mean_point:+.1%}); the wall-time figure is at the mercy of other load")


if __name__ == "__main__":
    main()
