"""Paged attention with PyTorch FlexAttention: a block mask built from the same block tables.

An independent second kernel. The key and value tensors FlexAttention sees are the physical cache itself,
one "sequence" of ``num_slots`` positions per KV head (``[1, kv_heads, num_slots, head_dim]``, a view, no
copy), shared by every batch row. The block mask says, per batch row and query tile, which physical blocks
to visit: exactly the row's block table, in logical order, with a sparse KV block of one cache block. Blocks
that every query of the tile sees whole are passed as "full" blocks (no mask evaluated); the rest go through
``mask_mod``, which maps a physical slot back to its logical position with a per-row inverse table and
applies the causal and length limits. Cache blocks under 16 slots are too narrow for the compiled kernel's
tiles (matrix products need 16 columns), so there a sparse block spans ``16 / block_size`` neighbouring
cache blocks, any of which may belong to other sequences: all such blocks are partial and ``mask_mod``
drops the foreign slots. The cache must then hold a whole number of such spans.

Eager FlexAttention (the default here) evaluates ``mask_mod`` densely over all slots and ignores the block
indices; the compiled kernel (``compile=True``) uses the indices. On CPU, compiled decode is known to go
wrong once the cache reaches about 2,048 slots unless ``PARTITION_SIZE`` is not a multiple of the block
size, so `flex_paged_attention` picks such a partition size on CPU.
"""

from __future__ import annotations

import inspect
import warnings
from functools import lru_cache

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from gpu_validation.block_tables import PagedBatch, physical_to_logical
from gpu_validation.kv_cache import PagedKVCache

Q_TILE = 128
"""Queries per sparse-mask row tile (FlexAttention's default)."""
MIN_KV_BLOCK = 16
"""Fewest slots in one sparse KV block (the compiled kernels' smallest tile)."""


def build_block_mask(batch: PagedBatch, block_size: int, num_blocks: int, q_tile: int = Q_TILE) -> BlockMask:
    """The block-sparse mask of one paged batch (see the module docstring)."""
    device = batch.block_tables.device
    b, q_len = batch.batch_size, batch.q_len
    rows = -(-q_len // q_tile)
    width = batch.block_tables.shape[1]
    lens = batch.context_lens.long()
    logical = torch.arange(width, device=device)
    row = torch.arange(rows, device=device)
    first_q = lens[:, None] - q_len + row[None, :] * q_tile  # [b, rows]: position of each tile's first query
    last_q = torch.minimum(first_q + q_tile - 1, lens[:, None] - 1)
    # block j is needed by a tile if its first slot is visible to the tile's last query; full if its last
    # slot is visible to the tile's first query.
    needed = logical[None, None, :] * block_size <= last_q[:, :, None]  # [b, rows, width]
    full = (logical[None, None, :] + 1) * block_size - 1 <= first_q[:, :, None]
    partial = needed & ~full

    group = -(-MIN_KV_BLOCK // block_size)  # cache blocks per sparse block
    if num_blocks % group:
        raise ValueError(f"FlexAttention: sparse blocks of {group} x {block_size} slots need a cache whose "
                         f"{num_blocks} blocks are a multiple of {group}")
    width_out = num_blocks // group

    def indices(select: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        count = select.sum(-1).to(torch.int32)
        # stable sort moves selected logical blocks to the front, in order; then map them to physical ids
        order = torch.sort((~select).to(torch.int8), dim=-1, stable=True).indices
        physical = torch.gather(batch.block_tables.long()[:, None, :].expand(b, rows, width), 2, order)
        # compiled kernels want an index row able to name every block of the KV length
        padded = torch.zeros((b, 1, rows, width_out), dtype=torch.int32, device=device)
        padded[..., :width] = physical.to(torch.int32)[:, None]
        return count[:, None], padded

    if group == 1:
        kv_num, kv_idx = indices(partial)
        full_num, full_idx = indices(full)
    else:  # spans of neighbouring cache blocks: the distinct spans that hold a needed block, all partial
        spans = batch.block_tables.long() // group
        kv_num = torch.zeros((b, 1, rows), dtype=torch.int32, device=device)
        kv_idx = torch.zeros((b, 1, rows, width_out), dtype=torch.int32, device=device)
        for i in range(b):
            for r in range(rows):
                ids = torch.unique(spans[i][needed[i, r]])
                kv_num[i, 0, r] = ids.numel()
                kv_idx[i, 0, r, : ids.numel()] = ids.to(torch.int32)
        full_num = full_idx = None
    inverse = physical_to_logical(batch.block_tables, batch.context_lens, block_size, num_blocks)
    start = (batch.context_lens - q_len).to(torch.int32)

    def paged_causal(b_i, h_i, q_idx, kv_idx):
        logical_block = inverse[b_i, kv_idx // block_size]
        position = logical_block * block_size + kv_idx % block_size
        return (logical_block >= 0) & (position <= start[b_i] + q_idx)

    options = dict(BLOCK_SIZE=(q_tile, block_size * group), mask_mod=paged_causal,
                   seq_lengths=(q_len, num_blocks * block_size))
    if "compute_q_blocks" in inspect.signature(BlockMask.from_kv_blocks).parameters:
        options["compute_q_blocks"] = False  # forward only: the transposed (backward) indices are not needed
    return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, **options)


@lru_cache(maxsize=1)
def _compiled_flex():
    # every block size, dtype and shape is its own static graph; the checks visit a few dozen, more than
    # dynamo's default limit, past which it would silently fall back to the eager path
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 128))
    return torch.compile(flex_attention, dynamic=False)


def cpu_partition_size(block_size: int, base: int = 128) -> int:
    """A partition size near ``base`` that is not a multiple of ``block_size`` (the sparse KV block size;
    see module docstring)."""
    p = base
    while p % block_size == 0:
        p += 1
    return p


def flex_paged_attention(cache: PagedKVCache, batch: PagedBatch, layer: int = 0, *, compile: bool = False,
                         block_mask: BlockMask | None = None, scale: float | None = None) -> torch.Tensor:
    """Attention of ``batch.query`` over the paged cache; returns ``[batch, q_len, heads, head_dim]``."""
    key, value = cache.layer(layer)
    k = key.reshape(1, cache.num_kv_heads, cache.num_slots, cache.head_dim)
    v = value.reshape(1, cache.num_kv_heads, cache.num_slots, cache.head_dim)
    if block_mask is None:
        block_mask = build_block_mask(batch, cache.block_size, cache.num_blocks)
    q = batch.query.transpose(1, 2)
    fn = _compiled_flex() if compile else flex_attention
    options = None
    if compile and q.device.type == "cpu":
        options = {"PARTITION_SIZE": cpu_partition_size(block_mask.BLOCK_SIZE[1])}
    with warnings.catch_warnings():  # eager use is deliberate here: it is the CPU test path
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        out = fn(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1],
                 kernel_options=options)
    return out.transpose(1, 2)
