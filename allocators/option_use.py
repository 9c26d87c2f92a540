"""Which allocators a setting acts on: facts the simulator reads to tell a user that a setting changed nothing
(`sim.kernel.ignored_settings`), kept here so that nothing outside the package needs the classes."""

from __future__ import annotations

from allocators import ALLOCATORS, allocator_class
from allocators.contiguous import ContiguousAllocator
from allocators.paged_queries import PagedQueries
from allocators.placement import placement_class
from allocators.vattention import VAttentionAllocator


def require_registered(allocator: str, placement: str) -> None:
    """A one-line ValueError, listing the valid names, unless ``allocator`` and ``placement`` are registered
    (a configuration checks them when made, not when its run starts)."""
    allocator_class(allocator)
    placement_class(placement)


def keeps_prefix_cache(name: str, prefix_caching: bool) -> bool:
    """Whether ``name`` with ``prefix_caching`` looks prompts up in an automatic prefix cache (a paged pool;
    contiguous slabs and vAttention accept the option and ignore it)."""
    return prefix_caching and issubclass(allocator_class(name), PagedQueries)


def host_tier_allocators() -> tuple[str, ...]:
    """The allocators a host-memory tier can sit behind (`Allocator.supports_host_tier`)."""
    return tuple(name for name in ALLOCATORS if allocator_class(name).supports_host_tier)


def maps_pages(name: str) -> bool:
    """Whether ``name`` maps pages of ``--page-size-kib`` into virtual ranges (vAttention)."""
    return issubclass(allocator_class(name), VAttentionAllocator)


def places_slabs(name: str) -> bool:
    """Whether ``name`` places slabs in an arena under a ``--placement`` policy (the contiguous allocators)."""
    return issubclass(allocator_class(name), ContiguousAllocator)


def hands_out_blocks(name: str) -> bool:
    """Whether ``name`` hands out blocks of ``--block-size`` tokens from a pool (the paged allocators), the
    only pools ``--block-size`` and a free-block ``--watermark`` act on: contiguous slabs are sized in tokens
    and vAttention maps pages of ``--page-size-kib`` (its cost model charges no block-table overhead either)."""
    return allocator_class(name).kind == "paged"


def follows_vllm_block_size(name: str) -> bool:
    """Whether ``name`` hands out vLLM's blocks, sized as vLLM sizes them for an MLA model
    (`Allocator.follows_vllm_block_size`): ``paged`` and ``paged-cow``."""
    return allocator_class(name).follows_vllm_block_size


def never_outgrows(name: str) -> bool:
    """Whether ``name`` reserves each sequence's final length when it admits it (`Allocator.reserves_final_length`):
    its sequences' growth never fails, so only a request that forks (parallel samples, beams) can make it
    preempt."""
    return allocator_class(name).reserves_final_length


def allocates_per_chunk(name: str) -> bool:
    """Whether ``name`` allocates a chunked prefill chunk by chunk (`Allocator.allocates_per_chunk`), the only
    admission ``--no-scheduler-reserve-full-isl`` changes (vLLM's paged KV cache manager and its variants)."""
    return allocator_class(name).allocates_per_chunk
