"""Block tables as kernels read them, and random ones that look like a busy allocator's.

Every kernel takes the same `PagedBatch`: queries, a padded ``[batch, max_blocks]`` int32 block table and the
context length of each sequence. Padding entries are block 0 (vLLM's null block, never handed out) and are
never read, because kernels stop at the context length.

`random_block_tables` imitates what an allocator that has run for a while produces: blocks handed out from a
shuffled free list (so a sequence's blocks are scattered, never in order), lengths that end part-way through
a block, and forked sequences that share their parent's full prefix blocks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch


@dataclass(frozen=True)
class PagedBatch:
    """One attention call: ``query`` ``[batch, q_len, heads, head_dim]``; the queries are the last ``q_len``
    positions of each sequence (decode: ``q_len`` 1; a prefill chunk: its tokens, already in the cache), so
    query ``i`` of sequence ``b`` sits at position ``context_lens[b] - q_len + i`` and attends causally."""

    query: torch.Tensor
    block_tables: torch.Tensor
    context_lens: torch.Tensor

    def __post_init__(self) -> None:
        if self.query.dim() != 4:
            raise ValueError(f"query must be [batch, q_len, heads, head_dim], got shape {tuple(self.query.shape)}")
        b = self.query.shape[0]
        if self.block_tables.shape[0] != b or self.context_lens.shape != (b,):
            raise ValueError("query, block_tables and context_lens disagree on the batch size")
        if bool((self.context_lens < self.query.shape[1]).any()):
            raise ValueError("every sequence must hold at least q_len tokens (the queries are cached too)")

    @property
    def batch_size(self) -> int:
        return self.query.shape[0]

    @property
    def q_len(self) -> int:
        return self.query.shape[1]

    @cached_property
    def max_context_len(self) -> int:
        # read once: reading a GPU tensor waits for the device, which a CUDA graph's capture forbids
        return int(self.context_lens.max())


def pad_block_tables(tables: Sequence[Sequence[int]], device: str | torch.device = "cpu") -> torch.Tensor:
    """A ``[len(tables), longest]`` int32 tensor, short rows padded with block 0."""
    width = max(1, max((len(t) for t in tables), default=1))
    out = np.zeros((len(tables), width), dtype=np.int32)
    for row, table in enumerate(tables):
        out[row, : len(table)] = table
    return torch.from_numpy(out).to(device)


def physical_to_logical(block_tables: torch.Tensor, context_lens: torch.Tensor, block_size: int,
                        num_blocks: int) -> torch.Tensor:
    """``[batch, num_blocks]``: the logical index of each physical block in each sequence, or -1.

    A block appears at most once in one sequence's table (shared blocks belong to several sequences, at
    most once each), so the inverse is well defined; it is what a kernel that walks physical slots (the
    FlexAttention mask) needs to recover token positions.
    """
    out = torch.full((block_tables.shape[0], num_blocks), -1, dtype=torch.int32, device=block_tables.device)
    for row in range(block_tables.shape[0]):
        used = -(-int(context_lens[row]) // block_size)
        ids = block_tables[row, :used].long()
        if ids.unique().numel() != used:
            raise ValueError(f"sequence {row}: its block table repeats a block: {ids.tolist()}")
        out[row, ids] = torch.arange(used, dtype=torch.int32, device=block_tables.device)
    return out


def random_block_tables(
    rng: np.random.Generator,
    lengths: Sequence[int],
    block_size: int,
    num_blocks: int,
    forks: Mapping[int, tuple[int, int]] | None = None,
) -> list[list[int]]:
    """Block tables for sequences of ``lengths`` tokens, blocks drawn from a shuffled free list.

    ``forks`` maps a sequence index to ``(parent index, shared tokens)``: the child reuses the parent's
    first ``shared_tokens // block_size`` blocks (full blocks only, as copy-on-write leaves them) and takes
    fresh blocks for the rest. A parent must come before its child. Block 0 is never handed out.
    """
    forks = dict(forks or {})
    free = [int(b) for b in rng.permutation(np.arange(1, num_blocks))]
    tables: list[list[int]] = []
    for i, length in enumerate(lengths):
        need = -(-int(length) // block_size)
        table: list[int] = []
        if i in forks:
            parent, shared = forks[i]
            if not 0 <= parent < i:
                raise ValueError(f"sequence {i}: its parent {parent} must come before it")
            shared_blocks = min(shared, lengths[parent], length) // block_size
            table = list(tables[parent][:shared_blocks])
        if need - len(table) > len(free):
            raise ValueError(f"{num_blocks} blocks are too few for sequences of {list(lengths)} tokens")
        while len(table) < need:
            table.append(free.pop())
        tables.append(table)
    return tables
