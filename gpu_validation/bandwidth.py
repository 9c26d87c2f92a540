"""Achieved bandwidth of the paged decode kernels at one large point, against a plain device copy.

Decode attention is memory-bound: each step streams every context token's K and V once. So the honest
score for a decode kernel is bytes of K/V read per second, and the honest ceiling is what the device does
copying memory (read and write counted). At 64 sequences x 4,096 tokens of Llama-3-8B (8 KV heads of 128)
in bf16, one layer reads 1 GiB of K/V.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from allocators.catalog import ModelSpec
from gpu_validation.flex_paged import build_block_mask, flex_paged_attention
from gpu_validation.harness import timing_batch
from gpu_validation.reference import paged_attention_reference
from gpu_validation.timing import Timer
from gpu_validation.triton_paged import triton_available, triton_paged_decode


def decode_bandwidth(model: ModelSpec, *, device: str | torch.device, dtype: torch.dtype, batch_size: int,
                     context_len: int, block_size: int, timer: Timer, copy_bytes_s: float,
                     compile_flex: bool, seed: int = 0, deadline: float | None = None) -> pd.DataFrame:
    """One row per kernel that can run here: seconds per layer, K/V bytes read, bandwidth, share of copy.

    A kernel that fails, or is not started before ``deadline`` (a `time.monotonic` value), gets NaN seconds
    and the reason in ``error``; the others are still timed.
    """
    device = torch.device(device)
    cache, batch = timing_batch(model, [context_len] * batch_size, 1, block_size, device=device, dtype=dtype,
                                rng=np.random.default_rng(seed), generator=torch.Generator().manual_seed(seed))
    kernels = {"reference": lambda: paged_attention_reference(cache, batch)}
    mask = build_block_mask(batch, block_size, cache.num_blocks)  # built once, as an engine would per step
    flex_name = "flex-compiled" if compile_flex else "flex"
    kernels[flex_name] = lambda: flex_paged_attention(cache, batch, compile=compile_flex, block_mask=mask)
    if triton_available(device):
        kernels["triton"] = lambda: triton_paged_decode(cache, batch)
    kv_bytes = 2 * batch_size * context_len * model.num_kv_heads * model.head_dim * cache.key.element_size()
    rows = []
    for name, fn in kernels.items():
        if deadline is not None and time.monotonic() > deadline:
            seconds, error = float("nan"), "time budget spent"
        else:
            try:
                seconds, error = timer(fn), ""
            except Exception as exc:  # one kernel failing must not hide the others' numbers
                seconds, error = float("nan"), f"{type(exc).__name__}: {exc}"[:200]
        rows.append({"kernel": name, "batch_size": batch_size, "context_len": context_len,
                     "block_size": block_size, "dtype": str(dtype).removeprefix("torch."), "seconds": seconds,
                     "kv_bytes": kv_bytes, "bandwidth_gb_s": kv_bytes / seconds / 1e9,
                     "copy_gb_s": copy_bytes_s / 1e9, "share_of_copy": kv_bytes / seconds / copy_bytes_s,
                     "error": error})
    return pd.DataFrame(rows)
