"""Fleet speed: N replicas of OPT-13B on A100-40GB (12 GiB of KV, paged) serving `sharegpt-paper` at ~70% load.

Usage::

    python benchmarks/bench_fleet.py -n 1000000 --replicas 64                 # the scale target
    python benchmarks/bench_fleet.py -n 1000000 --replicas 64 --workers 2     # its replicas in 2 processes
    python benchmarks/bench_fleet.py -n 50000 --replicas 8 --router least-requests
    python benchmarks/bench_fleet.py --capacity                                 # one replica's saturated rate

The fleet rate is ``--load`` x ``--capacity-rate`` x replicas: one replica saturates at about 2.43 req/s on
this workload (``--capacity`` measures it: 3,000 requests offered at 4 req/s), so 0.7 x 2.43 = 1.70 req/s per
replica. Peak memory is ``ru_maxrss`` of this process (run under ``/usr/bin/time -v`` for the whole process);
with ``--workers`` > 1 (round-robin and random only: `sim.kernel.fleet_parallel`) a thread samples the whole
process tree in ``/proc`` every 0.2 s (Linux) and prints the peak of its summed RSS (parent, fork server and
workers together) and the workers' CPU time as last sampled.
The machine is shared, so CPU time and the load average at the start are printed too. Results and the commands
that produced them are in ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import os
import resource
import threading
import time

CAPACITY_RATE = 2.43
"""Requests per second one replica completes when overloaded (``--capacity``, measured 2026-12-01)."""


class TreeSampler(threading.Thread):
    """Samples this process and its descendants in ``/proc``: peak summed RSS, and each one's CPU time as last
    seen (a worker's last 0.2 s before it exits can be missed)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_rss = 0
        self.cpu: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        page, tick = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_CLK_TCK")
        while not self.stop.wait(0.2):
            stats = {}
            for entry in os.listdir("/proc"):
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    stats[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[21]))
                except (ValueError, OSError, IndexError):
                    continue
            tree, grew = {os.getpid()}, True
            while grew:
                more = {pid for pid, (ppid, _, _) in stats.items() if ppid in tree} - tree
                tree |= more
                grew = bool(more)
            self.peak_rss = max(self.peak_rss, sum(stats[pid][2] for pid in tree if pid in stats) * page)
            self.cpu.update((pid, stats[pid][1] / tick) for pid in tree if pid in stats and pid != os.getpid())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--num-requests", type=int, default=1_000_000)
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--router", default="round-robin")
    parser.add_argument("--load", type=float, default=0.7, help="offered load as a share of capacity")
    parser.add_argument("--capacity-rate", type=float, default=CAPACITY_RATE)
    parser.add_argument("--capacity", action="store_true", help="measure one replica's saturated rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1, help="worker processes for the replicas")
    args = parser.parse_args()

    import workloads
    from sim.kernel.config import SimConfig
    from sim.kernel.runner import run_simulation

    base = SimConfig(allocator="paged", model="opt-13b", gpu="a100-40gb", kv_gib=12.0, seed=args.seed,
                     memory_snapshots=0)
    if args.capacity:
        w = workloads.load_preset("sharegpt-paper", num_requests=3000, rate=4.0, seed=args.seed)
        s = run_simulation(base, w).summary
        print(f"one replica offered 4 req/s: completes {s['throughput_req_s']:.3f} req/s, "
              f"mean running {s['mean_running']:.1f}, preemptions {s['preemptions']}")
        return
    rate = args.load * args.capacity_rate * args.replicas
    load_avg = os.getloadavg()[0]
    t0 = time.perf_counter()
    workload = workloads.load_preset("sharegpt-paper", num_requests=args.num_requests, rate=rate, seed=args.seed)
    t1 = time.perf_counter()
    config = SimConfig(**{**base.to_dict(), "replicas": args.replicas, "router": args.router})
    cpu0 = time.process_time()
    sampler = TreeSampler()
    if args.workers > 1:
        sampler.start()
    result = run_simulation(config, workload, workers=args.workers)
    t2 = time.perf_counter()
    cpu = time.process_time() - cpu0
    sampler.stop.set()
    s = result.summary
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args.replicas} replicas, router {args.router}: {len(workload)} requests at {rate:.1f} req/s "
          f"({args.load:.0%} of {args.capacity_rate} req/s per replica)")
    print(f"load {t1 - t0:.2f} s, simulate {t2 - t1:.2f} s (cpu {cpu:.2f} s), peak RSS {peak_mib:.0f} MiB, "
          f"{len(result.steps)} step rows, load average {load_avg:.1f} at start")
    if args.workers > 1:
        print(f"{args.workers} workers: their cpu {sum(sampler.cpu.values()):.2f} s (sampled), process tree "
              f"peak RSS {sampler.peak_rss / 2**20:.0f} MiB (sampled: parent + fork server + workers)")
    print(f"completed {s['completed']}, rejected {s['rejected']}, preemptions {s['preemptions']}, "
          f"sim time {s['sim_time_s']:.0f} s, mean running per replica {s['mean_running']:.1f}, "
          f"ttft p50 {s['ttft_p50_s']:.3f} s, p99 {s['ttft_p99_s']:.3f} s, "
          f"load imbalance {s.get('load_imbalance', 1.0):.3f}")


if __name__ == "__main__":
    main()
