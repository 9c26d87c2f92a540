"""KV memory managers (contiguous slabs, paged blocks, paged copy-on-write, vAttention pages, a radix-tree
cache) and their waste accounting.

`ALLOCATORS` maps each public name to its class; every class takes
``cls(capacity_slots, *, block_size=16, max_model_len=2048, placement="buddy", prefix_caching=False,
watermark=0.0)``.
"""

from __future__ import annotations

from allocators.base import Admission, Allocator, Copy, MemoryBreakdown
from allocators.contiguous import ContiguousMaxAllocator, ContiguousOracleAllocator, ContiguousPow2Allocator
from allocators.paged import PagedAllocator
from allocators.paged_cow import PagedCowAllocator
from allocators.placement import PLACEMENTS
from allocators.radix import RadixAllocator
from allocators.vattention import VAttentionAllocator

ALLOCATORS: dict[str, type[Allocator]] = {
    "contiguous-max": ContiguousMaxAllocator,
    "contiguous-pow2": ContiguousPow2Allocator,
    "contiguous-oracle": ContiguousOracleAllocator,
    "paged": PagedAllocator,
    "paged-cow": PagedCowAllocator,
    "vattention": VAttentionAllocator,
    "radix": RadixAllocator,
}


def allocator_class(name: str) -> type[Allocator]:
    """The class registered as ``name``; an unknown name is a one-line ValueError listing valid ones."""
    try:
        return ALLOCATORS[name]
    except KeyError:
        raise ValueError(f"unknown allocator {name!r}; valid choices: {', '.join(ALLOCATORS)}") from None


def make_allocator(name: str, capacity: int, **options: object) -> Allocator:
    """Build the allocator called ``name`` (`allocator_class`)."""
    return allocator_class(name)(capacity, **options)


__all__ = ["ALLOCATORS", "PLACEMENTS", "Admission", "Allocator", "Copy", "MemoryBreakdown", "allocator_class",
           "make_allocator"]
