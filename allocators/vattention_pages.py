"""vAttention's page geometry: how many tokens one physical page holds for a catalog model, and how many page
sets a KV pool has (`allocators.vattention` allocates them).

vAttention keeps one virtual range per request in every cache tensor (K and V of every layer; one latent
tensor per MLA layer) and maps physical pages of 2 MB (the CUDA driver's granularity) or 64/128/256 KB (the
authors' driver extension) into them; ``tokens_per_page`` in microsoft/vattention's ``vattention.cu`` is the
page's bytes over one token's bytes in one tensor, rounded down.
"""

from __future__ import annotations

PAGE_SIZES_KIB = (64, 128, 256, 2048)
"""The page sizes vAttention supports: 2 MB natively, 64/128/256 KB with its driver extension."""


def cache_tensors(model) -> int:
    """Cache tensors the model keeps, all layers: K and V per layer, one latent tensor per MLA layer
    (`KVGroup.tensors_per_layer`). One page set maps a page into each; the cost model charges a map call each."""
    return sum(g.layers * g.tensors_per_layer for g in model.kv_groups())


def page_geometry(model, page_size_kib: int, kv_tokens: int, tensor_parallel: int = 1) -> tuple[int, int]:
    """``(page_tokens, num_pages)`` of a vAttention pool of ``kv_tokens`` token slots for a catalog model
    (its KV groups at the run's ``--kv-cache-dtype``).

    One token takes `KVGroup.bytes_per_token_per_tensor` bytes in one layer's K or V tensor (or MLA's one
    latent tensor), on each GPU its share of the KV heads (MLA's latent is not split: as
    `ModelSpec.kv_bytes_per_token_per_gpu`), so a page holds ``page bytes // that`` tokens (vAttention's
    ``tokens_per_page``, rounded down: the rest of the page is never used; the fewest over the groups, when
    they differ). Sliding-window layers are taken as full attention: vAttention keeps every token of a
    request mapped. The pool has ``kv_tokens x per-GPU bytes per token`` bytes on each GPU, ``page bytes x
    cache tensors`` per page set. Integer arithmetic throughout, so the page count is exact."""
    if page_size_kib not in PAGE_SIZES_KIB:
        raise ValueError(f"--page-size-kib must be one of {', '.join(map(str, PAGE_SIZES_KIB))}, "
                         f"got {page_size_kib!r}")
    page_bytes = page_size_kib * 1024
    heads, split = model.num_kv_heads, -(-model.num_kv_heads // tensor_parallel)
    per_tensor = max(g.bytes_per_token_per_tensor if g.attention == "mla"
                     else g.bytes_per_token_per_tensor // heads * split for g in model.kv_groups())
    page_tokens = page_bytes // per_tensor
    if page_tokens < 1:
        raise ValueError(f"a {page_size_kib} KiB page is smaller than one token of {model.name} in one cache "
                         f"tensor ({per_tensor} bytes)")
    pool = kv_tokens * model.kv_bytes_per_token_per_gpu(tensor_parallel)
    return page_tokens, pool // (page_bytes * cache_tensors(model))
