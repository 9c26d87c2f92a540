"""Reference paged attention: gather K/V through the block table, then PyTorch's SDPA with a length mask.

The simplest kernel that reads the paged layout: it materialises each sequence's K and V in logical order
(one indexing op over whole blocks), then calls `scaled_dot_product_attention` with a boolean mask that
keeps a query's own causal prefix and drops the stale tail of the last block. It runs anywhere torch runs
(CPU and GPU), handles decode (``q_len`` 1) and chunked prefill (queries at an offset), and grouped-query
attention (``enable_gqa``). The gather is the paging overhead in its crudest form: it writes and rereads
the whole context once more than a fused kernel, which is why the Triton kernel exists.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gpu_validation.block_tables import PagedBatch
from gpu_validation.kv_cache import PagedKVCache


def gather_kv(cache: PagedKVCache, batch: PagedBatch, layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sequence's K and V in logical order, ``[batch, kv_heads, max_len, head_dim]`` (tail unmasked)."""
    key, value = cache.layer(layer)
    bs = cache.block_size
    num_blocks = -(-batch.max_context_len // bs)
    tables = batch.block_tables[:, :num_blocks].long()  # [batch, num_blocks]
    b, h, d = tables.shape[0], cache.num_kv_heads, cache.head_dim
    k = key[:, tables].permute(1, 0, 2, 3, 4).reshape(b, h, num_blocks * bs, d)
    v = value[:, tables].permute(1, 0, 2, 3, 4).reshape(b, h, num_blocks * bs, d)
    return k, v


def attention_mask(batch: PagedBatch, kv_len: int) -> torch.Tensor:
    """``[batch, 1, q_len, kv_len]`` bool: True where query ``i`` may attend key position ``j``."""
    lens = batch.context_lens.long()
    q_pos = lens[:, None] - batch.q_len + torch.arange(batch.q_len, device=lens.device)[None, :]
    k_pos = torch.arange(kv_len, device=lens.device)
    return (k_pos[None, None, :] <= q_pos[:, :, None]).unsqueeze(1)


def paged_attention_reference(cache: PagedKVCache, batch: PagedBatch, layer: int = 0,
                              scale: float | None = None) -> torch.Tensor:
    """Attention of ``batch.query`` over the paged cache; returns ``[batch, q_len, heads, head_dim]``."""
    k, v = gather_kv(cache, batch, layer)
    mask = attention_mask(batch, k.shape[2])
    q = batch.query.transpose(1, 2)  # [batch, heads, q_len, d]
    group = q.shape[1] // k.shape[1]
    if group > 1 and q.device.type == "cuda":
        # CUDA's fused SDPA kernels take a mask but not grouped heads (with both, SDPA falls back to the
        # unfused math path): repeat the KV heads so a fused kernel runs
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    return out.transpose(1, 2)
