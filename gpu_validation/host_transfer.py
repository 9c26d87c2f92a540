"""KV moved between GPU and host memory, timed on this machine: what swaps and host-tier loads really cost.

kvsim charges KV that crosses between GPU and host memory (a swap under ``--preemption swap``, a host-tier load
under ``--cpu-offload-gib``) its bytes over the catalog GPU's ``pcie_gb_s`` plus ``swap_copy_latency_s`` for each
copy call, since vLLM's ``swap_blocks`` issues one ``cudaMemcpyAsync`` per block for each layer's K and V. The
first is a data sheet's peak and the second an estimate; this measures both, host memory pinned as engines pin it:

- ``contiguous``: one copy each way of growing size, from one block's K in one layer (32 KiB for Llama-3-8B at
  block 16) to 256 MiB. Fitting ``latency + bytes / bandwidth`` to them gives the link's per-call latency and
  bandwidth.
- ``per-block``: vLLM's pattern: ``blocks`` blocks, each copied with one call per layer and K/V between
  scattered slots of a layer-major cache, timed three ways: ``eager``, launched one call at a time from Python
  (torch's Python dispatch adds microseconds that vLLM's C++ loop does not); ``foreach``, every copy launched by
  one ``torch._foreach_copy_`` (a C++ loop over the copies, as vLLM's ``swap_blocks`` is, with torch's C++
  dispatch per copy); and ``cuda-graph``, the copies replayed from one captured graph (no launch cost at all, the
  floor). An engine's per-call cost lies at or above the floor, about where its C++ loop puts it.
- ``per-layer``: SGLang HiCache's pattern (on a GPU with Triton): the same blocks moved by one transfer kernel
  launch per layer and K/V (`triton_transfer.copy_blocks`), the GPU reading or writing the pinned host memory
  itself; a row's ``copies`` are the launches and ``bytes_per_copy`` a launch's bytes. kvsim charges `radix` a
  load this way: one copy latency per layer and K/V, however many blocks.

On CPU (no GPU, CI) the same code copies between two host buffers at small sizes: a check of the code, not a
measurement of any link.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from gpu_validation import catalog_model, positive_int, refuse_without_torch

try:
    import torch
except ImportError as exc:  # torch is the optional "gpu" extra
    if __name__ == "__main__":
        refuse_without_torch("python -m gpu_validation.host_transfer", exc)
    raise

from allocators.catalog import ModelSpec
from gpu_validation.fit import fit_link
from gpu_validation.timing import GraphCaptureError, Timer, captured, device_of
from gpu_validation.triton_paged import triton_available
from gpu_validation.triton_transfer import copy_blocks

SIZES = {"cuda": tuple(2**k for k in range(15, 29, 2)) + (2**28,), "cpu": (2**12, 2**14, 2**16)}
"""Contiguous copy sizes in bytes by device type: 32 KiB to 256 MiB on a GPU."""
BLOCK_COUNTS = {"cuda": (1, 16, 64), "cpu": (1, 4)}
"""Blocks per per-block transfer (each ``2 x num_layers`` copies) by device type."""
HOST_BLOCKS = {"cuda": 512, "cpu": 16}
"""Block slots per layer and K/V in the per-block caches (on a GPU, 1 GiB each way for Llama-3-8B)."""
DIRECTIONS = ("host-to-device", "device-to-host")


def _host(shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """A host buffer, pinned when there is a GPU to copy it to (pinned memory needs CUDA)."""
    return torch.ones(shape, dtype=torch.uint8, pin_memory=device.type == "cuda")


def _row(pattern: str, direction: str, timing: str, copies: int, bytes_per_copy: int, seconds: float,
         error: str = "") -> dict:
    nbytes = copies * bytes_per_copy
    return {"pattern": pattern, "direction": direction, "timing": timing, "copies": copies,
            "bytes_per_copy": bytes_per_copy, "bytes": nbytes, "seconds": seconds,
            "gb_s": nbytes / seconds / 1e9, "seconds_per_copy": seconds / copies, "error": error}


def _pair(direction: str, host: torch.Tensor, dev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(destination, source) for a direction."""
    return (dev, host) if direction == "host-to-device" else (host, dev)


def contiguous(device: torch.device, timer: Timer, sizes: tuple[int, ...]) -> list[dict]:
    """One copy per size and direction: the link's latency and bandwidth."""
    host, dev = _host((max(sizes),), device), torch.empty(max(sizes), dtype=torch.uint8, device=device)
    rows = []
    for direction in DIRECTIONS:
        for size in sizes:
            dst, src = (t[:size] for t in _pair(direction, host, dev))
            seconds = timer(lambda dst=dst, src=src: dst.copy_(src, non_blocking=True))
            rows.append(_row("contiguous", direction, "eager", 1, size, seconds))
    return rows


def per_block(model: ModelSpec, device: torch.device, timer: Timer, block_size: int, dtype_bytes: int,
              block_counts: tuple[int, ...], host_blocks: int, rng: np.random.Generator) -> list[dict]:
    """vLLM's swap pattern: a call per block, layer and K/V between scattered slots, launched from Python, from
    one C++ loop, and as a graph; with Triton on a GPU, HiCache's kernel a layer for the same blocks too."""
    block_bytes = block_size * model.num_kv_heads * model.head_dim * dtype_bytes  # one layer's K (or V) of a block
    shape = (model.num_layers, 2, host_blocks, block_bytes)
    host, dev = _host(shape, device), torch.empty(shape, dtype=torch.uint8, device=device)
    kernel = device.type == "cuda" and triton_available(device)
    rows = []
    for direction in DIRECTIONS:
        for n in block_counts:
            src_slots, dst_slots = rng.permutation(host_blocks)[:n], rng.permutation(host_blocks)[:n]
            dst_cache, src_cache = _pair(direction, host, dev)
            if kernel:
                rows += per_layer(direction, dst_cache, src_cache, src_slots, dst_slots, timer)
            # the views are made once, as an engine resolves its block addresses before copying
            pairs = list(zip(src_slots.tolist(), dst_slots.tolist(), strict=True))
            views = [(dst_cache[layer, kv, d], src_cache[layer, kv, s])
                     for layer in range(model.num_layers) for kv in (0, 1) for s, d in pairs]

            def copy_all(views=views) -> None:
                for dst, src in views:
                    dst.copy_(src, non_blocking=True)

            rows.append(_row("per-block", direction, "eager", len(views), block_bytes, timer(copy_all)))
            dsts, srcs = [d for d, _ in views], [s for _, s in views]
            rows.append(_row("per-block", direction, "foreach", len(views), block_bytes,
                             timer(lambda dsts=dsts, srcs=srcs: torch._foreach_copy_(dsts, srcs, non_blocking=True))))
            if device.type == "cuda":
                rows.append(_graph_row("per-block", direction, copy_all, len(views), block_bytes, timer))
    return rows


def per_layer(direction: str, dst_cache: torch.Tensor, src_cache: torch.Tensor, src_slots: np.ndarray,
              dst_slots: np.ndarray, timer: Timer) -> list[dict]:
    """HiCache's pattern: a transfer kernel launch per layer and K/V moving all the blocks, eager and as a graph;
    the copied bytes are checked once. A kernel that cannot run (Triton refusing a host pointer, say) gives NaN
    rows with the reason."""
    layers, _, _, block_bytes = dst_cache.shape
    device = dst_cache.device if dst_cache.is_cuda else src_cache.device
    slots = [torch.as_tensor(x, dtype=torch.int32, device=device) for x in (src_slots, dst_slots)]
    planes = [(src_cache[layer, kv], dst_cache[layer, kv]) for layer in range(layers) for kv in (0, 1)]

    def copy_all() -> None:
        for src, dst in planes:
            copy_blocks(src, dst, *slots)

    launches, load_bytes = len(planes), len(src_slots) * block_bytes
    timings = ("eager", "cuda-graph") if device.type == "cuda" else ("eager",)
    try:
        src_cache[-1, 1, int(src_slots[-1])].fill_(7)
        copy_all()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if not bool((dst_cache[-1, 1, int(dst_slots[-1])] == 7).all()):
            raise RuntimeError("the kernel copied the wrong bytes")
        rows = [_row("per-layer", direction, "eager", launches, load_bytes, timer(copy_all))]
    except Exception as exc:  # one pattern failing must not hide the others' numbers
        error = f"{type(exc).__name__}: {exc}"[:200]
        return [_row("per-layer", direction, t, launches, load_bytes, float("nan"), error) for t in timings]
    if device.type == "cuda":
        rows.append(_graph_row("per-layer", direction, copy_all, launches, load_bytes, timer))
    return rows


def _graph_row(pattern: str, direction: str, copy_all: Callable[[], None], copies: int, bytes_per_copy: int,
               timer: Timer) -> dict:
    """The same copies replayed from one captured graph; NaN with the reason if they cannot be captured."""
    try:
        replay = captured(copy_all)
    except GraphCaptureError as exc:
        return _row(pattern, direction, "cuda-graph", copies, bytes_per_copy, float("nan"), str(exc)[:200])
    return _row(pattern, direction, "cuda-graph", copies, bytes_per_copy, timer(replay))


def default_timer(device: str | torch.device) -> Timer:
    """The repeats the transfers are timed with: a GPU's copies are short and steady, a CPU's only a code check."""
    if torch.device(device).type == "cuda":
        return Timer(device, warmup=2, repeats=7)
    return Timer(device, warmup=1, repeats=2)


def host_transfers(model: ModelSpec, *, device: str | torch.device, timer: Timer, block_size: int = 16,
                   dtype_bytes: int = 2, seed: int = 0,
                   progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Every contiguous and per-block transfer row (`_row`'s columns, and the ``model`` and ``block_size`` whose
    blocks were copied) on ``device``."""
    device = torch.device(device)
    kind = device.type if device.type in SIZES else "cuda"
    rows = contiguous(device, timer, SIZES[kind])
    if progress:
        progress(f"host transfers: {len(rows)} contiguous copies timed")
    rows += per_block(model, device, timer, block_size, dtype_bytes, BLOCK_COUNTS[kind], HOST_BLOCKS[kind],
                      np.random.default_rng(seed))
    if progress:
        progress(f"host transfers: {len(rows)} rows timed")
    return pd.DataFrame(rows).assign(model=model.name, block_size=block_size)


def describe(rows: pd.DataFrame) -> list[str]:
    """Lines for a summary: the fitted link each way, and the per-call cost of the largest per-block transfer and
    of the largest per-layer load."""
    lines = []
    for r in fit_link(rows).itertuples():
        lines.append(f"  {r.direction:15s} " + (
            f"link {r.gb_s:6.1f} GB/s (largest copy {r.largest_copy_gb_s:.1f}), latency {r.latency_s * 1e6:5.1f} us "
            "per call" if math.isfinite(r.gb_s) else
            f"link not fitted: copy times do not grow with their size (largest copy {r.largest_copy_gb_s:.1f} GB/s)"))
    for pattern, unit in (("per-block", "call"), ("per-layer", "launch")):  # the largest transfer of each
        for (direction, timing), group in rows[rows.pattern == pattern].groupby(["direction", "timing"], sort=False):
            largest = group.sort_values("bytes").iloc[-1]
            lines.append(f"  {direction:15s} {pattern.replace('-', ' ')}, {timing:10s} " + (
                f"{largest.seconds_per_copy * 1e6:5.2f} us per {largest.bytes_per_copy // 1024} KiB {unit} "
                f"({largest.copies} {unit}s, {largest.gb_s:.1f} GB/s)" if not largest.error
                else f"not timed: {largest.error}"))
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m gpu_validation.host_transfer OUT.csv [--model llama-3-8b] [--block-size 16]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gpu_validation.host_transfer",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--model", type=catalog_model, default="llama-3-8b",
                        help="catalog model whose block shape is copied")
    parser.add_argument("--block-size", type=positive_int, default=16)
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None)
    args = parser.parse_args(argv)
    device = device_of(parser, args.device)
    start = time.monotonic()
    rows = host_transfers(args.model, device=device, timer=default_timer(device),
                          block_size=args.block_size,
                          progress=lambda line: print(f"[{time.monotonic() - start:6.1f}s] {line}", flush=True))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows.to_csv(args.out, index=False, float_format="%.6g")
    print("\n".join([f"host transfers ({args.model.name}, block {args.block_size}):", *describe(rows), f"wrote {args.out}"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
