"""What one token costs in KV memory, per group of layers that share an attention type, at a KV dtype.

A model's layers fall into KV groups: ``full`` attention layers keep K and V of every token; ``sliding_window``
layers attend to the last ``window`` tokens only, so an allocator may free what falls out of the window;
``mla`` layers (DeepSeek's multi-head latent attention) keep one compressed latent plus one rope key per token
instead of K and V per head. vLLM v1's hybrid allocator gives each group its own block table in one shared
pool; kvsim's catalog describes the groups here (`KVGroup`) and `allocators.catalog.ModelSpec.kv_groups`
builds them from a model's config values.

``--kv-cache-dtype`` is vLLM's engine argument: ``auto`` stores KV in the model's dtype, fp16/bf16 in two
bytes, fp8 (vLLM's fp8, fp8_e4m3, fp8_e5m2) in one byte, which halves every group's bytes per token.
"""

from __future__ import annotations

from dataclasses import dataclass

ATTENTION_TYPES = ("full", "sliding_window", "mla")

KV_CACHE_DTYPES: dict[str, int | None] = {
    "auto": None, "fp16": 2, "bf16": 2, "fp8": 1,
    # vLLM's own spellings of the same sizes
    "float16": 2, "half": 2, "bfloat16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1,
}
"""Bytes per KV element by ``--kv-cache-dtype`` value (``auto``: the model's ``dtype_bytes``)."""


def kv_element_bytes(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes of one stored K, V or latent element; a one-line ValueError for an unknown dtype name."""
    key = kv_cache_dtype.lower() if isinstance(kv_cache_dtype, str) else kv_cache_dtype
    if key not in KV_CACHE_DTYPES:
        raise ValueError(f"--kv-cache-dtype must be one of auto, fp16, bf16, fp8 (or vLLM's "
                         f"{', '.join(k for k in KV_CACHE_DTYPES if k not in ('auto', 'fp16', 'bf16', 'fp8'))}), "
                         f"got {kv_cache_dtype!r}")
    size = KV_CACHE_DTYPES[key]
    return model_dtype_bytes if size is None else size


@dataclass(frozen=True, slots=True)
class KVGroup:
    """Layers of one attention type and what one token costs in all of them together.

    ``bytes_per_token``: one token in every layer of the group, at the KV dtype the group was built for.
    ``window``: tokens a ``sliding_window`` layer attends to (None for the others).
    """

    name: str
    attention: str
    layers: int
    window: int | None
    bytes_per_token: int

    @property
    def tensors_per_layer(self) -> int:
        """Cache tensors each layer keeps: K and V (2), or the one latent-plus-rope tensor of MLA (1)."""
        return 1 if self.attention == "mla" else 2

    @property
    def bytes_per_token_per_layer(self) -> int:
        """One token in one layer of the group."""
        return self.bytes_per_token // self.layers

    @property
    def bytes_per_token_per_tensor(self) -> int:
        """One token in one cache tensor (K, V, or MLA's latent) of one layer: what a page of a per-tensor
        virtual range (vAttention) holds per token."""
        return self.bytes_per_token_per_layer // self.tensors_per_layer

    def to_dict(self) -> dict:
        """The JSON object ``kvsim capacity --json`` prints for the group."""
        return {"name": self.name, "attention": self.attention, "layers": self.layers, "window": self.window,
                "bytes_per_token": self.bytes_per_token}


def layout_groups(*, num_layers: int, num_kv_heads: int, head_dim: int, sliding_window: int | None,
                  sliding_window_layers: int | None, kv_lora_rank: int, qk_rope_head_dim: int,
                  element_bytes: int) -> tuple[KVGroup, ...]:
    """The KV groups of a model from its config values (HF ``config.json`` names), sliding-window group first.

    MLA (``kv_lora_rank`` > 0): every layer keeps ``kv_lora_rank + qk_rope_head_dim`` elements per token.
    Otherwise ``sliding_window_layers`` of the layers (all of them when not given) use ``sliding_window`` and
    the rest attend to everything; K and V are ``num_kv_heads x head_dim`` elements each per layer.
    """
    if kv_lora_rank:
        latent = num_layers * (kv_lora_rank + qk_rope_head_dim) * element_bytes
        return (KVGroup("mla", "mla", num_layers, None, latent),)
    per_layer = 2 * num_kv_heads * head_dim * element_bytes
    windowed = 0
    if sliding_window is not None:
        windowed = num_layers if sliding_window_layers is None else sliding_window_layers
    groups = []
    if windowed:
        groups.append(KVGroup("sliding_window", "sliding_window", windowed, sliding_window, windowed * per_layer))
    if num_layers - windowed:
        groups.append(KVGroup("full", "full", num_layers - windowed, None, (num_layers - windowed) * per_layer))
    return tuple(groups)
