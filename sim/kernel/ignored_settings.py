"""Settings a run was given that change nothing in it, each with the reason.

Why: several flags only act on some allocators or modes (a host tier behind a prefix cache, pages on
vAttention, slab placement on contiguous allocators, a long-prefill threshold on chunked prefill, a
cache-aware order on a prefix cache). Accepting one silently would let a user read a run as the answer to the
question the flag asked. The summary carries them as ``ignored_settings`` (flag -> why; the key only when
there are any) and ``kvsim run``/``compare`` print one warning each. Only values that differ from the default
can be told apart from "not given", so those are the ones reported.
"""

from __future__ import annotations

from allocators import ALLOCATORS, allocator_class
from allocators.paged_queries import PagedQueries
from allocators.vattention import VAttentionAllocator
from sim.kernel.config import SimConfig


def ignored_settings(config: SimConfig, model, hybrid: bool) -> dict[str, str]:
    """Flag (as given, with its value) -> why it has no effect on this run. ``hybrid``: the run's pool is
    vLLM's hybrid KV cache manager (`sim.kernel.replica.hybrid_kv_groups`)."""
    defaults = SimConfig()
    cls = allocator_class(config.allocator)
    ignored: dict[str, str] = {}
    if config.cpu_offload_gib > 0:
        flag = f"--cpu-offload-gib {config.cpu_offload_gib:g}"
        if hybrid:
            ignored[flag] = f"{model.name}'s hybrid KV pool (attention groups) has no host tier in kvsim"
        elif not cls.supports_host_tier:
            behind = ", ".join(name for name in ALLOCATORS if allocator_class(name).supports_host_tier)
            ignored[flag] = f"{config.allocator} keeps no prefix cache to spill (a host tier sits behind {behind})"
        elif not config.prefix_caching:
            ignored[flag] = "prefix caching is off (--no-prefix-caching), so nothing cached is spilled"
    if config.page_size_kib != defaults.page_size_kib and not issubclass(cls, VAttentionAllocator):
        ignored[f"--page-size-kib {config.page_size_kib}"] = f"only vattention maps pages; {config.allocator} does not"
    if config.placement != defaults.placement and cls.kind != "contiguous":
        ignored[f"--placement {config.placement}"] = (f"slab placement applies to contiguous allocators, not "
                                                      f"{config.allocator}")
    if config.long_prefill_token_threshold > 0 and not (config.chunked_prefill and config.scheduler == "continuous"):
        ignored[f"--long-prefill-token-threshold {config.long_prefill_token_threshold}"] = (
            "it caps prefill chunks, and this run has no chunked prefill")
    keeps_cache = config.prefix_caching and (hybrid or issubclass(cls, PagedQueries))
    if config.scheduling_policy == "lpm" and not keeps_cache:
        ignored["--scheduling-policy lpm"] = "it orders by cached prefix, and this run keeps no prefix cache: FCFS"
    return ignored
