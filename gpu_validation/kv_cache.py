"""The paged KV cache tensor: one physical layout that every kernel in this package reads.

Per layer, K and V are each ``[kv_heads, num_blocks, block_size, head_dim]``. Why this order: a KV head's
whole pool is one contiguous ``[num_slots, head_dim]`` plane, so FlexAttention can view it as a key tensor of
``num_slots`` positions without a copy, the Triton kernel addresses a token as ``block * stride + offset``,
and the reference gathers whole blocks with one index. A token lives at slot
``block_id * block_size + offset``; the allocator's block table decides the block ids.

Slots nobody wrote hold stale random values rather than zeros or NaN: a kernel that reads past a sequence's
length then gives a wrong (detectably) answer, while masked-out reads that are multiplied by zero stay
harmless, as they are on real hardware with recycled memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from allocators.base import Copy


class PagedKVCache:
    """K and V for ``num_layers`` layers over ``num_blocks`` blocks of ``block_size`` token slots."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        *,
        num_layers: int = 1,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        generator: torch.Generator | None = None,
    ) -> None:
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size),
                            ("num_kv_heads", num_kv_heads), ("head_dim", head_dim), ("num_layers", num_layers)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        shape = (num_layers, num_kv_heads, num_blocks, block_size, head_dim)
        if generator is None:  # timing: contents do not matter, and filling GBs at random is slow
            self.key = torch.zeros(shape, dtype=dtype, device=device)
            self.value = torch.zeros(shape, dtype=dtype, device=device)
        else:
            self.key = torch.randn(shape, generator=generator, dtype=torch.float32).to(device, dtype)
            self.value = torch.randn(shape, generator=generator, dtype=torch.float32).to(device, dtype)

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def device(self) -> torch.device:
        return self.key.device

    @property
    def dtype(self) -> torch.dtype:
        return self.key.dtype

    def layer(self, layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of one layer, each ``[kv_heads, num_blocks, block_size, head_dim]``."""
        return self.key[layer], self.value[layer]

    def slot_mapping(self, block_table: Sequence[int], start: int, end: int) -> torch.Tensor:
        """Slots of a sequence's logical positions ``start .. end-1``, through its block table."""
        if end > len(block_table) * self.block_size:
            raise ValueError(f"positions up to {end} need {-(-end // self.block_size)} blocks, "
                             f"the block table has {len(block_table)}")
        positions = torch.arange(start, end)
        blocks = torch.as_tensor(list(block_table), dtype=torch.long)[positions // self.block_size]
        if bool(((blocks < 0) | (blocks >= self.num_blocks)).any()):
            raise ValueError(f"block table {list(block_table)} names a block outside 0..{self.num_blocks - 1}")
        return (blocks * self.block_size + positions % self.block_size).to(self.device)

    def write(self, slots: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layer: int = 0) -> None:
        """Store tokens' K and V (each ``[n, kv_heads, head_dim]``) at ``slots`` (``[n]``)."""
        flat_k = self.key[layer].view(self.num_kv_heads, self.num_slots, self.head_dim)
        flat_v = self.value[layer].view(self.num_kv_heads, self.num_slots, self.head_dim)
        flat_k[:, slots] = key.transpose(0, 1).to(self.dtype)
        flat_v[:, slots] = value.transpose(0, 1).to(self.dtype)

    def copy_blocks(self, copies: Iterable[Copy | tuple[int, int]]) -> None:
        """Apply copy-on-write copies (src block -> dst block) in every layer, in order."""
        for src, dst, *_ in copies:  # a `Copy` (src, dst, slots), or a plain (src, dst) pair
            self.key[:, :, dst] = self.key[:, :, src]
            self.value[:, :, dst] = self.value[:, :, src]

    def nbytes(self) -> int:
        return self.key.numel() * self.key.element_size() * 2
