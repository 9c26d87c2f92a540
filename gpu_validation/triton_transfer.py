"""A transfer kernel: one launch copies a layer's K or V of many blocks between scattered slots of two caches,
either of which may be pinned host memory the GPU reads or writes directly.

SGLang's HiCache moves a load this way (``--hicache-io-backend kernel``: a kernel per layer, not a
``cudaMemcpyAsync`` per page), which is why kvsim charges `radix` one copy latency per load and layer and K/V
instead of one per block (`Allocator.reload_transfers`). Timing it (`host_transfer.per_layer`) checks that
charge. One program copies ``CHUNK`` 8-byte words of one block; the slot lists are device tensors, so a capture
replays the same copies.

Triton is imported lazily (`triton_paged.triton_available` says whether it can run here); under
``TRITON_INTERPRET=1`` it runs on CPU tensors, for the tests.
"""

from __future__ import annotations

from functools import lru_cache

import torch

CHUNK = 1024
"""8-byte words one program copies: 8 KiB."""


@lru_cache(maxsize=1)
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def copy_blocks(src_ptr, dst_ptr, src_slots_ptr, dst_slots_ptr, words, CHUNK: tl.constexpr):
        block = tl.program_id(0)
        chunk = tl.program_id(1)
        src = tl.load(src_slots_ptr + block).to(tl.int64) * words
        dst = tl.load(dst_slots_ptr + block).to(tl.int64) * words
        offs = chunk * CHUNK + tl.arange(0, CHUNK)
        ok = offs < words
        tl.store(dst_ptr + dst + offs, tl.load(src_ptr + src + offs, mask=ok), mask=ok)

    return copy_blocks


def copy_blocks(src: torch.Tensor, dst: torch.Tensor, src_slots: torch.Tensor, dst_slots: torch.Tensor) -> None:
    """``dst[dst_slots[i]] = src[src_slots[i]]`` for every i, in one launch. ``src`` and ``dst`` are contiguous
    ``(slots, bytes)`` uint8 views, a row a multiple of 8 bytes; the slot lists int32 tensors on the device
    that runs the kernel."""
    if src.shape[1] != dst.shape[1] or src.shape[1] % 8 or not (src.is_contiguous() and dst.is_contiguous()):
        raise ValueError(f"need contiguous caches with equal rows of a multiple of 8 bytes, got {tuple(src.shape)} "
                         f"and {tuple(dst.shape)}")
    import triton

    words = src.shape[1] // 8
    grid = (len(src_slots), triton.cdiv(words, CHUNK))
    _kernel()[grid](src.view(torch.int64), dst.view(torch.int64), src_slots, dst_slots, words, CHUNK=CHUNK)
