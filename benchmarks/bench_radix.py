"""Time the prefix-caching hot path of ``radix`` against ``paged``: whole request lifetimes with shared prefixes.

Each request is admitted with its chained page hashes (prefix lookup, hits taken, new pages popped, full pages
cached), grown one token per call for its output (the per-token path), and freed (pages released into the
LRU order, radix settling any duplicate page). ``--concurrent`` requests run at once in a pool of
``--pool`` x their pages, so the cache fills and evicts; prompts share a few system prompts and conversation
prefixes. Cost is wall (or ``--cpu``) seconds per request-token, prompt plus output. Target: radix within 2x
of paged at the same block size.

Run: ``python benchmarks/bench_radix.py [--requests 3000] [--block-sizes 16,1] [--repeats 3] [--cpu]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from allocators import make_allocator

clock = time.perf_counter  # `main` switches to time.process_time with --cpu


def make_requests(count: int, seed: int = 0) -> list[tuple[int, int, int]]:
    """(prefix group, shared tokens, prompt tokens, output tokens): 8 groups, shared prefixes of 200-1,000."""
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, 8, count)
    shared = rng.integers(200, 1000, count)
    prompts = shared + rng.integers(1, 400, count)
    outputs = rng.integers(20, 300, count)
    return list(zip(groups.tolist(), shared.tolist(), prompts.tolist(), outputs.tolist(), strict=True))


def hashes_of(index: int, group: int, shared: int, total: int, block_size: int) -> list[int]:
    """Chained page hashes: the group's for pages inside the shared prefix, the request's own after."""
    pages = total // block_size
    inside = shared // block_size
    return [(group << 40) + i for i in range(inside)] + [(1 << 62) + (index << 24) + i for i in range(inside, pages)]


def run(name: str, requests, block_size: int, concurrent: int, pool: float) -> tuple[float, int, int]:
    """Seconds, request-tokens and cached tokens of the whole stream through one allocator."""
    longest = max(p + o for _, _, p, o in requests)
    alloc = make_allocator(name, int(pool * concurrent * (longest + block_size)), block_size=block_size,
                           max_model_len=longest + block_size, prefix_caching=True)
    hashes = [hashes_of(i, g, s, p + o, block_size) for i, (g, s, p, o) in enumerate(requests)]
    live: list[int] = []
    tokens = hits = 0
    start = clock()
    for i, (_, _, prompt, output) in enumerate(requests):
        if len(live) == concurrent:
            alloc.free(live.pop(0))
        admission = alloc.admit(i, prompt, final_tokens=prompt + output, block_hashes=hashes[i])
        hits += admission.cached_tokens
        grow = alloc.grow
        for _ in range(output):
            grow(i, 1)
        live.append(i)
        tokens += prompt + output
    for seq in live:
        alloc.free(seq)
    elapsed = clock() - start
    alloc.check_invariants()
    return elapsed, tokens, hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrent", type=int, default=64)
    parser.add_argument("--pool", type=float, default=1.5, help="pool size in multiples of the live requests")
    parser.add_argument("--block-sizes", default="16,1")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="time CPU (process) time, not wall time")
    args = parser.parse_args()
    global clock
    clock = time.process_time if args.cpu else time.perf_counter
    requests = make_requests(args.requests)
    for block_size in map(int, args.block_sizes.split(",")):
        costs = {}
        for name in ("paged", "radix"):
            runs = [run(name, requests, block_size, args.concurrent, args.pool) for _ in range(args.repeats)]
            best, tokens, hits = min(runs)
            costs[name] = best / tokens
            print(f"block size {block_size:3d}  {name:6s} {costs[name] * 1e6:6.3f} us per request-token  "
                  f"[{len(requests)} requests, {tokens:,} tokens in {best:.2f} s, {hits / tokens:.1%} cached]")
        print(f"block size {block_size:3d}  radix / paged = {costs['radix'] / costs['paged']:.2f} (target <= 2)")


if __name__ == "__main__":
    main()
