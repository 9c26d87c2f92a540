"""Small point functions for the sweep and SLO tests (no tests here).

They live in an importable module so that worker processes and Dask workers can unpickle them by reference,
exactly as they unpickle the real `simulate_point`. ``queue_point`` is an M/M/1-like model with a known
capacity per allocator, so the SLO search has an answer computable by hand.
"""

from __future__ import annotations

import math
import multiprocessing
import time

from allocators import ALLOCATORS
from allocators.paged import PagedAllocator

if multiprocessing.parent_process() is not None:  # a worker: conftest's fixture registers "broken" in the tests'
    ALLOCATORS.setdefault("broken", PagedAllocator)  # process only, and a SimConfig names registered allocators

CAPACITY = {"paged": 8.0, "contiguous-max": 2.0, "contiguous-pow2": 4.0}
"""Requests per second each fake allocator serves at block size 16 (scaled by block_size / 16)."""

SERVICE_S = 0.1


def capacity(config) -> float:
    return CAPACITY.get(config.allocator, 4.0) * (config.block_size or 16) / 16  # not given: vLLM's 16


def queue_point(config) -> dict:
    """Summary of an M/M/1 queue: e2e = service / (1 - utilization); overloaded runs leave requests unfinished.

    ``allocator="broken"`` raises, as a simulator bug would; ``wall_time_s`` is the only nondeterministic key.
    """
    start = time.perf_counter()
    if config.allocator == "broken":
        raise RuntimeError("simulated failure")
    rate = config.rate if config.rate is not None else 1.0
    cap = capacity(config)
    util = rate / cap
    e2e = SERVICE_S / (1 - util) if util < 1 else math.inf
    requests = config.num_requests or 100
    return {
        "allocator": config.allocator, "requests": requests, "completed": requests if util < 1 else requests // 2,
        "rejected": 0, "ttft_p99_s": e2e * 3, "tpot_p50_s": e2e / 100, "e2e_p50_s": e2e,
        "normalized_latency_s_per_tok": e2e / 100, "throughput_req_s": min(rate, cap),
        "mean_running": min(util, 1.0) * 10 + config.seed, "wall_time_s": time.perf_counter() - start,
    }


def slow_point(config) -> dict:
    """A point that takes long enough for several to overlap in different workers."""
    time.sleep(0.05)
    return queue_point(config)


def rejecting_point(config) -> dict:
    """Meets every latency bound but turns requests away above 3 req/s."""
    summary = queue_point(config)
    summary.update(ttft_p99_s=0.01, tpot_p50_s=0.001, e2e_p50_s=0.01, completed=summary["requests"])
    summary["rejected"] = 1 if config.rate > 3.0 else 0
    return summary
