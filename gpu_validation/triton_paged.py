"""kvsim's own Triton paged-attention decode kernel, reading the block table directly.

One program per (sequence, KV head, context split). The query heads that share the KV head (a GQA group)
are the rows of one tile, so each K/V token is loaded once for the whole group. The program walks its part
of the context a tile of ``BLOCK_N`` tokens at a time; for each tile it looks up the physical block of
every token in the block table (``table[t // block_size]``) and loads K and V from
``block * block_stride + (t % block_size) * token_stride``, which works for any block size, including ones
smaller than the tile. Softmax is online (running max and sum, in fp32, base 2), so nothing of the length
of the context is ever materialised.

When sequences are few, ``batch x kv_heads`` programs cannot fill the GPU; the context is then split into
``num_splits`` ranges (split-K), each program writes an unnormalised partial result with its running max
and sum, and a second small kernel combines them. Splits that fall past a short sequence's end write an
empty partial (sum 0) that the combine step ignores.

Triton is imported lazily: the module imports without it, and `triton_available()` says whether the
kernel can run (a CUDA GPU, or ``TRITON_INTERPRET=1`` on CPU).
"""

from __future__ import annotations

import math
import os
from functools import lru_cache

import torch

from gpu_validation.block_tables import PagedBatch
from gpu_validation.kv_cache import PagedKVCache

LOG2E = 1.4426950408889634


def triton_available(device: str | torch.device | None = None) -> bool:
    """Whether triton is importable and can run the kernel on tensors of ``device`` (any device when None):
    compiled for a CUDA device, or anywhere under the interpreter (``TRITON_INTERPRET=1``)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    return torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda")


@lru_cache(maxsize=1)
def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def decode_kernel(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr, part_acc_ptr, part_ml_ptr, qk_scale,
                      stride_qb, stride_qh, stride_kh, stride_kb, stride_kt, stride_table, stride_ob, stride_oh,
                      tiles_per_split,
                      GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                      HEAD_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
                      NUM_SPLITS: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr):
        seq = tl.program_id(0)
        kv_head = tl.program_id(1)
        split = tl.program_id(2)
        rows = tl.arange(0, GROUP_PAD)
        dims = tl.arange(0, HEAD_PAD)
        row_ok = rows < GROUP
        dim_ok = dims < HEAD_DIM
        heads = kv_head * GROUP + rows

        q_offs = seq.to(tl.int64) * stride_qb + heads[:, None] * stride_qh + dims[None, :]
        q = tl.load(q_ptr + q_offs, mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
        if UPCAST:
            q = q.to(tl.float32)

        ctx = tl.load(lens_ptr + seq)
        start = split * tiles_per_split * BLOCK_N
        end = tl.minimum(start + tiles_per_split * BLOCK_N, ctx)
        m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
        acc = tl.zeros([GROUP_PAD, HEAD_PAD], dtype=tl.float32)
        head_base = kv_head.to(tl.int64) * stride_kh
        for tile_start in range(start, end, BLOCK_N):
            tokens = tile_start + tl.arange(0, BLOCK_N)
            tok_ok = tokens < end
            blocks = tl.load(table_ptr + seq.to(tl.int64) * stride_table + tokens // BLOCK_SIZE,
                             mask=tok_ok, other=0).to(tl.int64)
            tok_offs = head_base + blocks * stride_kb + (tokens % BLOCK_SIZE) * stride_kt
            kv_mask = tok_ok[:, None] & dim_ok[None, :]
            k = tl.load(k_ptr + tok_offs[:, None] + dims[None, :], mask=kv_mask, other=0.0)
            v = tl.load(v_ptr + tok_offs[:, None] + dims[None, :], mask=kv_mask, other=0.0)
            if UPCAST:
                k = k.to(tl.float32)
                v = v.to(tl.float32)
            s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # [GROUP_PAD, BLOCK_N]
            s = tl.where(tok_ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))  # finite: every tile holds at least one live token
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
            m_i = m_new

        out_mask = row_ok[:, None] & dim_ok[None, :]
        if NUM_SPLITS == 1:
            out = acc / l_i[:, None]
            o_offs = seq.to(tl.int64) * stride_ob + heads[:, None] * stride_oh + dims[None, :]
            tl.store(out_ptr + o_offs, out.to(out_ptr.dtype.element_ty), mask=out_mask)
        else:
            # partials laid out [batch, heads, splits, HEAD_PAD] and [batch, heads, splits, 2] (max, sum)
            part = (seq.to(tl.int64) * GROUP * tl.num_programs(1) + heads) * NUM_SPLITS + split
            tl.store(part_acc_ptr + part[:, None] * HEAD_PAD + dims[None, :], acc, mask=row_ok[:, None])
            tl.store(part_ml_ptr + part * 2, m_i, mask=row_ok)
            tl.store(part_ml_ptr + part * 2 + 1, l_i, mask=row_ok)

    @triton.jit
    def combine_kernel(part_acc_ptr, part_ml_ptr, out_ptr, stride_ob, stride_oh, num_heads,
                       HEAD_DIM: tl.constexpr, HEAD_PAD: tl.constexpr, NUM_SPLITS: tl.constexpr,
                       SPLITS_PAD: tl.constexpr):
        seq = tl.program_id(0)
        head = tl.program_id(1)
        splits = tl.arange(0, SPLITS_PAD)
        dims = tl.arange(0, HEAD_PAD)
        split_ok = splits < NUM_SPLITS
        part = (seq.to(tl.int64) * num_heads + head) * NUM_SPLITS + splits
        m = tl.load(part_ml_ptr + part * 2, mask=split_ok, other=float("-inf"))
        s = tl.load(part_ml_ptr + part * 2 + 1, mask=split_ok, other=0.0)
        live = s > 0.0
        m_all = tl.max(tl.where(live, m, float("-inf")), 0)
        w = tl.where(live, tl.exp2(m - m_all), 0.0)
        acc = tl.load(part_acc_ptr + part[:, None] * HEAD_PAD + dims[None, :],
                      mask=live[:, None], other=0.0)
        out = tl.sum(acc * w[:, None], 0) / tl.sum(s * w, 0)
        o_offs = seq.to(tl.int64) * stride_ob + head * stride_oh + dims
        tl.store(out_ptr + o_offs, out.to(out_ptr.dtype.element_ty), mask=dims < HEAD_DIM)

    return decode_kernel, combine_kernel


def choose_num_splits(device: torch.device, batch_size: int, num_kv_heads: int, max_context_len: int,
                      block_n: int) -> int:
    """Enough context splits for about two programs per streaming multiprocessor of ``device`` (on CPU, under
    the interpreter: 1, or 2 past four tiles so that the split path runs too)."""
    if device.type != "cuda":
        return 1 if max_context_len <= 4 * block_n else 2
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    programs = batch_size * num_kv_heads
    if programs >= sms:
        return 1
    tiles = -(-max_context_len // block_n)
    return max(1, min(-(-2 * sms // programs), tiles, 64))


def triton_paged_decode(cache: PagedKVCache, batch: PagedBatch, layer: int = 0, *, num_splits: int | None = None,
                        block_n: int = 64, scale: float | None = None, out: torch.Tensor | None = None
                        ) -> torch.Tensor:
    """Decode attention (``q_len`` 1) over the paged cache; returns ``[batch, 1, heads, head_dim]``.

    ``out`` (``[batch, heads, head_dim]``, contiguous) is written in place when given: tests pass one filled
    with NaN so that any row the kernel fails to write is caught. Split partials start as NaN for the same
    reason (the combine step reads only the splits that hold tokens).
    """
    if batch.q_len != 1:
        raise ValueError(f"the Triton kernel is decode-only (q_len 1), got q_len {batch.q_len}")
    head_dim = batch.query.shape[-1]
    decode_kernel, combine_kernel = _kernels()
    key, value = cache.layer(layer)
    q = batch.query[:, 0].contiguous()  # [batch, heads, d]
    b, heads = q.shape[0], q.shape[1]
    group = heads // cache.num_kv_heads
    if group * cache.num_kv_heads != heads:
        raise ValueError(f"{heads} query heads are not a multiple of {cache.num_kv_heads} KV heads")
    head_pad = max(16, 1 << (head_dim - 1).bit_length())
    group_pad = max(16, 1 << (group - 1).bit_length())
    splits = num_splits or choose_num_splits(q.device, b, cache.num_kv_heads, batch.max_context_len, block_n)
    tiles = -(-batch.max_context_len // block_n)
    tiles_per_split = -(-tiles // splits)
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or not out.is_contiguous() or out.dtype != q.dtype:
        raise ValueError(f"out must be a contiguous {q.dtype} tensor of shape {tuple(q.shape)}")
    if splits > 1:
        nan = float("nan")
        part_acc = torch.full((b, heads, splits, head_pad), nan, dtype=torch.float32, device=q.device)
        part_ml = torch.full((b, heads, splits, 2), nan, dtype=torch.float32, device=q.device)
    else:
        part_acc = part_ml = out  # unused by the single-split path
    # The interpreter multiplies 16-bit floats wrongly in tl.dot (it reads their bits as integers), so
    # there, and only there, tiles are upcast to fp32 first; on a GPU bf16 tiles go to the tensor cores.
    upcast = os.environ.get("TRITON_INTERPRET") == "1" and q.dtype != torch.float32
    precision = "ieee" if q.dtype == torch.float32 or upcast else "tf32"
    table = batch.block_tables.contiguous()
    qk_scale = (scale if scale is not None else 1.0 / math.sqrt(head_dim)) * LOG2E
    decode_kernel[(b, cache.num_kv_heads, splits)](
        q, key, value, table, batch.context_lens, out, part_acc, part_ml, qk_scale,
        q.stride(0), q.stride(1), key.stride(0), key.stride(1), key.stride(2), table.stride(0),
        out.stride(0), out.stride(1), tiles_per_split,
        GROUP=group, GROUP_PAD=group_pad, HEAD_DIM=head_dim, HEAD_PAD=head_pad, BLOCK_SIZE=cache.block_size,
        BLOCK_N=block_n, NUM_SPLITS=splits, DOT_PRECISION=precision, UPCAST=upcast,
    )
    if splits > 1:
        combine_kernel[(b, heads)](
            part_acc, part_ml, out, out.stride(0), out.stride(1), heads,
            HEAD_DIM=head_dim, HEAD_PAD=head_pad, NUM_SPLITS=splits, SPLITS_PAD=max(2, 1 << (splits - 1).bit_length()),
        )
    return out[:, None]
