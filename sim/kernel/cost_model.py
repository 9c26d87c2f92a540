"""How long one engine step takes: a roofline over the catalog, a constant, or a calibrated table.

A step reads the weights once and the KV cache of every token it attends to, and does ``2 x params`` FLOPs
per token plus attention (``active_params`` for a mixture of experts, which reads only the routed experts its
tokens touch: see below). Its time is the larger of the compute time and the memory time at achievable
fractions of the peaks, plus a fixed per-step overhead (scheduling, sampling, kernel launches)::

    t = overhead + seqs x seq_overhead + prefill_tokens x prefill_token
        + max(compute, memory) [+ (1 - mixed_overlap) x min(compute, memory) when the step prefills]
        + copy-on-write copies at HBM bandwidth + swap traffic over PCIe + page mappings (vAttention)

    compute = flops / (flops_frac * peak_flops),  memory = bytes / (bandwidth_frac * peak_bw)

``seqs`` counts the sequences the step schedules (decoding ones and prefill chunks): the per-sequence CPU
work of scheduling, sampling and output processing. ``mixed_overlap`` is how much of the smaller of compute
and memory time hides under the larger in a step that prefills (1: a pure roofline; real mixed steps overlap
only partly). Pure decode steps keep the roofline's ``max``, so a decode run stays linear in the step index.

Copies and swaps are charged for the token slots they really move (slots x KV bytes per token), whatever the
allocator: a paged copy moves a whole block, a contiguous fork copies the parent's tokens into the child's
slab, a swap moves every block of a paged sequence or a slab's tokens in one transfer. A hybrid pool (vLLM's
manager for sliding-window models) counts group slots, one token in one KV cache group of ``unit`` layers, so
its slot moves ``unit / layers`` of a token's KV and a block's transfer makes that share of the per-layer copy
calls (``slot_frac``: Gemma-3-12B's six groups of 8 layers make it 1/6).

A hybrid Mamba-2 model (Nemotron-H) pairs queries with keys and reads KV in its attention layers only
(`allocators.roofline.pair_flops`, its KV bytes per token), and each of its Mamba layers reads and writes every
scheduled sequence's conv and SSM state once a step, charged as bytes
(`allocators.roofline.mamba_state_bytes_per_seq`); the selective scan's own FLOPs are not counted (approximate).

Named, sourced sets of coefficients are `sim.kernel.cost_profiles` (``--cost-profile``); the dataclass defaults
of `StepCostModel` are the plain roofline kvsim used before profiles existed (``paper-2023`` keeps them). Their
sources:

- ``bandwidth_frac = 0.8``: decode GEMV and paged-attention kernels typically reach 75-85% of HBM peak.
- ``flops_frac = 0.6``: large prefill GEMMs typically reach 50-70% of dense BF16 peak (model FLOPs utilisation).
- ``step_overhead_s = 0.003``: vLLM's per-step CPU work (scheduling, block tables, sampling) is a few ms.
- ``paged_kernel_overhead``: the paper's paged attention kernel is 20-26% slower than a contiguous one
  (Kwon et al. 2023, section 7.1 and Fig. 18a), least so at 16-32 tokens per block; small blocks gather more.
  It multiplies the KV bytes read; contiguous allocators use 1.0.
- ``swap_copy_latency_s = 3.6e-6``: vLLM swaps with one ``cudaMemcpyAsync`` per block, layer and K/V, each with
  a fixed cost of a few microseconds, which is why swapping is poor at small block sizes (paper, section 7.4).
  3.6 us is that fixed cost measured on an H200 (PCIe Gen5 x16, 2026-12-04, two runs): per-block copies of
  2-128 KiB between pinned host memory and the GPU, launched by one C++ loop (``torch._foreach_copy_``) as
  ``swap_blocks`` launches them, took 3.1-5.6 us a call, 3.6 us beyond their bytes at the catalog's 50 GB/s
  on average, both ways; replayed from a CUDA graph (no launch at all), 2.5-2.7 us beyond their bytes
  (`gpu_validation.host_transfer`, ``docs/validation.md``). It was an estimate of 5 us before. Loads moved by one
  transfer kernel a layer and K/V (HiCache's pattern, which `radix` is charged as) took 0.72-0.97 of this
  charge as graph replays.
- ``page_map_latency_s = 37.44e-6``: vAttention maps a page set with a ``cuMemMap`` and a ``cuMemSetAccess`` per
  layer and per K/V tensor (per latent tensor for MLA) (``MAP_PAGES`` / ``map_cuda_pages`` in microsoft/vattention's
  ``vattention/``), on physical handles created up front (``reserve_physical_pages``), synchronously in its
  ``_sync`` mode. 37.44 us is the two calls' mean latency on 2 MB pages of an A100, measured by a public CUDA VMM
  microbenchmark (``cuMemMap`` 1.45 us + ``cuMemSetAccess`` 35.99 us, 4,096 pages, one thread;
  magnate3/linux-riscv-dev, ``nccl/gpu/shm/bench_vmm/README.md``), not the paper's own figure (not at hand). The
  paper hides most of it by mapping in a background thread during the step, which kvsim does not model, so the
  charge is an upper bound. One value for every page size (the paper's 64 KB pages need its driver extension,
  whose latency is not public here).
- Host-tier loads (``--cpu-offload-gib``): a host hit is a swap-in of its blocks, charged the same way (its
  bytes at the catalog GPU's ``pcie_gb_s``, host-to-device over PCIe, plus ``swap_copy_latency_s`` per
  block, layer and K/V): vLLM's offloading connector loads with the same per-block ``cudaMemcpyAsync``
  copies. `radix` (SGLang's HiCache) pays the copy latency once per load instead of once per block: HiCache
  moves a load with one transfer kernel per layer (``--hicache-io-backend kernel``), and per page at page
  size 1 would charge a latency per token (`Allocator.reload_transfers`). Offloads (device to host) are not
  charged: they run asynchronously beside compute in vLLM's connector, and nothing waits on them.

Tensor parallelism divides FLOPs and bytes over the GPUs (but those of the layers vLLM keeps whole on each: the
mixtures-of-experts paragraph below). Its communication is charged only when a
calibration table (``--calibration`` or ``--cost-profile FILE``) gives ``allreduce_latency_s`` and
``allreduce_bus_gb_s`` (the user's own nccl-tests ``all_reduce_perf``: small-message time, bus bandwidth):
two all-reduces per layer per forward pass, each the latency plus every token's 16-bit hidden state moved
``2 (tp - 1) / tp`` times over the bus, a per-step and a per-token term, so decode runs stay in closed form.
The shipped profiles give none (no public measurement of vLLM's all-reduces at hand), and a run with
``tensor_parallel > 1`` without them says so in its summary (``clock_omits``, `StepCostModel.omits`); what
NCCL's would add at OPT-66B and 175B is in ``docs/reproduction.md``.

Mixtures of experts (gpt-oss, DeepSeek-V3: catalog ``num_experts`` and ``num_experts_per_tok``): a step of ``T``
tokens reads every weight but the routed experts, and of those the expected share ``1 - (1 - k / E) ^ T`` its
tokens are routed to under uniform routing (`allocators.expert_routing`, an upper bound for real, skewed
routers), at the same ``bandwidth_frac`` (`StepCostModel.weights_time`). gpt-oss-20b at batch 1 reads 4 of
its 32 experts per layer, DeepSeek-V3 8 of 256, and a large batch nearly all of them. A decode run's ``T`` is
its ``n`` sequences, constant along the run, so its steps stay linear. A data-parallel lock-step's experts run
every rank's tokens of the step (`sim.kernel.lockstep`): there ``T`` for the routed experts' FLOPs and touched
share is the ranks' sum (`StepCostModel.step_time`'s ``expert_tokens``). Memory still holds every expert
(capacity counts the whole ``weight_bytes``). With tensor parallelism every GPU holds a slice of every expert
(vLLM's default without ``--enable-expert-parallel``), so each reads its slice of the touched ones, and the whole
of the weights vLLM replicates (catalog ``replicated_weights_gib``: DeepSeek's MLA down-projections, routers,
norms and sparse indexer), as each holds them (`ModelSpec.weight_bytes_per_gpu`). Each also does those layers'
FLOPs for every token of the step (catalog ``replicated_params``: a token's linear FLOPs per GPU are
``2 x ((active_params - replicated_params) / tp + replicated_params)``, `roofline.token_flops_per_gpu`).

Sliding windows (Mistral, Gemma 3, gpt-oss): a window layer attends to, and reads the KV of, at most the window's
last tokens, so a step's attention pairs and KV bytes are ``(1 - w) x full + w x clipped``, with ``w`` the share
of layers that have a window and ``clipped`` the same count with each sequence's keys capped at the window
(`sim.kernel.window_context`). This is the attention kernel's work, whatever the memory manager keeps
(``--disable-hybrid-kv-cache-manager`` keeps every token's KV, and the kernel still reads only the window).
Chunked-local attention (Llama 4, catalog ``attention_chunk_size``) is the same with ``clipped`` each token's
keys in its own chunk so far: ``(c - 1) mod C + 1`` for a token at position ``c`` (`ChunkContext`).

Sparse MLA (DeepSeek-V3.2, catalog ``index_topk``): every layer's attention pairs a query with, and reads the
latent of, at most ``index_topk`` keys (the same clipped figures, with the top-k as the window, over all layers:
prefill chunks read each of their keys at most once, ``min(context, chunk x k)``); its lightning indexer scores
every key (``2 x index_n_heads x index_head_dim`` FLOPs a pair and layer, `allocators.roofline.index_pair_flops`)
and reads every key's indexer key. vLLM replicates the indexer on every tensor-parallel GPU (its projections are
``ReplicatedLinear``, its cache ``max_tp_shards=1``), so its FLOPs are not divided over them. A decode run's
indexer terms grow with the whole context, its attention terms with the sequences still below the top-k, and a
run ends before one passes it, so it stays in closed form.

A run of ``k`` pure decode steps of ``n`` sequences has durations linear in the step index on each side of
the roofline's crossover (the per-sequence term is a constant ``n x seq_overhead`` per step), so `decode_run`
sums them, and their index-weighted sum, in closed form (O(1) per run). With windows the clipped count grows
by the sequences still inside the window; a run ends before one leaves it, so it stays linear. With chunks it
grows by every sequence, and a run ends before one starts a chunk (its count drops back to one key).

This module is the cost models' one import path and holds the constant model; the roofline model is
``roofline_cost.py`` (its closed-form sums ``decode_sums.py``), the calibrated one ``calibrated_cost.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.kernel.calibrated_cost import (
    OPTIONAL_COEFFICIENTS,
    CalibratedStepCost,
    coefficients_from_table,
    read_calibration,
)
from sim.kernel.roofline_cost import DEFAULT_PAGED_KERNEL_OVERHEAD, StepCostModel, kernel_overhead


class ConstantStepCost(StepCostModel):
    """Every step (prefill, decode, idle-free) takes ``step_time`` seconds, whatever it does: for
    hand-checkable scenarios and for ``--step-time``. Copies and swaps are free."""

    def __init__(self, step_time: float) -> None:
        if not step_time > 0:
            raise ValueError(f"step_time must be positive, got {step_time!r}")
        self.constant = float(step_time)
        self.source = f"constant {step_time:g} s"
        self.step_overhead_s = self.constant

    def step_time(self, prefill_tokens: int, decode_seqs: int, context_tokens: int, copies: int = 0,
                  swap_blocks: int = 0, attention_pairs: int | None = None, *, copy_slots: int | None = None,
                  swap_slots: int | None = None, prefill_seqs: int | None = None, page_maps: int = 0,
                  window_context: int | None = None, window_pairs: int | None = None,
                  expert_tokens: int | None = None) -> float:
        return self.constant

    def transfer_time(self, copy_slots: int = 0, swap_slots: int = 0, swap_transfers: int = 0,
                      page_maps: int = 0) -> float:
        return 0.0

    def empty_step_s(self) -> float:
        """An empty step takes the step time too: a load is seen done at the end of a whole step."""
        return self.constant

    def _sums(self, n: int, c0: int, k: int, window: tuple[int, int] | None = None) -> tuple[float, float]:
        return self.constant * k, self.constant * (k * (k - 1) // 2)

    def decode_prefix(self, n: int, c0: int, window: tuple[int, int] | None = None) -> Callable[[int], float]:
        constant = self.constant
        return lambda m: constant * m

    def drafter_time(self, tokens: int, pairs: int, context: int, seqs: int, draft_context: int, passes: int,
                     layers: int) -> float:
        return 0.0  # the given step time is the whole step's, drafting included

    def omits(self) -> tuple[str, ...]:
        return ()  # a given step time claims no physics

    def describe(self) -> dict:
        return {"cost_model": self.source}


__all__ = ["DEFAULT_PAGED_KERNEL_OVERHEAD", "OPTIONAL_COEFFICIENTS", "CalibratedStepCost", "ConstantStepCost",
           "StepCostModel", "coefficients_from_table", "kernel_overhead", "read_calibration"]
