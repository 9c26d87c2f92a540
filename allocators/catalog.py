"""Model and GPU catalog: the few numbers that decide how much KV memory exists and what a token costs.

The catalog lives beside the allocators because both the simulator (capacity, step costs) and
`gpu_validation` (tensor shapes) need it, and the dependency arrows in kvsim point into `allocators`.

Values are taken from each model's published Hugging Face ``config.json`` and from the vendors' data
sheets; the ``source`` field of each entry says which. Users add their own entries from a TOML file
(`allocators.catalog_file`) without editing code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from numbers import Integral, Real

from allocators.gdn_layout import GatedDeltaNetLayers
from allocators.kv_formats import model_kind_refusal
from allocators.kv_layout import KVGroup, kv_element_bytes, layout_groups
from allocators.mamba1_layout import Mamba1Layers
from allocators.mamba_layout import Mamba2Layers, first_layer_recurrent

GIB = 1024**3


def check_positive(entry: str, field: str, value: object, *, integer: bool = False) -> None:
    """A one-line ValueError unless ``value`` is a positive finite number (an integer where ``integer``):
    catalog files are user input, and a string, a bool, nan or inf (TOML spells both, and ``1e400`` reads as
    inf) must not reach the arithmetic, where they fail later without the entry's name, or not at all."""
    kind = Integral if integer else Real
    if isinstance(value, bool) or not isinstance(value, kind) or not 0 < value < math.inf:
        what = ("integer" if integer else
                "finite number" if isinstance(value, Real) and not math.isfinite(value) else "number")
        raise ValueError(f"{entry}: {field} must be a positive {what}, got {value!r}")


def check_source(entry: str, value: object) -> None:
    """A one-line ValueError unless ``source`` is text: it is printed as the entry's citation, and a number
    there is a misplaced value (``source = 5``), not a source."""
    if not isinstance(value, str):
        raise ValueError(f"{entry}: source must be a string (where the numbers come from), got {value!r}")


def per_gpu_share(whole: float, replicated: float, tensor_parallel: int) -> float:
    """Each of ``tensor_parallel`` GPUs' part of ``whole`` (weight bytes, FLOPs) of which ``replicated`` is done
    or held whole on every GPU and the rest split evenly: ``(whole - replicated) / tp + replicated``. Exactly
    ``whole / tensor_parallel`` where nothing is replicated (or on one GPU), so such models keep every bit."""
    if not replicated or tensor_parallel == 1:
        return whole / tensor_parallel
    return (whole - replicated) / tensor_parallel + replicated


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer, described by the fields that size its weights and KV cache.

    The KV layout (`kv_groups`) comes from the config's ``sliding_window`` (with ``sliding_window_layers``, how
    many layers use it: all when not given), or ``attention_chunk_size`` (Llama 4's chunked-local attention,
    with ``chunked_attention_layers``, how many layers use it: config.json's ``no_rope_layers`` entries that are
    1; all when not given), or, for MLA, ``kv_lora_rank`` and ``qk_rope_head_dim``; a model
    with none of them is one ``full`` group. ``kv_cache_dtype`` is vLLM's ``--kv-cache-dtype`` (``auto``: the
    model's ``dtype_bytes``); `with_kv_cache_dtype` returns the spec a run with that flag uses, so every
    consumer of `kv_bytes_per_token` (capacity, cost model, swap space) sees the stored size.
    ``weights_gib``: what vLLM loads when the checkpoint is quantized (else ``num_params x dtype_bytes``);
    ``active_params``: parameters one token passes through in a mixture of experts (else ``num_params``).
    ``replicated_weights_gib``: the part of ``weights_gib`` (or of the whole) that vLLM keeps whole on every
    tensor-parallel GPU, where the rest is split over them (`weight_bytes_per_gpu`): layers built as
    ``ReplicatedLinear`` or with ``disable_tp=True`` (DeepSeek's MLA down-projections, MoE router and sparse
    indexer), and the norms. Not given (None: nothing replicated) where it is a rounding error beside the split
    weights (a dense model's norms). ``replicated_params``: the same layers' parameters (of ``active_params``:
    every token passes through them), whose FLOPs every GPU does for all of a step's tokens where the rest's are
    split (`allocators.roofline.token_flops_per_gpu`); a count, not bytes, as the layers mix FP8 and BF16.
    ``num_nextn_predict_layers`` (config.json's name): the multi-token-prediction layers the checkpoint carries
    beside ``num_layers``, which ``--speculative-config '{"method": "mtp"}'`` runs as its drafter (0: none).
    A hybrid Mamba model (Nemotron-H, Qwen3-Next, Jamba) gives ``attention_layers``, its only layers with KV (every
    layer when not given), and ``mamba``, its Mamba-2 (`allocators.mamba_layout`), gated DeltaNet
    (`allocators.gdn_layout`) or Mamba-1 (`allocators.mamba1_layout`) layers' state dims: each keeps a fixed state
    per request in the same block pool, which `allocators.mamba_layout.HybridMambaPool` sizes.

    A mixture of experts also gives ``num_experts`` (routed experts per MoE layer: config.json's
    ``num_local_experts``, ``n_routed_experts`` or ``num_experts``) and ``num_experts_per_tok`` (config.json's own
    name), so a step reads only the experts its tokens are routed to (`allocators.expert_routing`), and
    ``expert_weight_bits`` where the checkpoint stores the routed experts at another precision than the rest
    (default: the whole checkpoint's mean bits per parameter). Memory still holds every expert
    (`weight_bytes`).

    Sparse MLA (DeepSeek-V3.2's DeepSeek Sparse Attention) gives config.json's ``index_topk`` (keys each query
    attends to, picked by a lightning indexer), ``index_head_dim`` and ``index_n_heads`` (the indexer's key size
    and query heads), all three or none, with the MLA dims. Every layer then also caches one indexer key per
    token, and stores its latent as vLLM's sparse backends do (`allocators.kv_layout.layout_groups`:
    ``fp8_ds_mla``, whether as FlashMLA's fp8 record, which the attention backend decides and
    `allocators.mla_backends.with_backend_kv_layout` sets once the GPU is known; None: by the KV dtype); the clock
    scores at most ``index_topk`` keys per query, plus the indexer's scoring of every key
    (`sim.kernel.roofline_cost`).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    num_params: float
    max_seq_len: int
    intermediate_size: int
    vocab_size: int
    dtype_bytes: int = 2
    source: str = ""
    sliding_window: int | None = None
    sliding_window_layers: int | None = None
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    weights_gib: float | None = None
    active_params: float | None = None
    kv_cache_dtype: str = "auto"
    num_experts: int = 0
    num_experts_per_tok: int = 0
    expert_weight_bits: float | None = None
    index_topk: int = 0
    index_head_dim: int = 0
    index_n_heads: int = 0
    replicated_weights_gib: float | None = None
    fp8_ds_mla: bool | None = None
    replicated_params: float | None = None
    num_nextn_predict_layers: int = 0
    attention_layers: int | None = None
    mamba: Mamba2Layers | GatedDeltaNetLayers | Mamba1Layers | None = None
    attention_chunk_size: int | None = None
    chunked_attention_layers: int | None = None

    def __post_init__(self) -> None:
        entry = f"model {self.name!r}"
        self._check_mamba(entry)
        if type(self.num_nextn_predict_layers) is not int or self.num_nextn_predict_layers < 0:
            raise ValueError(f"{entry}: num_nextn_predict_layers must be a non-negative integer, "
                             f"got {self.num_nextn_predict_layers!r}")
        for f in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "max_seq_len",
                  "intermediate_size", "vocab_size", "dtype_bytes"):
            check_positive(entry, f, getattr(self, f), integer=True)
        check_positive(entry, "num_params", self.num_params)
        for f in ("sliding_window", "sliding_window_layers", "attention_chunk_size", "chunked_attention_layers"):
            if getattr(self, f) is not None:
                check_positive(entry, f, getattr(self, f), integer=True)
        for f in ("weights_gib", "active_params"):
            if getattr(self, f) is not None:
                check_positive(entry, f, getattr(self, f))
        if self.active_params is not None and self.active_params > self.num_params:
            raise ValueError(f"{entry}: active_params ({self.active_params:g}) must be at most num_params "
                             f"({self.num_params:g}): a token passes through some of the parameters, not more")
        check_source(entry, self.source)
        self._check_experts(entry)
        for f in ("kv_lora_rank", "qk_rope_head_dim"):
            if getattr(self, f):
                check_positive(entry, f, getattr(self, f), integer=True)
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"{entry}: num_heads must be a multiple of num_kv_heads")
        if self.sliding_window_layers is not None and (self.sliding_window is None
                                                       or self.sliding_window_layers > self.num_layers):
            raise ValueError(f"{entry}: sliding_window_layers needs sliding_window and at most num_layers "
                             f"({self.num_layers}) layers, got {self.sliding_window_layers}")
        if self.chunked_attention_layers is not None and (self.attention_chunk_size is None
                                                          or self.chunked_attention_layers > self.num_layers):
            raise ValueError(f"{entry}: chunked_attention_layers needs attention_chunk_size and at most num_layers "
                             f"({self.num_layers}) layers, got {self.chunked_attention_layers}")
        if self.attention_chunk_size is not None and (self.sliding_window is not None or self.kv_lora_rank):
            raise ValueError(f"{entry}: give attention_chunk_size, sliding_window or the MLA dimensions "
                             "(kv_lora_rank), one of them: kvsim models one kind of local attention beside full "
                             "attention")
        if self.qk_rope_head_dim and not self.kv_lora_rank:
            raise ValueError(f"{entry}: qk_rope_head_dim is an MLA dimension and needs kv_lora_rank")
        if self.kv_lora_rank and self.sliding_window is not None:
            raise ValueError(f"{entry}: give sliding_window or the MLA dimensions (kv_lora_rank), not both")
        self._check_indexer(entry)
        self._check_replicated(entry)
        try:
            kv_element_bytes(self.kv_cache_dtype, self.dtype_bytes)
        except ValueError as exc:  # the flag's message; a catalog entry's field also needs the entry's name
            raise ValueError(f"{entry}: kv_cache_dtype: {exc}") from None
        object.__setattr__(self, "kv_cache_dtype", self.kv_cache_dtype.lower())  # as the flag's value is stored
        if refusal := model_kind_refusal(self.kv_cache_dtype, mla=bool(self.kv_lora_rank),
                                         sparse=self.sparse_attention, sliding_window=self.local_attention):
            raise ValueError(f"{entry}: --kv-cache-dtype {self.kv_cache_dtype}: {refusal}")

    def _check_mamba(self, entry: str) -> None:
        """A hybrid Mamba model (``mamba``) names its attention layers (``attention_layers``: the only ones with
        KV), and both fit in ``num_layers`` (Nemotron-H's MLP-only layers are the rest). Window and MLA layouts
        beside Mamba are not modelled."""
        if self.attention_layers is None and self.mamba is None:
            return
        if self.mamba is None or self.attention_layers is None:
            raise ValueError(f"{entry}: attention_layers and mamba come together (a hybrid Mamba model)")
        if not isinstance(self.mamba, (Mamba2Layers, GatedDeltaNetLayers, Mamba1Layers)):
            raise ValueError(f"{entry}: mamba must be a Mamba2Layers, GatedDeltaNetLayers or Mamba1Layers, "
                             f"got {self.mamba!r}")
        check_positive(entry, "attention_layers", self.attention_layers, integer=True)
        if self.attention_layers + self.mamba.layers > self.num_layers:
            raise ValueError(f"{entry}: attention_layers ({self.attention_layers}) + mamba layers "
                             f"({self.mamba.layers}) exceed num_layers ({self.num_layers})")
        if self.local_attention or self.kv_lora_rank:
            raise ValueError(f"{entry}: sliding windows, chunked-local attention or MLA beside Mamba layers are not "
                             "modelled")

    def _check_indexer(self, entry: str) -> None:
        """The sparse-attention fields come together (one is no indexer), and only on an MLA model: vLLM serves
        ``index_topk`` with its sparse MLA backends alone."""
        names = ("index_topk", "index_head_dim", "index_n_heads")
        given = [f for f in names if getattr(self, f)]
        if not given:
            return
        for f in names:
            check_positive(entry, f, getattr(self, f), integer=True)
        if not self.kv_lora_rank:
            raise ValueError(f"{entry}: index_topk, index_head_dim and index_n_heads describe sparse MLA and need "
                             "kv_lora_rank")

    def _check_replicated(self, entry: str) -> None:
        """``replicated_weights_gib`` is a part of the weights every GPU reads in full, so it fits in them beside
        the routed experts (which vLLM splits); ``replicated_params`` likewise among the parameters every token
        passes through (``active_params``, else ``num_params``); ``fp8_ds_mla`` is a sparse MLA latent's
        layout."""
        if self.replicated_weights_gib is not None:
            check_positive(entry, "replicated_weights_gib", self.replicated_weights_gib)
            if self.replicated_weight_bytes > self.weight_bytes - self.routed_expert_bytes:
                raise ValueError(f"{entry}: replicated_weights_gib ({self.replicated_weights_gib:g}) exceeds the "
                                 f"weights' {(self.weight_bytes - self.routed_expert_bytes) / GIB:g} GiB beside the "
                                 "routed experts (which tensor parallelism splits)")
        if self.replicated_params is not None:
            check_positive(entry, "replicated_params", self.replicated_params)
            if self.replicated_params > self.token_params:
                raise ValueError(f"{entry}: replicated_params ({self.replicated_params:g}) exceeds the "
                                 f"{self.token_params:g} parameters a token passes through (active_params, else "
                                 "num_params)")
        if self.fp8_ds_mla is not None:
            if not isinstance(self.fp8_ds_mla, bool):
                raise ValueError(f"{entry}: fp8_ds_mla must be true or false, got {self.fp8_ds_mla!r}")
            if not self.sparse_attention:
                raise ValueError(f"{entry}: fp8_ds_mla is a sparse MLA latent's layout and needs index_topk")

    @property
    def sparse_attention(self) -> bool:
        """Whether the model has a lightning indexer (``index_topk``): its attention reads the top-k keys."""
        return bool(self.index_topk)

    def _check_experts(self, entry: str) -> None:
        """The routed-expert fields agree with each other and with the parameter counts: the per-expert size
        is derived from ``num_params - active_params`` (`expert_params`), so both counts are needed, and the
        routed experts' bytes must fit in the checkpoint's."""
        if not (self.num_experts or self.num_experts_per_tok or self.expert_weight_bits is not None):
            return
        for f in ("num_experts", "num_experts_per_tok"):
            check_positive(entry, f, getattr(self, f), integer=True)
        if self.num_experts_per_tok >= self.num_experts:
            raise ValueError(f"{entry}: num_experts_per_tok ({self.num_experts_per_tok}) must be less than "
                             f"num_experts ({self.num_experts}): with every expert active each token the model "
                             "reads all of them, as a dense one (leave both out)")
        if self.active_params is None or self.active_params >= self.num_params:
            raise ValueError(f"{entry}: num_experts needs active_params below num_params (got "
                             f"{self.active_params!r}): an expert's size is (num_params - active_params) / "
                             "(num_experts - num_experts_per_tok)")
        if self.expert_weight_bits is not None:
            check_positive(entry, "expert_weight_bits", self.expert_weight_bits)
        if self.routed_expert_bytes > self.weight_bytes:
            raise ValueError(f"{entry}: the routed experts' {self.routed_expert_bytes:g} bytes (num_experts x "
                             f"expert_params x expert_weight_bits / 8) exceed the weights' {self.weight_bytes:g}; "
                             "check expert_weight_bits, weights_gib and the parameter counts")

    def kv_groups(self, kv_cache_dtype: str | None = None) -> tuple[KVGroup, ...]:
        """The model's KV groups with bytes per token at ``kv_cache_dtype`` (default: the spec's own,
        ``auto`` unless `with_kv_cache_dtype` set it; ``auto`` is the model's dtype)."""
        dtype = self.kv_cache_dtype if kv_cache_dtype is None else kv_cache_dtype
        return self.kv_groups_at(kv_element_bytes(dtype, self.dtype_bytes), dtype.lower())

    def kv_groups_at(self, element_bytes: int, kv_cache_dtype: str = "") -> tuple[KVGroup, ...]:
        """The KV groups at ``element_bytes`` per stored element (the roofline's ``dtype_bytes`` override), packed
        as ``kv_cache_dtype`` where that is one of vLLM's packed formats (`allocators.kv_formats`)."""
        kv_layers = self.num_layers if self.attention_layers is None else self.attention_layers
        return layout_groups(num_layers=kv_layers, num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
                             sliding_window=self.sliding_window, sliding_window_layers=self.sliding_window_layers,
                             attention_chunk_size=self.attention_chunk_size,
                             chunked_attention_layers=self.chunked_attention_layers,
                             kv_lora_rank=self.kv_lora_rank, qk_rope_head_dim=self.qk_rope_head_dim,
                             element_bytes=element_bytes, index_head_dim=self.index_head_dim,
                             fp8_ds_mla=self.fp8_ds_mla, kv_cache_dtype=kv_cache_dtype,
                             model_dtype_bytes=self.dtype_bytes)

    @property
    def local_attention(self) -> bool:
        """Whether some layers attend locally: a sliding window or Llama 4's chunks (a hybrid KV cache)."""
        return self.sliding_window is not None or self.attention_chunk_size is not None

    def with_kv_cache_dtype(self, kv_cache_dtype: str) -> ModelSpec:
        """This model with its KV stored as ``kv_cache_dtype`` (``auto``: unchanged). Weights keep their dtype."""
        kv_element_bytes(kv_cache_dtype, self.dtype_bytes)
        if kv_cache_dtype.lower() == "auto":
            return self
        return replace(self, kv_cache_dtype=kv_cache_dtype.lower())

    @property
    def kv_bytes_per_token(self) -> int:
        """One token in every layer (inside every window), at the spec's KV dtype: for full attention
        2 x layers x kv_heads x head_dim x dtype bytes; for MLA layers x (latent + rope dims) x dtype bytes; for
        sparse MLA the latent as its backend stores it plus the indexer key (`kv_layout.layout_groups`)."""
        return sum(g.bytes_per_token for g in self.kv_groups())

    def kv_bytes_per_token_per_gpu(self, tensor_parallel: int = 1) -> int:
        """One token's KV on each of ``tensor_parallel`` GPUs. vLLM splits KV heads over the GPUs, each
        keeping at least one head (replicated when there are more GPUs than KV heads); MLA's latent is not
        split, so every GPU keeps all of it (and a sparse model's indexer keys: ``max_tp_shards=1``)."""
        total = 0
        for g in self.kv_groups():
            if g.attention == "mla":
                total += g.bytes_per_token
            else:
                total += g.bytes_per_token // self.num_kv_heads * -(-self.num_kv_heads // tensor_parallel)
        return total

    @property
    def weight_bytes(self) -> float:
        """Every weight as vLLM loads it: what memory holds (all experts of a mixture of experts)."""
        if self.weights_gib is not None:
            return self.weights_gib * GIB
        return self.num_params * self.dtype_bytes

    @property
    def replicated_weight_bytes(self) -> float:
        """The bytes of `weight_bytes` every tensor-parallel GPU holds whole (``replicated_weights_gib``; 0)."""
        return 0.0 if self.replicated_weights_gib is None else self.replicated_weights_gib * GIB

    def weight_bytes_per_gpu(self, tensor_parallel: int = 1, weights: float | None = None) -> float:
        """What each of ``tensor_parallel`` GPUs holds (and a step reads) of ``weights`` bytes (default: all of
        `weight_bytes`): its share of the split ones and every replicated one (`replicated_weight_bytes`, all
        in ``weights``). Exactly ``weights / tensor_parallel`` without replicated weights."""
        whole = self.weight_bytes if weights is None else weights
        return per_gpu_share(whole, self.replicated_weight_bytes, tensor_parallel)

    @property
    def token_params(self) -> float:
        """Parameters one token passes through: ``active_params`` of a mixture of experts, else ``num_params``."""
        return self.num_params if self.active_params is None else self.active_params

    @property
    def expert_params(self) -> float:
        """Parameters of one routed expert summed over the MoE layers (0 for a dense model).

        With ``D`` the parameters every token passes through (attention, dense layers, shared experts, norms,
        routers, the LM head) and ``e`` one routed expert's, ``num_params = D + E e`` and ``active_params = D +
        k e``, so ``e = (num_params - active_params) / (E - k)``, whatever ``D`` holds. Against the configs:
        DeepSeek-V3, (671e9 - 37e9) / 248 = 2.5565e9 and 58 MoE layers x 3 x 7168 x 2048 = 2.5543e9 (0.1%);
        gpt-oss-20b, (20.91e9 - 3.61e9) / 28 = 0.6179e9 and 24 layers x (3 x 2880 x 2880 + 3 x 2880 biases) =
        0.5974e9 (3.4% more: its model card counts the 0.58e9-parameter input embedding in the total but not in
        the active count, so the derivation files it among the experts)."""
        if not self.num_experts:
            return 0.0
        return (self.num_params - self.token_params) / (self.num_experts - self.num_experts_per_tok)

    @property
    def routed_expert_bytes(self) -> float:
        """Bytes of every routed expert as loaded, the part of `weight_bytes` a step reads only as far as its
        tokens are routed (0 for a dense model): ``num_experts x expert_params`` at ``expert_weight_bits``
        (default: `weight_bytes`' mean bits per parameter)."""
        if not self.num_experts:
            return 0.0
        bits = (self.weight_bytes * 8 / self.num_params if self.expert_weight_bits is None
                else self.expert_weight_bits)
        return self.num_experts * self.expert_params * bits / 8


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator: memory as the driver reports it, and the peaks the roofline cost model scales.

    ``compute_capability``: the CUDA compute capability (NVIDIA's table of them: 8.0 for A100, 8.6 A10G, 8.9 L4,
    9.0 Hopper, 10.0 Blackwell), from which vLLM picks an MLA model's attention backend and with it the KV block
    size (`allocators.mla_backends`); None where it is not known (a catalog file's GPU that gives none, the host
    CPU), and ``--block-size`` is then taken as given.
    """

    name: str
    memory_bytes: int
    hbm_bandwidth_gb_s: float
    bf16_tflops: float
    pcie_gb_s: float
    source: str = ""
    compute_capability: float | None = None

    def __post_init__(self) -> None:
        check_positive(f"gpu {self.name!r}", "memory_bytes", self.memory_bytes, integer=True)
        for f in ("hbm_bandwidth_gb_s", "bf16_tflops", "pcie_gb_s"):
            check_positive(f"gpu {self.name!r}", f, getattr(self, f))
        check_source(f"gpu {self.name!r}", self.source)
        if self.compute_capability is not None:
            check_positive(f"gpu {self.name!r}", "compute_capability", self.compute_capability)

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


_HF = "Hugging Face config.json of "
_NEMOTRON_H_8B_PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
"""nvidia/Nemotron-H-8B-Base-8K's ``hybrid_override_pattern``: one letter a layer, 'M' Mamba-2, '*' attention."""
_QWEN3_NEXT_LAYER_TYPES = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(48)]
"""Qwen3-Next's ``layer_types`` (Qwen3NextConfig: every ``full_attention_interval`` = 4th layer full)."""

_JAMBA_LAYERS_BLOCK_TYPE = ["attention" if i % 8 == 4 else "mamba" for i in range(32)]
"""AI21-Jamba-1.5-Mini's layer kinds as vLLM 0.33's ``JambaModel`` reads them (``config.layers_block_type``,
transformers' ``JambaConfig``: attention where ``i % attn_layer_period == attn_layer_offset``, 8 and 4): 4 attention
layers (4, 12, 20, 28), 28 Mamba-1."""

_JAMBA_EXPERT_MLP = 3 * 4096 * 14336
"""One Jamba expert (or dense MLP): gate, up and down projections of hidden 4096 x intermediate 14336."""

_DSV3_REPLICATED_BYTES = 61 * (15_142_624 + 32_768) + 58 * 3_671_040 + 14_336
"""DeepSeek-V3's weights vLLM 0.33 keeps whole on every tensor-parallel GPU (`ModelSpec.replicated_weights_gib`;
``model_executor/models/deepseek_v2.py``): in each of 61 layers the fused q_a / kv_a down-projection
(``DeepSeekV2FusedQkvAProjLinear``, ``disable_tp=True``: FP8 7168 x (1536 + 576) and 17 x 56 FP32 block scales,
15,142,624 bytes) and the BF16 norms (input, post-attention, q_a, kv_a: 32,768); in each of the 58 MoE layers
the router (``GateLinear``, a ``ReplicatedLinear``: BF16 7168 x 256) and its FP32 ``e_score_correction_bias``
(3,671,040); and the final BF16 norm (14,336): 1,138,633,568 bytes. Split over the GPUs: the vocab-parallel
embedding and lm_head, q_b, kv_b and o projections, the dense and shared-expert MLPs and the routed experts."""

_DSV3_REPLICATED_PARAMS = 61 * (7168 * (1536 + 576) + 7168 + 7168 + 1536 + 512) + 58 * (7168 * 256 + 256) + 7168
"""The parameters of `_DSV3_REPLICATED_BYTES`' layers (`ModelSpec.replicated_params`), which every GPU runs for
all of a step's tokens: in each of 61 layers the fused q_a / kv_a projection, 7168 x (1536 + 576) =
15,138,816, and the input, post-attention, q_a and kv_a norms, 16,384; in each of the 58 MoE layers the router,
7168 x 256, and its 256 e_score_correction_bias; the final norm, 7168: 1,030,919,680 (2.8% of the 37e9 active).
Counted as the roofline counts every parameter a token passes through, a multiply-add each (the norms and the
bias, 1,021,440 of them, do elementwise work instead: 0.1% of the count, kept so that it covers the same
layers as the bytes)."""

_DSV32_INDEXER_PARAMS = 1536 * 64 * 128 + 7168 * 128 + 7168 * 64 + 2 * 128
"""DeepSeek-V3.2's lightning indexer in one layer, as ``DeepseekV32Indexer`` builds it (vLLM 0.33
``models/deepseek_v32/attention.py``), all of it replicated on every tensor-parallel GPU: ``wq_b`` (a
``ReplicatedLinear``) 1536 x (64 heads x 128), ``wk`` 7168 x 128 and ``weights_proj`` 7168 x 64 (merged as
``wk_weights_proj``, ``disable_tp=True``), the LayerNorm ``k_norm``'s weight and bias, 2 x 128: 13,959,424."""

MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        ModelSpec("opt-13b", 40, 5120, 40, 40, 128, 12.85e9, 2048, 20480, 50272, 2, _HF + "facebook/opt-13b"),
        ModelSpec("opt-66b", 64, 9216, 72, 72, 128, 65.7e9, 2048, 36864, 50272, 2, _HF + "facebook/opt-66b"),
        ModelSpec("opt-175b", 96, 12288, 96, 96, 128, 175e9, 2048, 49152, 50272, 2,
                  "OPT paper (Zhang et al. 2022), Table 1"),
        ModelSpec("llama-2-7b", 32, 4096, 32, 32, 128, 6.74e9, 4096, 11008, 32000, 2,
                  _HF + "meta-llama/Llama-2-7b-hf"),
        ModelSpec("llama-2-13b", 40, 5120, 40, 40, 128, 13.0e9, 4096, 13824, 32000, 2,
                  _HF + "meta-llama/Llama-2-13b-hf"),
        ModelSpec("llama-3-8b", 32, 4096, 32, 8, 128, 8.03e9, 8192, 14336, 128256, 2,
                  _HF + "meta-llama/Meta-Llama-3-8B"),
        ModelSpec("llama-3-70b", 80, 8192, 64, 8, 128, 70.6e9, 8192, 28672, 128256, 2,
                  _HF + "meta-llama/Meta-Llama-3-70B"),
        ModelSpec("mistral-7b", 32, 4096, 32, 8, 128, 7.24e9, 32768, 14336, 32000, 2,
                  _HF + "mistralai/Mistral-7B-v0.1 (sliding_window 4096 on every layer)", sliding_window=4096),
        ModelSpec("llama-3.1-8b", 32, 4096, 32, 8, 128, 8.03e9, 131072, 14336, 128256, 2,
                  _HF + "meta-llama/Llama-3.1-8B (max_position_embeddings 131072)"),
        ModelSpec("gemma-3-12b", 48, 3840, 16, 8, 256, 12.187325040e9, 131072, 15360, 262208, 2,
                  _HF + "google/gemma-3-12b-it, text_config: sliding_window 1024, sliding_window_pattern 6 "
                  "(5 local : 1 global, so 40 of 48 layers windowed); num_params: every tensor vLLM loads for "
                  "Gemma3ForConditionalGeneration, the SigLIP vision tower and projector included: 12,187,325,040, "
                  "summed from the text and vision configs (the model page's 12.2B)",
                  sliding_window=1024, sliding_window_layers=40),
        ModelSpec("gpt-oss-20b", 24, 2880, 64, 8, 64, 20.91e9, 131072, 2880, 201088, 2,
                  _HF + "openai/gpt-oss-20b: layer_types alternate sliding_attention (sliding_window 128) and "
                  "full_attention, 12 each; 32 experts, 4 per token. num_params, active_params and weights_gib "
                  "(the MXFP4 checkpoint vLLM loads: experts at 4.25 bits, the rest BF16) from the gpt-oss model "
                  "card (arXiv:2508.10925), Table 1: 20.91B total, 3.61B active, 12.8 GiB. num_local_experts 32, "
                  "num_experts_per_tok 4; expert_weight_bits: MXFP4, 4-bit values plus one 8-bit scale per 32",
                  sliding_window=128, sliding_window_layers=12, weights_gib=12.8, active_params=3.61e9,
                  num_experts=32, num_experts_per_tok=4, expert_weight_bits=4.25),
        ModelSpec("gpt-oss-120b", 36, 2880, 64, 8, 64, 116.83e9, 131072, 2880, 201088, 2,
                  _HF + "openai/gpt-oss-120b (as public copies of it give it): gpt-oss-20b's layers, 36 of them, "
                  "layer_types alternating sliding_attention (sliding_window 128) and full_attention, 18 each; "
                  "num_local_experts 128, num_experts_per_tok 4. num_params, active_params and weights_gib (the "
                  "MXFP4 checkpoint: experts at 4.25 bits, the rest BF16) from the gpt-oss model card "
                  "(arXiv:2508.10925), Table 1: 116.83B total, 5.13B active, 60.8 GiB ((116.83e9 - 5.13e9) / 124 "
                  "= 0.901e9 per expert against 36 x (3 x 2880 x 2880 + 3 x 2880) = 0.896e9)",
                  sliding_window=128, sliding_window_layers=18, weights_gib=60.8, active_params=5.13e9,
                  num_experts=128, num_experts_per_tok=4, expert_weight_bits=4.25),
        ModelSpec("llama-4-scout-17b-16e", 48, 5120, 40, 8, 128, 109e9, 10485760, 8192, 202048, 2,
                  _HF + "meta-llama/Llama-4-Scout-17B-16E, text_config: attention_chunk_size 8192 on the layers "
                  "whose no_rope_layers entry is 1 (every layer but each fourth: 36 of 48; vLLM's Llama4Attention "
                  "builds ChunkedLocalAttention there, Attention on the NoPE layers), max_position_embeddings "
                  "10485760, num_local_experts 16, num_experts_per_tok 1 (a shared expert beside them), "
                  "interleave_moe_layer_step 1; num_params and active_params from Meta's Llama 4 model card: 109B "
                  "total, 17B active ((109e9 - 17e9) / 15 = 6.13e9 per expert against 48 x 3 x 5120 x 8192 = "
                  "6.04e9)",
                  attention_chunk_size=8192, chunked_attention_layers=36, active_params=17e9,
                  num_experts=16, num_experts_per_tok=1),
        ModelSpec("llama-4-maverick-17b-128e", 48, 5120, 40, 8, 128, 400e9, 1048576, 16384, 202048, 2,
                  "meta-llama/Llama-4-Maverick-17B-128E's text_config as NVIDIA/TensorRT-LLM's Llama 4 tests copy "
                  "it (tests/unittest/_torch/modeling/test_modeling_llama_min_latency.py, num_hidden_layers cut "
                  "from 48): attention_chunk_size 8192, max_position_embeddings 1048576, num_local_experts 128, "
                  "num_experts_per_tok 1 (a shared expert beside them), interleave_moe_layer_step 2 (24 MoE "
                  "layers, 24 dense), intermediate_size 8192 (an expert's), intermediate_size_mlp 16384 (a dense "
                  "layer's: intermediate_size here, the larger activation); no no_rope_layers list, so the "
                  "default interval of 4 (36 chunked-local layers, 12 NoPE full attention, as Scout); "
                  "num_params and active_params from Meta's Llama 4 model card: 400B total, 17B active "
                  "((400e9 - 17e9) / 127 = 3.016e9 per expert against 24 x 3 x 5120 x 8192 = 3.020e9)",
                  attention_chunk_size=8192, chunked_attention_layers=36, active_params=17e9,
                  num_experts=128, num_experts_per_tok=1),
        ModelSpec("deepseek-v3", 61, 7168, 128, 128, 192, 671e9, 163840, 18432, 129280, 2,
                  _HF + "deepseek-ai/DeepSeek-V3: MLA with kv_lora_rank 512 and qk_rope_head_dim 64 (head_dim: "
                  "qk_nope_head_dim 128 + 64); 671B parameters, 37B active (DeepSeek-V3 technical report, "
                  "arXiv:2412.19437). weights_gib: the FP8 checkpoint as vLLM loads it without the MTP layer: "
                  "671e9 one-byte weights, plus one more byte for each of the 1.96e9 BF16 parameters (embedding, "
                  "lm_head, routers, norms) and 0.16e9 bytes of FP32 block scales (one per 128 x 128 block). "
                  "n_routed_experts 256, num_experts_per_tok 8 (plus n_shared_experts 1 and first_k_dense_replace "
                  "3 dense layers, both in what every token reads); expert_weight_bits: FP8 plus its FP32 block "
                  "scale, 8 + 32 / 128^2. replicated_weights_gib: the q_a / kv_a projections, routers and norms vLLM "
                  "keeps whole on every tensor-parallel GPU, 1,138,633,568 bytes (_DSV3_REPLICATED_BYTES in "
                  "allocators/catalog.py); replicated_params: their parameters, 1,030,919,680 "
                  "(_DSV3_REPLICATED_PARAMS). num_nextn_predict_layers 1 (config.json): one MTP module, an MLA "
                  "layer, which vLLM loads only as --speculative-config's mtp drafter",
                  kv_lora_rank=512, qk_rope_head_dim=64, weights_gib=(671e9 + 1.96e9 + 0.16e9) / GIB,
                  active_params=37e9, num_experts=256, num_experts_per_tok=8, expert_weight_bits=8 + 32 / 128**2,
                  replicated_weights_gib=_DSV3_REPLICATED_BYTES / GIB, replicated_params=_DSV3_REPLICATED_PARAMS,
                  num_nextn_predict_layers=1),
        ModelSpec("deepseek-v3.2", 61, 7168, 128, 128, 192, 671e9 + 61 * _DSV32_INDEXER_PARAMS, 163840, 18432, 129280, 2,
                  _HF + "deepseek-ai/DeepSeek-V3.2-Exp (and DeepSeek-V3.2): DeepSeek-V3's architecture (the entry "
                  "above, whose MLA, experts and FP8 checkpoint it keeps) plus a lightning indexer in every layer: "
                  "index_topk 2048, index_n_heads 64, index_head_dim 128 (no index_topk_freq, so vLLM 0.33 gives "
                  "every layer an indexer: DeepseekV32Attention in vllm/models/deepseek_v32/attention.py). The "
                  "indexer's parameters per layer, as DeepseekV32Indexer builds them: wq_b 1536 x 64 x 128, wk "
                  "7168 x 128, weights_proj 7168 x 64, k_norm 2 x 128, 13,959,424; 61 layers add 0.8515e9 to "
                  "DeepSeek-V3's 671e9 total and 37e9 active (every token passes through them). weights_gib: "
                  "DeepSeek-V3's plus, per layer, wq_b in FP8 with FP32 128 x 128 block scales (12,582,912 + "
                  "3,072 bytes), wk and weights_proj as the BF16 wk_weights_proj vLLM merges and upcasts them to "
                  "(2,752,512) and the FP32 k_norm (1,024): 15,339,520 bytes x 61. KV: vLLM's indexer key cache "
                  "(fp8 + one FP32 scale per 128: 132 bytes a layer) beside the latent, which fp8 stores as "
                  "FlashMLA's 656-byte fp8_ds_mla record on FLASHMLA_SPARSE, as plain 576 bytes on FlashInfer's "
                  "sparse backends (allocators/kv_layout.py, allocators/mla_backends.py). "
                  "replicated_weights_gib: DeepSeek-V3's plus the whole indexer, which vLLM builds replicated "
                  "(wq_b a ReplicatedLinear, wk_weights_proj disable_tp=True, k_norm): 1,138,633,568 + 61 x "
                  "15,339,520 = 2,074,344,288 bytes. replicated_params: the same layers' parameters, DeepSeek-V3's "
                  "1,030,919,680 plus the indexer's 61 x 13,959,424 = 1,882,444,544 (_DSV3_REPLICATED_PARAMS, "
                  "_DSV32_INDEXER_PARAMS in allocators/catalog.py)",
                  kv_lora_rank=512, qk_rope_head_dim=64,
                  weights_gib=(671e9 + 1.96e9 + 0.16e9 + 61 * 15_339_520) / GIB,
                  active_params=37e9 + 61 * _DSV32_INDEXER_PARAMS, num_experts=256, num_experts_per_tok=8,
                  expert_weight_bits=8 + 32 / 128**2, index_topk=2048, index_head_dim=128, index_n_heads=64,
                  replicated_weights_gib=(_DSV3_REPLICATED_BYTES + 61 * 15_339_520) / GIB,
                  replicated_params=_DSV3_REPLICATED_PARAMS + 61 * _DSV32_INDEXER_PARAMS),
        ModelSpec("codellama-34b", 48, 8192, 64, 8, 128, 33.746e9, 16384, 22016, 32000, 2,
                  _HF + "codellama/CodeLlama-34b-Instruct-hf (num_params: the tensors vLLM 0.11 loads, 62.86 GiB "
                  "in bf16, as its log reports)"),
        ModelSpec("qwen2.5-7b", 28, 3584, 28, 4, 128, 7.6156e9, 131072, 18944, 152064, 2,
                  _HF + "Qwen/Qwen2.5-7B (num_params: every tensor incl. QKV biases and the untied lm_head)"),
        ModelSpec("qwen3-8b", 36, 4096, 32, 8, 128, 8.19e9, 40960, 12288, 151936, 2, _HF + "Qwen/Qwen3-8B"),
        ModelSpec("qwen3-32b", 64, 5120, 64, 8, 128, 32_762_123_264, 40960, 25600, 151936, 2,
                  _HF + "Qwen/Qwen3-32B (as public copies of it give it; layers and heads as the Qwen3 technical "
                  "report's Table 1, arXiv:2505.09388): head_dim 128 (64 x 128 is not hidden_size 5120), untied "
                  "lm_head. num_params summed as vLLM's Qwen3ForCausalLM builds it: embedding and lm_head 2 x 151936 "
                  "x 5120, 64 layers of 487,598,336 (q_proj 5120 x 8192, k and v 5120 x 1024, o_proj 8192 x 5120, "
                  "q/k norms 128, MLP 3 x 5120 x 25600, two norms), final norm: 32.76e9 (the card's 32.8B)"),
        ModelSpec("qwen3-30b-a3b", 48, 2048, 32, 4, 128, 30_532_122_624, 40960, 6144, 151936, 2,
                  _HF + "Qwen/Qwen3-30B-A3B (as public copies of it give it; layers, heads and experts as the "
                  "Qwen3 technical report's Table 2, arXiv:2505.09388): head_dim 128, num_experts 128, "
                  "num_experts_per_tok 8, moe_intermediate_size 768, every layer MoE (decoder_sparse_step 1, "
                  "mlp_only_layers []), untied lm_head; intermediate_size 6144, which vLLM builds no dense MLP "
                  "of, is 8 x 768, the expert width a token is routed through (what the activation reserve "
                  "reads). num_params summed as vLLM's Qwen3MoeForCausalLM builds it: embedding and lm_head 2 x "
                  "151936 x 2048, 48 layers of 18,874,880 attention (q_proj 2048 x 4096, k and v 2048 x 512, "
                  "o_proj 4096 x 2048, q/k norms), 128 experts of 3 x 2048 x 768, the 2048 x 128 router and two "
                  "norms, final norm: 30.53e9 (the card's 30.5B); active_params the same with 8 experts a layer: "
                  "3.35e9 (the card's 3.3B)",
                  active_params=3_353_032_704, num_experts=128, num_experts_per_tok=8),
        ModelSpec("qwen3-235b-a22b", 94, 4096, 64, 4, 128, 235_093_634_560, 40960, 12288, 151936, 2,
                  _HF + "Qwen/Qwen3-235B-A22B (as public copies of it give it; layers, heads and experts as the "
                  "Qwen3 technical report's Table 2, arXiv:2505.09388): head_dim 128, num_experts 128, "
                  "num_experts_per_tok 8, moe_intermediate_size 1536, every layer MoE, untied lm_head; "
                  "intermediate_size 12288 = 8 x 1536 (as qwen3-30b-a3b's). num_params summed as vLLM builds it: "
                  "embedding and lm_head 2 x 151936 x 4096, 94 layers of 71,303,424 attention (q_proj 4096 x "
                  "8192, k and v 4096 x 512, o_proj 8192 x 4096, q/k norms), 128 experts of 3 x 4096 x 1536, the "
                  "4096 x 128 router and two norms, final norm: 235.09e9 (the card's 235B); active_params with 8 "
                  "experts a layer: 22.19e9 (the card's 22B)",
                  active_params=22_190_763_520, num_experts=128, num_experts_per_tok=8),
        ModelSpec("nemotron-h-8b", 52, 4096, 32, 8, 128, 8_100_852_736, 8192, 21504, 131072, 2,
                  _HF + f"nvidia/Nemotron-H-8B-Base-8K: hybrid_override_pattern {_NEMOTRON_H_8B_PATTERN} "
                  "(52 layers: 24 Mamba-2 'M', 4 attention '*', 24 MLP-only '-'); attention 32 "
                  "heads, 8 KV heads, attention_head_dim 128; Mamba-2 mamba_num_heads 128, mamba_head_dim 64, "
                  "ssm_state_size 128, n_groups 8, conv_kernel 4; no mamba_ssm_cache_dtype, so vLLM 0.33 keeps "
                  "the SSM state in float32 (NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE). "
                  "num_params: summed from the config, untied embedding and lm_head 2 x 131072 x 4096, 24 Mamba "
                  "layers of 109,640,064 (in_proj 4096 x 18560, conv1d 10240 x 4 + bias, dt_bias, A_log, D, "
                  "gated norm 8192, out_proj 8192 x 4096, norm), 4 attention layers of 41,947,136 and 24 relu2 "
                  "MLP layers of 176,164,864 (up and down 4096 x 21504, norm), final norm: 8,100,852,736 (the "
                  "model card's 8B)",
                  attention_layers=4, mamba=Mamba2Layers(
                      24, 128, 64, 128, 8, 4, "float32",
                      groups_first=first_layer_recurrent(_NEMOTRON_H_8B_PATTERN, "M"))),
        ModelSpec("qwen3-next-80b-a3b", 48, 2048, 16, 2, 256, 79_674_391_296, 262144, 512, 151936, 2,
                  "Qwen/Qwen3-Next-80B-A3B-Instruct (Qwen3NextForCausalLM), from transformers' Qwen3NextConfig "
                  "defaults (src/transformers/models/qwen3_next/configuration_qwen3_next.py at commit "
                  "008e574391258935f3ecc3035c882e73bbcac419, whose docstring names that checkpoint; config.json "
                  "itself was not reachable): 48 layers, hidden 2048, layer_types every 4th full_attention "
                  "(full_attention_interval 4: 12 gated attention layers, 36 gated DeltaNet), attention 16 heads, "
                  "2 KV heads, head_dim 256; gated DeltaNet linear_num_key_heads 16, linear_num_value_heads 32, "
                  "linear_key_head_dim 128, linear_value_head_dim 128, linear_conv_kernel_dim 4, no "
                  "mamba_ssm_cache_dtype handler in vLLM 0.33 (recurrent state at the model's bf16); num_experts "
                  "512, num_experts_per_tok 10, moe_intermediate_size 512, one shared expert of 512, every layer "
                  "MoE (decoder_sparse_step 1, mlp_only_layers []); vocab 151936, untied lm_head. max_seq_len: the "
                  "model card's native context of 262,144 tokens (transformers' class default is 32768). "
                  "intermediate_size: the 512-wide expert MLP every layer runs (config.json's dense "
                  "intermediate_size is unused by vLLM: no dense MLP layer). num_params, as vLLM 0.33's "
                  "Qwen3NextForCausalLM builds it (model_executor/models/qwen3_next.py, "
                  "layers/mamba/gdn/qwen_gdn_linear_attn.py; the MTP layer's weights are skipped): embedding and "
                  "lm_head 2 x 151936 x 2048, 48 MoE blocks of 1,614,809,088 (512 experts of 3 x 2048 x 512, the "
                  "shared expert, its 2048 x 1 gate, the 2048 x 512 router) and 2 norms of 2048, 12 attention "
                  "layers of 27,263,488 (qkv_proj 2048 x (16 x 256 x 2 with the output gate + 2 x 2 x 256), o_proj "
                  "4096 x 2048, q/k norms) and 36 gated DeltaNet layers of 33,718,464 (in_proj_qkvz 2048 x 12288, "
                  "in_proj_ba 2048 x 64, conv1d 8192 x 4, dt_bias, A_log, norm 128, out_proj 4096 x 2048), final "
                  "norm: 79,674,391,296 (the card's 80B). active_params: all but 502 unrouted experts a layer, "
                  "3,874,929,408 (the card's 3B activated counts no embedding and lm_head: 3.25e9). "
                  "num_nextn_predict_layers 1: the checkpoint's one MTP layer (config.json's mtp_num_hidden_layers "
                  "1, not read here), as vLLM 0.33's Qwen3NextMultiTokenPredictor builds it, "
                  "getattr(config, 'num_nextn_predict_layers', 1) decoder layers of layer_type full_attention "
                  "(model_executor/models/qwen3_next_mtp.py:63 and 89-96; transformers' Qwen3NextConfig has no "
                  "such field, so the default 1)",
                  active_params=3_874_929_408, num_experts=512, num_experts_per_tok=10, num_nextn_predict_layers=1,
                  attention_layers=12, mamba=GatedDeltaNetLayers(
                      36, 16, 32, 128, 128, 4,
                      groups_first=first_layer_recurrent(_QWEN3_NEXT_LAYER_TYPES, "linear_attention"))),
        ModelSpec("jamba-1.5-mini", 32, 4096, 32, 8, 128, 51_570_323_328, 262144, 14336, 65536, 2,
                  "ai21labs/AI21-Jamba-1.5-Mini (JambaForCausalLM): config.json as transcribed in "
                  "sdpython/experimental-experiment, experimental_experiment/torch_models/llm_model_helper.py "
                  "(get_ai21_jamba_15_mini, commit 04097e3040047505e7cac0c2c9040ff294fdd980; the Hugging Face page "
                  "itself was not reachable), the same values as transformers 5.20's JambaConfig defaults "
                  "(models/jamba/configuration_jamba.py, for ai21labs/Jamba-v0.1) but mamba_dt_rank 256 (the "
                  "default's ceil(4096 / 16) too): 32 layers, hidden 4096, attention 32 heads, 8 KV heads "
                  "(head_dim 4096 / 32), attn_layer_period 8, attn_layer_offset 4 (4 attention layers, 28 "
                  "Mamba-1), Mamba-1 mamba_expand 2 (intermediate 8192), mamba_d_state 16, mamba_d_conv 4, no "
                  "mamba_ssm_cache_dtype handler in vLLM 0.33 (state at the model's bf16); num_experts 16, "
                  "num_experts_per_tok 2 every expert_layer_period 2nd layer from expert_layer_offset 1 (16 MoE "
                  "layers), intermediate_size 14336, vocab 65536, untied lm_head, max_position_embeddings 262144, "
                  "torch_dtype bfloat16. num_params: counted from transformers' JambaForCausalLM built from that "
                  "config (the tensors vLLM 0.33's JambaForCausalLM loads: embedding and lm_head 2 x 65536 x 4096, "
                  "28 Mamba-1 mixers of 105,308,448 (in_proj 4096 x 16384, conv1d 8192 x 4 + bias, x_proj 8192 x "
                  "288, dt_proj 256 x 8192 + bias, A 8192 x 16, D, out_proj 8192 x 4096, dt/B/C norms), 4 "
                  "attention layers of 41,943,040, 16 dense MLPs and 16 MoE blocks of 16 experts of 176,160,768 "
                  "plus a 4096 x 16 router, 2 norms a layer, the final norm): 51,570,323,328 (the model card's "
                  "52B); active_params: all but 14 unrouted experts in each of the 16 MoE layers, "
                  "12,110,311,296 (the card's 12B active)",
                  active_params=51_570_323_328 - 16 * 14 * _JAMBA_EXPERT_MLP, num_experts=16, num_experts_per_tok=2,
                  attention_layers=4, mamba=Mamba1Layers(
                      28, 2 * 4096, 16, 4,
                      groups_first=first_layer_recurrent(_JAMBA_LAYERS_BLOCK_TYPE, "mamba"))),
    ]
}

_MIB = 1024**2

GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in [
        GpuSpec("a100-40gb", 40960 * _MIB, 1555, 312, 25, "NVIDIA A100 data sheet (SXM4 40GB)", 8.0),
        GpuSpec("a100-80gb", 81920 * _MIB, 2039, 312, 25, "NVIDIA A100 data sheet (SXM4 80GB)", 8.0),
        GpuSpec("h100-80gb", 81559 * _MIB, 3350, 989, 50, "NVIDIA H100 data sheet (SXM5), dense BF16", 9.0),
        GpuSpec("h200", 143771 * _MIB, 4800, 989, 50, "NVIDIA H200 data sheet (SXM), dense BF16", 9.0),
        GpuSpec("b200", 183359 * _MIB, 8000, 2250, 50,
                "NVIDIA HGX B200 (1,000 W): HBM3e 8 TB/s and dense BF16 2.25 PFLOP/s (half the sparse 4.5) as "
                "NVIDIA publishes them; memory as nvidia-smi reports a B200 (183,359 MiB, e.g. the log in "
                "NVIDIA/TensorRT-LLM issue 10278); the host link PCIe Gen5 x16 as the H100's (the board's host "
                "CPUs are Gen5). pytorch/ao PR 4002 reads a 7,680-bit bus from the driver, 7.67 TB/s, 4% under "
                "the published peak, which the cost profiles' bandwidth efficiency absorbs as it does every GPU's",
                10.0),
        GpuSpec("l4", 23034 * _MIB, 300, 121, 25, "NVIDIA L4 data sheet, dense BF16", 8.9),
        GpuSpec("a10g", 23028 * _MIB, 600, 70, 25, "AWS G5 / NVIDIA A10G, dense BF16", 8.6),
        GpuSpec("cpu", 64 * GIB, 22.2, 0.0864, 22.2,
                "the host CPU, not an accelerator: one AMD EPYC core as `kvsim calibrate --device cpu` measured "
                "it (copy 22.2 GB/s, float32 matmul 86 GFLOP/s; a CPU calibration's own measured peaks replace "
                "these); memory a nominal 64 GiB of host RAM. For trying calibrate -> run without a GPU"),
    ]
}


class UnknownNameError(KeyError, ValueError):
    """A model or GPU the catalog does not have. A KeyError, as these lookups have always raised (``except
    KeyError`` keeps working), and a ValueError, as every other bad setting is; its text is the message
    itself, where a plain KeyError shows the message's repr (``KeyError: "unknown gpu 'H100'; ..."``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def get_model(name: str) -> ModelSpec:
    try:
        return MODELS[name.lower()]
    except KeyError:
        raise UnknownNameError(f"unknown model {name!r}; valid choices: {', '.join(MODELS)}") from None


def get_gpu(name: str) -> GpuSpec:
    try:
        return GPUS[name.lower()]
    except KeyError:
        raise UnknownNameError(f"unknown gpu {name!r}; valid choices: {', '.join(GPUS)}") from None
