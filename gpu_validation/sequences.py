"""Sequences living in a paged KV cache, kept beside a dense copy of what each one should read.

`PagedSequences` is the bridge between kvsim's allocators and real tensors. When the `paged` or
`paged-cow` allocator admits, grows or forks a sequence, the new tokens' K and V are written at the slots
its block table gives, and the allocator's copy-on-write copies are applied to the tensor (block src -> dst)
before anything is written, as an engine must. Beside the cache it keeps each sequence's K and V in logical
order (the "shadow"): dense attention over the shadow is the ground truth every kernel must reproduce, so a
wrong block table, a missing copy or an overwritten shared block shows up as a wrong answer.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from allocators.base import Copy
from gpu_validation.block_tables import PagedBatch, pad_block_tables
from gpu_validation.kv_cache import PagedKVCache


class PagedSequences:
    """Sequences by integer id, their block tables, and their K/V in ``cache`` and in the shadow."""

    def __init__(self, cache: PagedKVCache, generator: torch.Generator, allocator: object | None = None) -> None:
        self.cache = cache
        self.generator = generator
        self.allocator = allocator
        self.tables: dict[int, list[int]] = {}
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}

    # --- writing tokens -------------------------------------------------------------------------------
    def _random_tokens(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (n, self.cache.num_kv_heads, self.cache.head_dim)
        k = torch.randn(shape, generator=self.generator).to(self.cache.device, self.cache.dtype)
        v = torch.randn(shape, generator=self.generator).to(self.cache.device, self.cache.dtype)
        return k, v

    def _append(self, seq_id: int, k: torch.Tensor, v: torch.Tensor) -> None:
        start = self.keys[seq_id].shape[0] if seq_id in self.keys else 0
        slots = self.cache.slot_mapping(self.tables[seq_id], start, start + k.shape[0])
        self.cache.write(slots, k, v)
        if seq_id in self.keys:
            self.keys[seq_id] = torch.cat([self.keys[seq_id], k])
            self.values[seq_id] = torch.cat([self.values[seq_id], v])
        else:
            self.keys[seq_id], self.values[seq_id] = k, v

    def place(self, seq_id: int, table: Sequence[int], num_tokens: int, *, prefix_of: int | None = None,
              prefix_tokens: int = 0) -> None:
        """Write a sequence at a given block table; its first ``prefix_tokens`` tokens equal ``prefix_of``'s
        (so blocks the tables share hold the same data for both)."""
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id} already exists")
        self.tables[seq_id] = list(table)
        k, v = self._random_tokens(num_tokens)
        if prefix_of is not None and prefix_tokens:
            k[:prefix_tokens] = self.keys[prefix_of][:prefix_tokens]
            v[:prefix_tokens] = self.values[prefix_of][:prefix_tokens]
        self._append(seq_id, k, v)

    # --- driven by a real allocator -------------------------------------------------------------------
    def _table_from_allocator(self, seq_id: int) -> None:
        self.tables[seq_id] = list(self.allocator.block_table(seq_id))

    def admit(self, seq_id: int, num_tokens: int, *, final_tokens: int | None = None) -> None:
        result = self.allocator.admit(seq_id, num_tokens, final_tokens=final_tokens or num_tokens)
        if result is None:
            raise RuntimeError(f"the allocator has no room to admit sequence {seq_id} ({num_tokens} tokens)")
        self.cache.copy_blocks(result.copies)
        self._table_from_allocator(seq_id)
        self._append(seq_id, *self._random_tokens(num_tokens))

    def grow(self, seq_id: int, num_tokens: int = 1) -> tuple[Copy, ...]:
        copies = self.allocator.grow(seq_id, num_tokens)
        if copies is None:
            raise RuntimeError(f"the allocator has no room to grow sequence {seq_id} by {num_tokens}")
        self.cache.copy_blocks(copies)
        self._table_from_allocator(seq_id)
        self._append(seq_id, *self._random_tokens(num_tokens))
        return tuple(copies)

    def fork(self, parent_id: int, child_id: int, *, final_tokens: int | None = None) -> tuple[Copy, ...]:
        n = self.keys[parent_id].shape[0]
        copies = self.allocator.fork(parent_id, child_id, final_tokens=final_tokens or n)
        if copies is None:
            raise RuntimeError(f"the allocator has no room to fork sequence {parent_id}")
        self.cache.copy_blocks(copies)
        self._table_from_allocator(child_id)
        self.keys[child_id] = self.keys[parent_id].clone()
        self.values[child_id] = self.values[parent_id].clone()
        return tuple(copies)

    def free(self, seq_id: int) -> None:
        if self.allocator is not None:
            self.allocator.free(seq_id)
        for store in (self.tables, self.keys, self.values):
            store.pop(seq_id)

    # --- reading --------------------------------------------------------------------------------------
    def batch(self, seq_ids: Sequence[int], q_len: int, num_heads: int) -> PagedBatch:
        """Random queries for the last ``q_len`` positions of each sequence, with the padded tables."""
        shape = (len(seq_ids), q_len, num_heads, self.cache.head_dim)
        query = torch.randn(shape, generator=self.generator).to(self.cache.device, self.cache.dtype)
        tables = pad_block_tables([self.tables[s] for s in seq_ids], self.cache.device)
        lens = torch.tensor([self.keys[s].shape[0] for s in seq_ids], dtype=torch.int32, device=self.cache.device)
        return PagedBatch(query, tables, lens)

    def dense_reference(self, batch: PagedBatch, seq_ids: Sequence[int]) -> torch.Tensor:
        """Ground truth: float64 causal attention over each sequence's shadow K/V, no paging involved."""
        out = torch.empty(batch.query.shape, dtype=torch.float64, device=batch.query.device)
        heads = batch.query.shape[2]
        scale = batch.query.shape[-1] ** -0.5
        for row, seq in enumerate(seq_ids):
            k = self.keys[seq].double()
            v = self.values[seq].double()
            group = heads // k.shape[1]
            k = k.repeat_interleave(group, dim=1).transpose(0, 1)  # [heads, n, d]
            v = v.repeat_interleave(group, dim=1).transpose(0, 1)
            q = batch.query[row].double().transpose(0, 1)  # [heads, q_len, d]
            n, q_len = k.shape[1], q.shape[1]
            scores = q @ k.transpose(1, 2) * scale
            q_pos = torch.arange(n - q_len, n, device=q.device)[:, None]
            scores = scores.masked_fill(torch.arange(n, device=q.device)[None, :] > q_pos, float("-inf"))
            out[row] = (torch.softmax(scores, dim=-1) @ v).transpose(0, 1)
        return out
