"""Time the allocators' decode hot path: 256 running sequences each growing by one token per step for 10,000
steps (target: under 1 us per request-token for ``paged`` and ``paged-cow``).

For ``paged-cow`` half of the sequences are forks of the other half (parallel sampling, n=2), so the first
step of each pair pays a copy-on-write; after that it is the same fast path. Contiguous allocators are
timed too, for reference. The loop is what the engine does per decode step (one ``grow`` per running
sequence); a run of steps that the engine skips with ``headroom`` would be cheaper still.

The simulator does not pay that per token: it tells the allocator about a decoding sequence only when its
headroom runs out (a block boundary for ``paged``), through ``PagedAllocator.grow_due``. The second table
times that block path: each sequence grows by one block's worth of tokens per call.

Run: ``python benchmarks/bench_allocator.py [--seqs 256] [--steps 10000] [--repeats 3] [--cpu]`` (``--cpu``:
CPU time instead of wall time, for comparisons on a shared machine).
"""

from __future__ import annotations

import argparse
import time

from allocators import ALLOCATORS, make_allocator

PROMPT = 100
clock = time.perf_counter  # `main` switches to time.process_time with --cpu


def build(name: str, num_seqs: int, steps: int):
    total = PROMPT + steps
    alloc = make_allocator(name, num_seqs * (total + 64) * 2, block_size=16, max_model_len=total + 64,
                           placement="first-fit")
    if name == "paged-cow":
        for seq in range(0, num_seqs, 2):
            assert alloc.admit(seq, PROMPT, final_tokens=total) is not None
            assert alloc.fork(seq, seq + 1, final_tokens=total) is not None
    else:
        for seq in range(num_seqs):
            assert alloc.admit(seq, PROMPT, final_tokens=total) is not None
    return alloc


def time_decode(name: str, num_seqs: int, steps: int) -> tuple[float, int]:
    alloc = build(name, num_seqs, steps)
    grow = alloc.grow
    seqs = list(range(num_seqs))
    copies = 0
    start = clock()
    for _ in range(steps):
        for seq in seqs:
            result = grow(seq, 1)
            if result:
                copies += len(result)
    elapsed = clock() - start
    alloc.check_invariants()
    assert all(alloc.num_tokens(seq) == PROMPT + steps for seq in seqs)
    return elapsed, copies


def time_blocks(num_seqs: int, steps: int, due: bool) -> float:
    """Seconds per block for ``paged``: ``grow`` (or ``grow_due``) by a block's tokens at a time."""
    alloc = build("paged", num_seqs, steps)
    grow = alloc.grow_due if due else alloc.grow
    bs = alloc.block_size
    seqs = list(range(num_seqs))
    rounds = steps // bs
    start = clock()
    for _ in range(rounds):
        for seq in seqs:
            grow(seq, bs)
    elapsed = clock() - start
    alloc.check_invariants()
    return elapsed / (rounds * num_seqs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--allocators", default=",".join(ALLOCATORS))
    parser.add_argument("--cpu", action="store_true", help="time CPU (process) time, not wall time")
    args = parser.parse_args()
    global clock
    clock = time.process_time if args.cpu else time.perf_counter
    tokens = args.seqs * args.steps
    for name in args.allocators.split(","):
        runs = [time_decode(name, args.seqs, args.steps) for _ in range(args.repeats)]
        best, copies = min(runs)
        target = " (target < 1 us)" if name.startswith("paged") else ""
        print(f"{name:18s} {best / tokens * 1e6:6.3f} us per request-token{target}  "
              f"[{args.seqs} seqs x {args.steps:,} steps in {best:.2f} s, {copies} copy-on-write copies]")
    if "paged" in args.allocators.split(","):
        for label, due in (("grow", False), ("grow_due", True)):
            best = min(time_blocks(args.seqs, args.steps, due) for _ in range(args.repeats))
            print(f"paged block path   {best * 1e6:6.3f} us per block with {label}")


if __name__ == "__main__":
    main()
