"""Simulator speed: the Azure and Mooncake conversation traces and a large synthetic ShareGPT run (wall time,
peak memory).

Usage::

    python benchmarks/bench_sim.py azure                 # Azure conv lengths, Poisson 4 req/s, Llama-2-7B
    python benchmarks/bench_sim.py mooncake --allocator radix --cpu-offload-gib 64
                                    # Mooncake conversation trace, all rows, its own timestamps, Qwen3-8B, H200
    python benchmarks/bench_sim.py sharegpt -n 1000000   # the paper's ShareGPT lengths, preset rate
    python benchmarks/bench_sim.py sharegpt -n 100000 --profile
    python benchmarks/bench_sim.py mooncake --allocator radix --cpu-offload-gib 64 --repeat 5
                                    # five runs in one process: each run's CPU seconds, the least and the median

Peak memory is ``ru_maxrss`` of this process. The machine is shared, so the CPU time of the simulation and
the load average at the start are printed too: wall time follows the load, CPU time much less. On a shared
host even CPU time moves by a third from run to run (other tenants' cache traffic), so ``--repeat N`` runs the
same simulation N times and prints every run's CPU time with the least and the median; the least is the
figure closest to the code's own cost. Results and
the commands that produced them are in ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import statistics
import time

from workloads.presets import trace_file


def load(name: str, num_requests: int | None, rate: float | None, seed: int):
    import workloads

    if name == "azure":
        path, _full = trace_file("azure-conv")  # $KVSIM_TRACES's full trace, else the shipped sample
        return workloads.load_trace(path, arrivals=f"poisson:rate={rate or 4.0:g}", seed=seed)
    if name == "mooncake":
        return workloads.load_preset("mooncake-conv", num_requests=num_requests, rate=rate, seed=seed)
    return workloads.load_preset("sharegpt-paper", num_requests=num_requests, rate=rate, seed=seed)


def same_outputs(summary: dict) -> str:
    """The summary without its wall time, as text (NaN equals NaN there): what a repeated run must reproduce."""
    return json.dumps({k: v for k, v in summary.items() if k != "wall_time_s"}, sort_keys=True, default=str)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=["azure", "mooncake", "sharegpt"])
    parser.add_argument("-n", "--num-requests", type=int, default=None,
                        help="sharegpt: default 1,000,000; mooncake: default every row")
    parser.add_argument("--rate", type=float)
    parser.add_argument("--allocator", default="paged")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--repeat", type=int, default=1, help="run the simulation N times (CPU time of each)")
    parser.add_argument("--cpu-offload-gib", type=float, default=0.0, help="host-memory KV tier (GiB)")
    parser.add_argument("--offload-write-policy", default="write_back", choices=["write_back", "write_through"],
                        help="when a block reaches the host tier")
    parser.add_argument("--offload-eviction-policy", default="lru", choices=["lru", "arc"],
                        help="write-through: how the host tier picks what to drop")
    parser.add_argument("--offload-store-threshold", type=int, default=0,
                        help="write-through: store a block once this many requests offered it (below 2: all)")
    parser.add_argument("--offload-loads", default="sync", choices=["sync", "async"],
                        help="host-tier loads charged to the admitting step, or beside the steps (paged)")
    parser.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false",
                        help="turn vLLM v1's default automatic prefix caching off")
    args = parser.parse_args()

    from sim.kernel.config import SimConfig
    from sim.kernel.runner import run_simulation

    load_avg = os.getloadavg()[0]
    t0 = time.perf_counter()
    count = args.num_requests or (1_000_000 if args.workload == "sharegpt" else None)
    workload = load(args.workload, count, args.rate, args.seed)
    t1 = time.perf_counter()
    tier = ({"cpu_offload_gib": args.cpu_offload_gib, "offload_write_policy": args.offload_write_policy,
             "offload_store_threshold": args.offload_store_threshold,
             "offload_eviction_policy": args.offload_eviction_policy, "offload_loads": args.offload_loads}
            if args.cpu_offload_gib else {})
    common = dict(allocator=args.allocator, seed=args.seed, prefix_caching=args.prefix_caching, **tier)
    if args.workload == "azure":
        config = SimConfig(model="llama-2-7b", gpu="a100-40gb", **common)
    elif args.workload == "mooncake":  # Mooncake's prompts average 12K tokens: Qwen3-8B's 40K context
        config = SimConfig(model="qwen3-8b", gpu="h200", max_num_batched_tokens=8192, **common)
    else:
        config = SimConfig(model="opt-13b", gpu="a100-40gb", kv_gib=12.0, **common)
    cpu0 = time.process_time()
    if args.profile:
        profiler = cProfile.Profile()
        result = profiler.runcall(run_simulation, config, workload)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
    else:
        result = run_simulation(config, workload)
    t2 = time.perf_counter()
    cpu = time.process_time() - cpu0
    cpus = [cpu]
    for _ in range(args.repeat - 1):
        cpu0 = time.process_time()
        again = run_simulation(config, workload)
        cpus.append(time.process_time() - cpu0)
        if same_outputs(again.summary) != same_outputs(result.summary):
            raise SystemExit("a repeated run gave another summary: the simulation is not deterministic")
    t3 = time.perf_counter()
    memory_rows = len(result.memory)  # built on first use: timed on its own, as `kvsim run --out` pays it
    t4 = time.perf_counter()
    s = result.summary
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"workload {args.workload}: {len(workload)} requests ({s['workload_source']})")
    print(f"load {t1 - t0:.2f} s, simulate {t2 - t1:.2f} s (summary wall_time_s {s['wall_time_s']:.2f}, "
          f"cpu {cpu:.2f} s), peak RSS {peak_mib:.0f} MiB, {len(result.steps)} step rows, "
          f"load average {load_avg:.1f} at start")
    print(f"memory-map table (built when read, e.g. by --out): {memory_rows} rows in {t4 - t3:.2f} s")
    print(f"completed {s['completed']}, rejected {s['rejected']}, preemptions {s['preemptions']}, "
          f"sim time {s['sim_time_s']:.0f} s, mean running {s['mean_running']:.1f}, "
          f"throughput {s['throughput_tok_s']:.0f} tok/s")
    print(f"prefix hits {s['cached_prompt_tokens']} tokens (prefix_hit_frac {s['prefix_hit_frac']:.3f}; host tier "
          f"{s.get('host_hit_tokens', 0)}), prefill computed {s['prefill_tokens']} tokens")
    if len(cpus) > 1:
        print(f"cpu of {len(cpus)} runs: {', '.join(f'{c:.2f}' for c in cpus)} s; least {min(cpus):.2f} s, "
              f"median {statistics.median(cpus):.2f} s")


if __name__ == "__main__":
    from sim.kernel.huge_pages import without_huge_page_hint

    with without_huge_page_hint():  # as the `kvsim` command runs
        main()
