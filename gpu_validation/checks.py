"""Correctness checks shared by the tests and the GPU script: scenarios, kernels, and the error measure.

A scenario is a paged cache plus a batch plus the dense ground truth (`PagedSequences.dense_reference`),
built either from random block tables (shuffled free list, forks sharing prefix blocks, lengths that end
part-way through a block) or by driving kvsim's real `paged` / `paged-cow` allocator through admissions,
growth, forks with copy-on-write, and frees. Every kernel must match the ground truth to a relative error
(largest absolute error over the largest reference magnitude) of 1e-5 in fp32 and 2e-2 in bf16.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from gpu_validation.block_tables import PagedBatch, random_block_tables
from gpu_validation.flex_paged import flex_paged_attention
from gpu_validation.kv_cache import PagedKVCache
from gpu_validation.reference import paged_attention_reference
from gpu_validation.sequences import PagedSequences
from gpu_validation.triton_paged import triton_available, triton_paged_decode

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


@dataclass
class Scenario:
    name: str
    cache: PagedKVCache
    batch: PagedBatch
    expected: torch.Tensor  # float64, [batch, q_len, heads, head_dim]


def _name(tables: str, block_size: int, q_len: int) -> str:
    return f"{tables} bs={block_size} q_len={q_len}"


def _generators(seed: int) -> tuple[np.random.Generator, torch.Generator]:
    rng = np.random.default_rng(seed)
    return rng, torch.Generator().manual_seed(int(rng.integers(2**31)))


def random_scenario(*, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                    block_size: int = 16, q_len: int = 1, seed: int = 0, num_seqs: int = 6, num_heads: int = 8,
                    num_kv_heads: int = 2, head_dim: int = 64, max_len: int = 300, num_blocks: int | None = None
                    ) -> Scenario:
    """Random tables: scattered blocks, two forks sharing their parent's full prefix blocks. The cache has
    ``num_blocks`` blocks (at least what the sequences need plus spares)."""
    rng, gen = _generators(seed)
    lengths = [int(n) for n in rng.integers(q_len, max_len, size=num_seqs)]
    lengths[0] = max(q_len, (lengths[0] // block_size) * block_size + block_size // 2 + 1)  # mid-block end
    forks = {2: (1, int(rng.integers(0, lengths[1] + 1))), 4: (1, lengths[1])} if num_seqs > 4 else {}
    for child, (parent, _) in forks.items():  # a child holds at least the shared prefix
        lengths[child] = max(lengths[child], lengths[parent])
    need = sum(-(-n // block_size) for n in lengths) + 8  # + spares that stay stale
    num_blocks = max(need, num_blocks or 0)
    num_blocks += -num_blocks % 4  # whole 16-slot spans for FlexAttention at block sizes 4 and 8
    cache = PagedKVCache(num_blocks, block_size, num_kv_heads, head_dim, dtype=dtype, device=device, generator=gen)
    seqs = PagedSequences(cache, gen)
    tables = random_block_tables(rng, lengths, block_size, num_blocks, forks)
    for i, (table, n) in enumerate(zip(tables, lengths, strict=True)):
        parent, shared = forks.get(i, (None, 0))
        seqs.place(i, table, n, prefix_of=parent, prefix_tokens=(shared // block_size) * block_size)
    ids = list(range(num_seqs))
    batch = seqs.batch(ids, q_len, num_heads)
    return Scenario(_name("random", block_size, q_len), cache, batch, seqs.dense_reference(batch, ids))


def allocator_scenario(allocator: str = "paged-cow", *, device: str | torch.device = "cpu",
                       dtype: torch.dtype = torch.float32, block_size: int = 16, q_len: int = 1, seed: int = 0,
                       num_heads: int = 8, num_kv_heads: int = 2, head_dim: int = 64, num_blocks: int = 96
                       ) -> Scenario:
    """Drive a real kvsim allocator: admit, grow, fork (copy-on-write copies applied), free, reuse."""
    from allocators import make_allocator

    rng, gen = _generators(seed)
    alloc = make_allocator(allocator, num_blocks * block_size, block_size=block_size, max_model_len=4096)
    cache = PagedKVCache(alloc.num_blocks, block_size, num_kv_heads, head_dim, dtype=dtype, device=device,
                         generator=gen)
    seqs = PagedSequences(cache, gen, alloc)

    def odd_length(lo: int, hi: int) -> int:  # never a whole number of blocks
        n = int(rng.integers(lo, hi))
        return n + 1 if n % block_size == 0 else n

    for seq in range(4):
        seqs.admit(seq, odd_length(max(q_len, 5), 120))
    seqs.grow(0, odd_length(1, 40))
    seqs.fork(1, 10)  # shares a partly filled last block under copy-on-write
    seqs.fork(1, 11)
    seqs.grow(10, 5)  # writes into the shared block: copied first
    seqs.grow(1, 3)  # still shared with 11: copied too
    seqs.free(2)  # its blocks go back to the free list, stale data and all
    seqs.admit(4, odd_length(max(q_len, 30), 150))  # reuses freed blocks
    seqs.grow(11, block_size + 3)  # crosses a block boundary after a copy
    for seq in (0, 3, 4):
        seqs.grow(seq, 1)
    alloc.check_invariants()
    ids = sorted(seqs.tables)
    batch = seqs.batch(ids, q_len, num_heads)
    return Scenario(_name(allocator, block_size, q_len), cache, batch, seqs.dense_reference(batch, ids))


def _triton(scenario: Scenario, num_splits: int | None = None) -> torch.Tensor:
    q = scenario.batch.query
    out = torch.full((q.shape[0], q.shape[2], q.shape[3]), float("nan"), dtype=q.dtype, device=q.device)
    return triton_paged_decode(scenario.cache, scenario.batch, num_splits=num_splits, block_n=32, out=out)


KERNELS: dict[str, Callable[[Scenario], torch.Tensor]] = {
    "reference": lambda s: paged_attention_reference(s.cache, s.batch),
    "flex": lambda s: flex_paged_attention(s.cache, s.batch),
    "flex-compiled": lambda s: flex_paged_attention(s.cache, s.batch, compile=True),
    "triton": _triton,
    "triton-split": lambda s: _triton(s, num_splits=3),
}
"""Each kernel as a function of a scenario; triton variants take decode scenarios only."""


def relative_error(out: torch.Tensor, expected: torch.Tensor) -> float:
    """max |out - expected| / max |expected|; NaN anywhere in ``out`` gives infinity."""
    out = out.double()
    if not torch.isfinite(out).all():
        return float("inf")
    return float((out - expected).abs().max() / expected.abs().max())


def available_kernels(device: torch.device, *, compile_flex: bool) -> list[str]:
    names = ["reference", "flex"]
    if compile_flex:
        names.append("flex-compiled")
    if triton_available(device):
        names += ["triton", "triton-split"]
    return names


def run_checks(device: str | torch.device, *, dtypes=(torch.float32, torch.bfloat16), block_sizes=(8, 16, 32),
               kernels: list[str] | None = None, compile_flex: bool = False, seed: int = 0,
               progress: Callable[[str], None] | None = None, deadline: float | None = None) -> pd.DataFrame:
    """Every kernel on every scenario; one row per (kernel, scenario, dtype) with the error and verdict.

    A scenario that cannot be built fails the check of each of its kernels, with the reason in ``note``.
    ``deadline`` (a `time.monotonic` value) is a time budget: scenarios not started by then are skipped, and
    ``frame.attrs["skipped"]`` counts their (kernel, scenario, dtype) checks. Each scenario runs in every
    dtype before the next one starts, so that a run cut short still covers every dtype.
    """
    device = torch.device(device)
    kernels = kernels or available_kernels(device, compile_flex=compile_flex)
    # (scenario builder, its options): random tables and both real allocators. Every scenario of one block
    # size gets a cache of the same size and batch (6 sequences), so compiled FlexAttention compiles once
    # per block size, dtype and query length rather than once per scenario.
    cases = []
    for bs in block_sizes:
        blocks = 4096 // bs
        cases.append((random_scenario, {"block_size": bs, "seed": seed, "num_blocks": blocks}))
        cases.append((allocator_scenario, {"allocator": "paged-cow", "block_size": bs, "seed": seed + 1,
                                           "num_blocks": blocks}))
    bs = block_sizes[0]
    cases.append((allocator_scenario, {"allocator": "paged", "block_size": bs, "seed": seed + 2,
                                       "num_blocks": 4096 // bs}))
    rows, skipped = [], 0
    for build, options in cases:
        for dtype in dtypes:
            for q_len in (1, 7):
                names = [name for name in kernels if q_len == 1 or not name.startswith("triton")]
                if deadline is not None and time.monotonic() > deadline:
                    skipped += len(names)
                    continue
                try:
                    scenario, failure = build(device=device, dtype=dtype, q_len=q_len, **options), ""
                    label = scenario.name
                except Exception as exc:  # reported as failed checks, and the other scenarios still run
                    scenario, failure = None, f"building the scenario failed: {type(exc).__name__}: {exc}"[:200]
                    label = _name(options.get("allocator", "random"), options["block_size"], q_len)
                for name in names:
                    err, note = float("inf"), failure
                    if scenario is not None:
                        try:
                            err = relative_error(KERNELS[name](scenario), scenario.expected)
                        except Exception as exc:  # a kernel that fails to run is a failed check, reported
                            note = f"{type(exc).__name__}: {exc}"[:200]
                    tol = TOLERANCE[dtype]
                    rows.append({"kernel": name, "scenario": label, "dtype": str(dtype)[6:],
                                 "rel_error": err, "tolerance": tol, "passed": err <= tol, "note": note})
                    if progress:
                        progress(f"{name:14s} {label:28s} {str(dtype)[6:]:8s} {err:.2e} {note}".rstrip())
    if skipped and progress:
        progress(f"time budget spent: {skipped} checks skipped")
    frame = pd.DataFrame(rows, columns=["kernel", "scenario", "dtype", "rel_error", "tolerance", "passed", "note"])
    frame.attrs["skipped"] = skipped
    return frame
