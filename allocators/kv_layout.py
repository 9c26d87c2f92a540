"""What one token costs in KV memory, per group of layers that share an attention type, at a KV dtype.

A model's layers fall into KV groups: ``full`` attention layers keep K and V of every token; ``sliding_window``
layers attend to the last ``window`` tokens only, so an allocator may free what falls out of the window;
``chunked_local`` layers (Llama 4's) attend only within the ``window``-token chunk the token is in
(``attention_chunk_size``), so an allocator may free every earlier chunk;
``mla`` layers (DeepSeek's multi-head latent attention) keep one compressed latent plus one rope key per token
instead of K and V per head; a sparse MLA model (DeepSeek-V3.2's lightning indexer, config ``index_head_dim``)
also keeps one indexer key per token and layer, in the same group (`layout_groups`). vLLM v1's hybrid
allocator gives each group its own block table in one shared pool; kvsim's catalog describes the groups here
(`KVGroup`) and `allocators.catalog.ModelSpec.kv_groups` builds them from a model's config values.

``--kv-cache-dtype`` is vLLM's engine argument: ``auto`` stores KV in the model's dtype, fp16/bf16 in two
bytes, fp8 (vLLM's fp8, fp8_e4m3, fp8_e5m2) in one byte, which halves every group's bytes per token (not
quite for sparse MLA where its backend stores FlashMLA's fp8 record, which keeps scales and a bf16 rope; its
indexer keys are fp8 at any dtype). vLLM's packed and scaled formats (per-token-head int8/fp8/int4, NVFP4,
TurboQuant, FlashMLA's records) cost what their backends pack (`allocators.kv_formats`).
"""

from __future__ import annotations

from dataclasses import dataclass

from allocators.kv_formats import (
    PACKED_FORMATS,
    TURBOQUANT,
    gqa_layer_bytes,
    model_kind_refusal,
    turboquant_boundary_layers,
)

ATTENTION_TYPES = ("full", "sliding_window", "chunked_local", "mla")

KV_CACHE_DTYPES: dict[str, int | None] = {
    "auto": None, "fp16": 2, "bf16": 2, "fp8": 1,
    # vLLM's own spellings of the same sizes
    "float16": 2, "half": 2, "bfloat16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1,
    # vLLM 0.33's packed and scaled formats, stored in one-byte tensors (their bytes: `allocators.kv_formats`)
    **dict.fromkeys(PACKED_FORMATS, 1),
}
"""Bytes per KV element by ``--kv-cache-dtype`` value (``auto``: the model's ``dtype_bytes``); a packed format's
token costs what `allocators.kv_formats` says, not elements x 1."""
_SHORT = ("auto", "fp16", "bf16", "fp8")


def kv_element_bytes(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes of one stored K, V or latent element; a one-line ValueError for an unknown dtype name."""
    key = kv_cache_dtype.lower() if isinstance(kv_cache_dtype, str) else kv_cache_dtype
    if key not in KV_CACHE_DTYPES:
        raise ValueError(f"--kv-cache-dtype must be one of auto, fp16, bf16, fp8 (or vLLM's "
                         f"{', '.join(k for k in KV_CACHE_DTYPES if k not in _SHORT)}), got {kv_cache_dtype!r}")
    size = KV_CACHE_DTYPES[key]
    return model_dtype_bytes if size is None else size


@dataclass(frozen=True, slots=True)
class KVGroup:
    """Layers of one attention type and what one token costs in all of them together.

    ``bytes_per_token``: one token in every layer of the group, at the KV dtype the group was built for.
    ``window``: tokens a ``sliding_window`` layer attends to, or a ``chunked_local`` layer's chunk (its
    ``attention_chunk_size``: it attends to at most that many, those of its own chunk); None for the others.
    ``indexer_bytes_per_token``: the part of ``bytes_per_token`` that is a sparse MLA model's indexer key cache
    (0 for every other group): the clock reads it for every context token, the latent only for the top-k.
    """

    name: str
    attention: str
    layers: int
    window: int | None
    bytes_per_token: int
    indexer_bytes_per_token: int = 0

    @property
    def tensors_per_layer(self) -> int:
        """Cache tensors each layer keeps: K and V (2), the one latent-plus-rope tensor of MLA (1), and a sparse
        MLA layer's indexer key cache beside it (2)."""
        if self.attention != "mla":
            return 2
        return 2 if self.indexer_bytes_per_token else 1

    @property
    def bytes_per_token_per_layer(self) -> int:
        """One token in one layer of the group."""
        return self.bytes_per_token // self.layers

    @property
    def bytes_per_token_per_tensor(self) -> int:
        """One token in one cache tensor (K, V, or MLA's latent) of one layer: what a page of a per-tensor
        virtual range (vAttention) holds per token. A sparse MLA layer's two tensors differ (latent and indexer
        key): the latent's, the larger, which decides how many tokens a page holds."""
        if self.indexer_bytes_per_token:
            return (self.bytes_per_token - self.indexer_bytes_per_token) // self.layers
        return self.bytes_per_token_per_layer // self.tensors_per_layer

    def to_dict(self) -> dict:
        """The JSON object ``kvsim capacity --json`` prints for the group (``indexer_bytes_per_token`` only where
        the group has an indexer cache)."""
        out = {"name": self.name, "attention": self.attention, "layers": self.layers, "window": self.window,
               "bytes_per_token": self.bytes_per_token}
        if self.indexer_bytes_per_token:
            out["indexer_bytes_per_token"] = self.indexer_bytes_per_token
        return out


DS_MLA_SCALE_GROUP = 128
"""Elements that share one float32 (4-byte) scale in vLLM's fp8 sparse MLA layouts: the latent of FlashMLA's
``fp8_ds_mla`` record and the indexer key (``Indexer.quant_block_size``)."""
NVFP4_DS_MLA_GROUP = 16
"""Latent values that share one fp8 scale in FlashMLA's ``nvfp4_ds_mla`` record."""
DS_MLA_ROPE_BYTES = 2
"""Bytes of one rope element in FlashMLA's ``fp8_ds_mla`` record: bfloat16, "not quantized for accuracy"."""


def sparse_mla_latent_bytes(kv_lora_rank: int, qk_rope_head_dim: int, element_bytes: int,
                            fp8_ds_mla: bool | None = None, kv_cache_dtype: str = "") -> int:
    """One token's latent + rope in one sparse MLA layer, as vLLM 0.33 stores it.

    Plain: ``(kv_lora_rank + qk_rope_head_dim) x element_bytes``, as dense MLA (16-bit, or fp8 on the FlashInfer
    sparse backends: 576 bytes for DeepSeek-V3.2). ``fp8_ds_mla``: FlashMLA's record, to which vLLM turns the
    ``--kv-cache-dtype`` of the backends that store it (`allocators.mla_backends.MlaBackend.ds_mla_dtypes`;
    ``_canonicalize_sparse_mla_kv_cache_dtype`` in ``model_executor/layers/attention/mla_attention.py``): the
    latent in fp8, one float32 scale per 128 of it, the rope in bf16, 512 + 16 + 128 = 656 bytes for
    DeepSeek-V3.2 (``state_content_bytes={"fp8_ds_mla": 656}`` in ``MLAAttention.get_kv_cache_spec``; the layout
    in ``v1/attention/backends/mla/flashmla_sparse.py``). ``fp8_ds_mla`` None (the backend not known, no GPU):
    the record for fp8, as FLASHMLA_SPARSE, Hopper's backend for ``fp8``, stores it; plain otherwise.
    ``kv_cache_dtype`` ``fp8_ds_mla`` asks for the record by name; ``nvfp4_ds_mla`` is FlashMLA's Blackwell
    record: the latent in fp4 two a byte with one fp8 scale per 16, the rope in fp8, 256 + 64 + 32 = 352 bytes
    (``state_content_bytes={..., "nvfp4_ds_mla": 352}``; its layout in ``flashmla_sparse.py``)."""
    if kv_cache_dtype == "nvfp4_ds_mla":
        return kv_lora_rank // 2 + qk_rope_head_dim + kv_lora_rank // NVFP4_DS_MLA_GROUP
    if kv_cache_dtype == "fp8_ds_mla":
        fp8_ds_mla = True
    if fp8_ds_mla is None:
        fp8_ds_mla = element_bytes == 1
    if not fp8_ds_mla:
        return (kv_lora_rank + qk_rope_head_dim) * element_bytes
    return kv_lora_rank + kv_lora_rank // DS_MLA_SCALE_GROUP * 4 + qk_rope_head_dim * DS_MLA_ROPE_BYTES


def indexer_key_bytes(index_head_dim: int) -> int:
    """One token's indexer key in one layer, whatever the ``--kv-cache-dtype``: fp8 values plus one float32 scale
    per 128 of them, 128 + 4 = 132 bytes for DeepSeek-V3.2 (vLLM 0.33 ``DeepseekV32Indexer``:
    ``DeepseekV32IndexerCache(head_dim=self.head_dim + self.head_dim // self.quant_block_size * 4,
    dtype=torch.uint8)``, in ``models/deepseek_v32/attention.py``)."""
    return index_head_dim + index_head_dim // DS_MLA_SCALE_GROUP * 4


def layout_groups(*, num_layers: int, num_kv_heads: int, head_dim: int, sliding_window: int | None,
                  sliding_window_layers: int | None, kv_lora_rank: int, qk_rope_head_dim: int,
                  element_bytes: int, index_head_dim: int = 0, fp8_ds_mla: bool | None = None,
                  kv_cache_dtype: str = "", model_dtype_bytes: int = 2, attention_chunk_size: int | None = None,
                  chunked_attention_layers: int | None = None) -> tuple[KVGroup, ...]:
    """The KV groups of a model from its config values (HF ``config.json`` names), the local group (sliding-window
    or chunked-local) first.

    MLA (``kv_lora_rank`` > 0): every layer keeps ``kv_lora_rank + qk_rope_head_dim`` elements per token.
    Sparse MLA (``index_head_dim`` > 0, DeepSeek-V3.2): every layer keeps its latent as vLLM's sparse backend
    stores it (`sparse_mla_latent_bytes`; ``fp8_ds_mla``: whether as FlashMLA's record) and its indexer key
    (`indexer_key_bytes`), both in the one ``mla`` group. vLLM 0.33 gives the indexer cache an
    ``MLAAttentionSpec`` of its own (``cache_role=INDEXER``) with the same block size; as every layer is full
    attention, ``UniformTypeKVCacheSpecs`` puts all 122 specs in one KV cache group whose page is the sum of
    theirs (``v1/core/kv_cache_planning.py``, ``get_kv_cache_groups``), so one block table covers both caches
    and a block holds both for its tokens.
    Otherwise ``sliding_window_layers`` of the layers (all of them when not given) use ``sliding_window`` and
    the rest attend to everything; likewise ``chunked_attention_layers`` with ``attention_chunk_size`` (Llama 4:
    the layers whose ``no_rope_layers`` entry is 1, 36 of 48, attend within their 8192-token chunk); K and V are
    ``num_kv_heads x head_dim`` elements each per layer, or what a packed ``kv_cache_dtype`` (vLLM's name) packs
    them in (`allocators.kv_formats.gqa_layer_bytes`; TurboQuant's boundary layers at ``model_dtype_bytes``, in the same group: vLLM's ``UniformTypeKVCacheSpecs`` puts layers
    of one attention type with unequal pages in one KV cache group whose page is the sum of theirs).
    """
    if refusal := model_kind_refusal(kv_cache_dtype, mla=bool(kv_lora_rank), sparse=bool(index_head_dim),
                                     sliding_window=sliding_window is not None or attention_chunk_size is not None):
        raise ValueError(f"--kv-cache-dtype {kv_cache_dtype}: {refusal}")
    if kv_lora_rank and index_head_dim:
        latent = num_layers * sparse_mla_latent_bytes(kv_lora_rank, qk_rope_head_dim, element_bytes, fp8_ds_mla,
                                                      kv_cache_dtype)
        indexer = num_layers * indexer_key_bytes(index_head_dim)
        return (KVGroup("mla", "mla", num_layers, None, latent + indexer, indexer),)
    if kv_lora_rank:
        latent = num_layers * (kv_lora_rank + qk_rope_head_dim) * element_bytes
        return (KVGroup("mla", "mla", num_layers, None, latent),)
    per_layer = gqa_layer_bytes(kv_cache_dtype, num_kv_heads, head_dim, element_bytes)
    if kv_cache_dtype in TURBOQUANT:
        boundary = turboquant_boundary_layers(num_layers)
        whole = boundary * 2 * num_kv_heads * head_dim * model_dtype_bytes + (num_layers - boundary) * per_layer
        return (KVGroup("full", "full", num_layers, None, whole),)
    if sliding_window is not None and attention_chunk_size is not None:
        raise ValueError("a model has sliding_window or attention_chunk_size layers, not both: kvsim models one "
                         "kind of local attention beside full attention")
    windowed, local = 0, "sliding_window"
    if sliding_window is not None:
        windowed = num_layers if sliding_window_layers is None else sliding_window_layers
    elif attention_chunk_size is not None:
        windowed = num_layers if chunked_attention_layers is None else chunked_attention_layers
        sliding_window, local = attention_chunk_size, "chunked_local"
    groups = []
    if windowed:
        groups.append(KVGroup(local, local, windowed, sliding_window, windowed * per_layer))
    if num_layers - windowed:
        groups.append(KVGroup("full", "full", num_layers - windowed, None, (num_layers - windowed) * per_layer))
    return tuple(groups)
