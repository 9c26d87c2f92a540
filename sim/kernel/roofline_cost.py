"""The roofline step-cost model: the per-token, per-pair and per-byte terms assembled from the catalog
(`allocators.roofline`), one step's time, and a decode run's sums in closed form (`decode_sums`).

The formula, its terms and the sources of the default coefficients are ``cost_model.py``'s docstring; that
module is the import path the rest of kvsim uses (it re-exports `StepCostModel`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from allocators import roofline
from allocators.catalog import GpuSpec, ModelSpec
from allocators.decode_context_parallel import communication_omitted
from allocators.expert_parallel import routed_divisor
from allocators.vattention_pages import cache_tensors
from sim.kernel.data_parallel import data_parallel_exchange
from sim.kernel.decode_sums import crossover, linear_sums

DEFAULT_PAGED_KERNEL_OVERHEAD = {1: 1.6, 2: 1.45, 4: 1.34, 8: 1.26, 16: 1.2, 32: 1.2, 64: 1.22, 128: 1.26,
                                 256: 1.3}


def kernel_overhead(table: dict[int, float], block_size: int) -> float:
    """The table's factor at ``block_size``, log-linearly interpolated between its entries (clamped)."""
    if block_size in table:
        return table[block_size]
    sizes = sorted(table)
    if block_size <= sizes[0]:
        return table[sizes[0]]
    if block_size >= sizes[-1]:
        return table[sizes[-1]]
    hi = next(s for s in sizes if s > block_size)
    lo = max(s for s in sizes if s < block_size)
    w = (math.log(block_size) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return table[lo] + w * (table[hi] - table[lo])


@dataclass
class StepCostModel:
    """The roofline step-cost model (the default). ``sim/kernel/cost_model.py``'s docstring gives the formula and
    the sources of the default coefficients."""

    model: ModelSpec
    gpu: GpuSpec
    block_size: int = 16
    paged: bool = True
    tensor_parallel: int = 1
    bandwidth_frac: float = 0.8
    flops_frac: float = 0.6
    step_overhead_s: float = 0.003
    paged_kernel_overhead: dict[int, float] = field(default_factory=lambda: dict(DEFAULT_PAGED_KERNEL_OVERHEAD))
    swap_copy_latency_s: float = 3.6e-6
    page_map_latency_s: float = 37.44e-6
    seq_overhead_s: float = 0.0
    prefill_token_s: float = 0.0
    mixed_overlap: float = 1.0
    allreduce_latency_s: float = 0.0
    allreduce_bus_gb_s: float = 0.0
    slot_frac: float = 1.0
    source: str = "roofline (default coefficients)"
    profile: str = ""
    data_parallel: int = 1
    expert_parallel: bool = False
    decode_context_parallel: int = 1  # GPUs each token's KV is sharded over (`allocators.decode_context_parallel`)

    def __post_init__(self) -> None:
        if not (0 < self.bandwidth_frac <= 1 and 0 < self.flops_frac <= 1 and self.step_overhead_s >= 0):
            raise ValueError("cost model: bandwidth_frac and flops_frac must be in (0, 1], step_overhead_s >= 0")
        if not (self.seq_overhead_s >= 0 and self.prefill_token_s >= 0 and 0 <= self.mixed_overlap <= 1):
            raise ValueError("cost model: seq_overhead_s and prefill_token_s must be >= 0, mixed_overlap in [0, 1]")
        if not (self.allreduce_latency_s >= 0 and self.allreduce_bus_gb_s >= 0):
            raise ValueError("cost model: allreduce_latency_s and allreduce_bus_gb_s must be >= 0")
        if not 0 < self.slot_frac <= 1:
            raise ValueError(f"cost model: slot_frac must be in (0, 1], got {self.slot_frac}")
        m, tp = self.model, self.tensor_parallel
        flops_s = self.flops_frac * self.gpu.bf16_tflops * 1e12
        bytes_s = self.bandwidth_frac * self.gpu.hbm_bandwidth_gb_s * 1e9
        ovh = kernel_overhead(self.paged_kernel_overhead, self.block_size) if self.paged else 1.0
        # one token's KV across the GPUs: the model's bytes, times the copies GPUs keep (MLA's latent on each),
        # once per decode-context-parallel group (each GPU of one stores and reads its share of the tokens)
        kv = m.kv_bytes_per_token_per_gpu(tp) * (tp // self.decode_context_parallel)
        # seconds per unit, per GPU; every GPU runs the replicated layers for all the step's tokens
        self._t_token_flops = roofline.token_flops_per_gpu(m, tp) / flops_s
        self._t_pair_flops = roofline.pair_flops(m) / tp / flops_s
        # the weights every step reads (a dense model's all), and a mixture of experts' routed experts, read as
        # far as a step's tokens touch them (`weights_time`); each GPU reads the replicated ones whole (all among
        # the fixed: vLLM splits every expert), as capacity holds them (`ModelSpec.weight_bytes_per_gpu`)
        fixed, routed = roofline.step_weight_split(m)
        self._t_weights = m.weight_bytes_per_gpu(tp, fixed) / bytes_s
        # the routed experts are split over every data-parallel rank's GPUs (`allocators.expert_parallel`), and in
        # vLLM's lock-step MoE layers each GPU runs the tokens of every rank through its share (`weights_time`)
        divisor = routed_divisor(m, tp, self.data_parallel, self.expert_parallel)
        self._t_routed = routed / divisor / bytes_s
        # a lock-step's token FLOPs split (`step_time`'s ``expert_tokens``): a rank's own layers per token of its
        # batch, and per token of the shared step the FLOPs of the routed experts its fullest GPU holds
        self._t_own_token_flops = roofline.non_expert_token_flops_per_gpu(m, tp) / flops_s
        self._t_expert_token_flops = roofline.routed_token_flops(m) / divisor / flops_s
        self._t_kv_read = kv * ovh / tp / bytes_s
        # a hybrid Mamba model's layers read and write each sequence's recurrent state once a step (per GPU)
        self._t_mamba_seq = roofline.mamba_state_bytes_per_seq(m, tp) / bytes_s
        self._t_kv_write = kv / tp / bytes_s
        # a pool slot is one token's KV in `slot_frac` of the layers (a hybrid pool's group slot: `unit` layers)
        slot = kv * self.slot_frac
        self._t_copy_slot = 2 * slot / tp / bytes_s  # read and write one slot's KV in HBM
        self._t_swap_slot = slot / tp / (self.gpu.pcie_gb_s * 1e9)  # one slot's KV over PCIe
        # one copy call per layer of the block, K and V
        self._t_swap_transfer = 2 * m.num_layers * self.slot_frac * self.swap_copy_latency_s
        self._t_page_map = cache_tensors(m) * self.page_map_latency_s  # a page set: a map call per cache tensor
        # tensor-parallel all-reduces, when the coefficients are given (0: not modelled, `omits` says so): two
        # per layer (Megatron's split: after attention's output projection and after the MLP) of each
        # token's 16-bit hidden state, a ring moving 2 (tp - 1) / tp of it over the bus bandwidth
        calls = 2 * m.num_layers if tp > 1 else 0
        self._t_comm_step = calls * self.allreduce_latency_s
        self._t_comm_token = (calls * m.hidden_size * 2 * 2 * (tp - 1) / tp / (self.allreduce_bus_gb_s * 1e9)
                              if calls and self.allreduce_bus_gb_s else 0.0)
        # sliding-window layers attend to (and read the KV of) at most the window's last tokens, chunked-local
        # layers (Llama 4's) those of the token's own chunk
        self.window_frac = ((m.sliding_window_layers or m.num_layers) / m.num_layers if m.sliding_window is not None
                            else (m.chunked_attention_layers or m.num_layers) / m.num_layers
                            if m.attention_chunk_size is not None else 0.0)
        # sparse MLA: attention pairs a query with (and reads the latent of) at most index_topk keys, the
        # clipped figures; the indexer scores and reads every key's indexer key. vLLM replicates the indexer on
        # every GPU (`ReplicatedLinear`, and the key cache's ``max_tp_shards=1``): its terms are not divided
        self.sparse = m.sparse_attention
        if self.sparse:
            indexer = sum(g.indexer_bytes_per_token for g in m.kv_groups())
            self._t_index_pair = roofline.index_pair_flops(m) / flops_s
            self._t_index_read = indexer * ovh / bytes_s
            self._t_latent_read = self._t_kv_read - self._t_index_read

    def weights_time(self, tokens: int, expert_tokens: int | None = None) -> float:
        """Seconds to read the weights a step of ``tokens`` tokens (decode and prefill) needs: all of a dense
        model's; a mixture of experts' shared part and its routed experts' expected touched share
        (`roofline.step_weight_bytes`), touched by ``expert_tokens`` (`step_time`). The one place a step's
        weight time is computed: `step_time` and the decode runs' closed forms (`_decode_lines`, constant
        ``tokens`` along a run) both call it."""
        if not self._t_routed:
            return self._t_weights
        # with data parallelism every rank's tokens reach each GPU's experts: a lock-step gives their sum; a step
        # priced without it (a drafter's passes) takes the ranks as full as this one
        touching = tokens * self.data_parallel if expert_tokens is None else expert_tokens
        return self._t_weights + self._t_routed * roofline.expert_read_fraction(self.model, touching)

    def _token_compute(self, tokens: int, expert_tokens: int | None) -> float:
        """Seconds of a step's per-token FLOPs: ``tokens`` through every layer (`roofline.token_flops_per_gpu`),
        or, given ``expert_tokens`` (`step_time`), ``tokens`` through the rank's own layers and ``expert_tokens``
        through the routed experts this GPU holds."""
        if expert_tokens is None:
            return tokens * self._t_token_flops
        return tokens * self._t_own_token_flops + expert_tokens * self._t_expert_token_flops

    def empty_step_s(self) -> float:
        """How long an engine step that schedules nothing takes (vLLM's, while the engine waits for KV loads it
        has started): none, as vLLM returns such a step without running the model, so a load is seen done as it
        lands."""
        return 0.0

    def transfer_time(self, copy_slots: int = 0, swap_slots: int = 0, swap_transfers: int = 0,
                      page_maps: int = 0) -> float:
        """Seconds for copies, swaps and page mappings: the bytes really moved (``copy_slots`` token slots
        copied inside HBM, ``swap_slots`` over PCIe), a fixed latency per swap transfer (a block, or a whole
        slab), and per page set mapped into a virtual range (vAttention: a map call per layer and K/V)."""
        return (copy_slots * self._t_copy_slot + swap_slots * self._t_swap_slot
                + swap_transfers * self._t_swap_transfer + page_maps * self._t_page_map)

    def load_time(self, swap_slots: int, swap_transfers: int) -> float:
        """Seconds a host-tier load beside the steps takes (``--offload-loads async``, `HostLoads`): what a sync
        load charges its step (`transfer_time`), on a copy stream of its own. Apart from `transfer_time` because
        it is priced outside any step row, which whoever records the rows' prices (`RecordingStepCost`) must
        know."""
        return self.transfer_time(swap_slots=swap_slots, swap_transfers=swap_transfers)

    def step_time(self, prefill_tokens: int, decode_seqs: int, context_tokens: int, copies: int = 0,
                  swap_blocks: int = 0, attention_pairs: int | None = None, *, copy_slots: int | None = None,
                  swap_slots: int | None = None, prefill_seqs: int | None = None, page_maps: int = 0,
                  window_context: int | None = None, window_pairs: int | None = None,
                  expert_tokens: int | None = None) -> float:
        """Seconds for one step. ``context_tokens``: KV tokens attention reads; ``attention_pairs``: query-key
        pairs (default ``context_tokens``, exact for decode; prefill chunks pass their triangle).
        ``prefill_seqs``: sequences the prefill tokens belong to (default: one if there are any).
        ``window_context`` and ``window_pairs``: the same, each sequence's keys clipped to the model's sliding
        window, which is what its window layers read (`window_frac` of the layers); ignored for a model without
        windows, and taken as the full figures if not given.

        ``copies`` and ``swap_blocks`` count copy-on-write copies and swap transfers; ``copy_slots`` and
        ``swap_slots`` are the token slots they move (`StepPlan`), which is what is charged. Without them
        every copy and transfer is taken to be one block of ``block_size`` slots (exact for paged allocators,
        not for a contiguous slab). ``page_maps``: page sets mapped this step (`transfer_time`).

        ``expert_tokens``: the tokens this step's routed experts run on each GPU where that is not this step's
        own, a mixture of experts' data-parallel lock-step (`sim.kernel.lockstep`): vLLM gathers every rank's
        tokens of the shared step into each GPU's MoE layers, so their FLOPs (that sum's, over the GPUs sharing
        the experts) and the expert weights they touch follow that sum; the rest of the step is this rank's own.
        None (every independent clock): the step's own tokens, times ``data_parallel`` (`weights_time`)."""
        tokens = prefill_tokens + decode_seqs
        if tokens == 0 and copies == 0 and swap_blocks == 0 and not copy_slots and not swap_slots and not page_maps:
            return 0.0
        pairs = context_tokens if attention_pairs is None else attention_pairs
        read = context_tokens
        if self.sparse:
            compute, memory = self._sparse_terms(tokens, pairs, read, window_context, window_pairs, expert_tokens)
        elif self.window_frac and window_context is not None:
            fw = self.window_frac
            pairs -= fw * (pairs - (window_context if window_pairs is None else window_pairs))
            read -= fw * (read - window_context)
        if not self.sparse:
            compute = self._token_compute(tokens, expert_tokens) + pairs * self._t_pair_flops
            memory = self.weights_time(tokens, expert_tokens) + read * self._t_kv_read + tokens * self._t_kv_write
        if self._t_mamba_seq:  # each sequence's Mamba state, read and written
            memory += (decode_seqs + ((1 if prefill_tokens else 0) if prefill_seqs is None else prefill_seqs)
                       ) * self._t_mamba_seq
        longer, shorter = (compute, memory) if compute > memory else (memory, compute)
        t = self.step_overhead_s + longer
        if self.seq_overhead_s:
            seqs = decode_seqs + ((1 if prefill_tokens else 0) if prefill_seqs is None else prefill_seqs)
            t += seqs * self.seq_overhead_s
        if prefill_tokens:
            t += (1.0 - self.mixed_overlap) * shorter + prefill_tokens * self.prefill_token_s
        if tokens and (self._t_comm_step or self._t_comm_token):  # a forward pass: its all-reduces
            t += self._t_comm_step + tokens * self._t_comm_token
        if copies or swap_blocks or copy_slots or swap_slots or page_maps:
            t += self.transfer_time(copies * self.block_size if copy_slots is None else copy_slots,
                                    swap_blocks * self.block_size if swap_slots is None else swap_slots,
                                    swap_blocks, page_maps)
        return t

    def drafter_time(self, tokens: int, pairs: int, context: int, seqs: int, draft_context: int, passes: int,
                     layers: int) -> float:
        """Seconds a model-based speculative drafter of ``layers`` layers (EAGLE, EAGLE-3, MTP) adds to a step
        (`sim.kernel.spec_decode`: vLLM's proposer): one pass over the step's ``tokens`` query tokens
        (``pairs`` query-key pairs over ``context`` KV tokens), then ``passes - 1`` over ``seqs`` requests' one
        token each, reading ``draft_context`` tokens; each pass samples ``seqs`` tokens through the LM head.
        Each pass is priced as this roofline prices a step, with the terms of the model's average layer times
        ``layers`` (weights, FLOPs, KV reads and writes) plus the LM head's weights (``vocab x hidden``, read
        each pass) and FLOPs; no launch overhead. Approximate, as the docstring of `sim.kernel.spec_decode`
        says."""
        if not (layers and seqs):
            return 0.0
        m, tp = self.model, self.tensor_parallel
        f = layers / m.num_layers
        flops_s = self.flops_frac * self.gpu.bf16_tflops * 1e12
        bytes_s = self.bandwidth_frac * self.gpu.hbm_bandwidth_gb_s * 1e9
        head_flops = 2 * m.vocab_size * m.hidden_size / tp / flops_s  # one sampled token through the LM head
        head_bytes = m.vocab_size * m.hidden_size * m.dtype_bytes / tp / bytes_s

        def one_pass(query: int, pair: int, read: int) -> float:
            compute = f * (query * self._t_token_flops + pair * self._t_pair_flops) + seqs * head_flops
            memory = (f * (self.weights_time(query) + read * self._t_kv_read + query * self._t_kv_write)
                      + head_bytes)
            return max(compute, memory)

        return one_pass(tokens, pairs, context) + (passes - 1) * one_pass(seqs, draft_context, draft_context)

    def _sparse_terms(self, tokens: int, pairs: float, read: float, window_context: int | None,
                      window_pairs: int | None, expert_tokens: int | None = None) -> tuple[float, float]:
        """(compute, memory) seconds of a sparse MLA model's step: attention over the pairs and latent reads
        clipped to ``index_topk`` keys a query (``window_context``, ``window_pairs``: the scheduler's clipped
        figures, the full ones where not given), the indexer over all of them; ``expert_tokens``: `step_time`'s."""
        top_read = read if window_context is None else window_context
        top_pairs = pairs if window_context is None else window_context if window_pairs is None else window_pairs
        compute = (self._token_compute(tokens, expert_tokens) + top_pairs * self._t_pair_flops
                   + pairs * self._t_index_pair)
        memory = (self.weights_time(tokens, expert_tokens) + top_read * self._t_latent_read + read * self._t_index_read
                  + tokens * self._t_kv_write)
        return compute, memory

    def _decode_lines(self, n: int, c0: int, window: tuple[int, int] | None = None
                      ) -> tuple[float, float, float, float]:
        """Compute and memory time of decode step j as (a1 + b1 j, a2 + b2 j), context c0 + n j. ``window``:
        (clipped context at j = 0, sequences still inside the window), for a model with sliding windows: its
        window layers read ``wc0 + wn j`` tokens (`DecodeSet.window_context`; the run ends before any sequence
        leaves the window, so that stays linear). A sparse MLA model's window is its ``index_topk``: attention
        pairs and latent reads are the clipped line, the indexer's the full one."""
        if self.sparse:  # `_sparse_terms` along the run: the top-k figures grow by the sequences below k
            wc0, wn = (c0, n) if window is None else window
            a1 = n * self._t_token_flops + wc0 * self._t_pair_flops + c0 * self._t_index_pair
            b1 = wn * self._t_pair_flops + n * self._t_index_pair
            a2 = self.weights_time(n) + wc0 * self._t_latent_read + c0 * self._t_index_read + n * self._t_kv_write
            b2 = wn * self._t_latent_read + n * self._t_index_read
            return a1, b1, a2, b2
        c, g = c0, n
        if window is not None and self.window_frac:
            fw, (wc0, wn) = self.window_frac, window
            c, g = c0 - fw * (c0 - wc0), n - fw * (n - wn)
        a1 = n * self._t_token_flops + c * self._t_pair_flops
        b1 = g * self._t_pair_flops
        a2 = self.weights_time(n) + c * self._t_kv_read + n * self._t_kv_write + n * self._t_mamba_seq
        b2 = g * self._t_kv_read
        return a1, b1, a2, b2

    def _per_step(self, n: int) -> float:
        """The fixed seconds of a decode step of ``n`` sequences: the step's own and ``n`` sequences' CPU work,
        and its all-reduces (`step_time` adds the same terms)."""
        return self.step_overhead_s + n * self.seq_overhead_s + self._t_comm_step + n * self._t_comm_token

    def _sums(self, n: int, c0: int, k: int, window: tuple[int, int] | None = None) -> tuple[float, float]:
        a1, b1, a2, b2 = self._decode_lines(n, c0, window)
        o = self._per_step(n)
        last = k - 1
        if (a2 >= a1) == (a2 + b2 * last >= a1 + b1 * last):  # one line wins at both ends, so throughout
            a, b = (a2, b2) if a2 >= a1 else (a1, b1)
            a += o
            sj = k * last // 2
            return a * k + b * sj, a * sj + b * (last * k * (2 * k - 1) // 6)
        # compute minus memory is linear in j, so one side wins on [0, m) and the other on [m, k)
        mc, head, tail = crossover(a1, b1, a2, b2)
        m = min(mc, k)
        total = weighted = 0.0
        for (a, b), (lo, hi) in ((head, (0, m)), (tail, (m, k))):
            cnt, sj, sjj = linear_sums(lo, hi)
            if cnt:
                a += o
                total += a * cnt + b * sj
                weighted += a * sj + b * sjj
        return total, weighted

    def decode_run(self, n: int, c0: int, k: int, window: tuple[int, int] | None = None) -> tuple[float, float]:
        """For ``k`` decode steps of ``n`` sequences starting at context ``c0`` (growing by ``n`` a step):
        (sum of durations, sum of j x duration_j), j = 0..k-1. ``window``: see `_decode_lines`."""
        if k <= 0 or n <= 0:
            return 0.0, 0.0
        return self._sums(n, c0, k, window)

    def decode_prefix(self, n: int, c0: int, window: tuple[int, int] | None = None) -> Callable[[int], float]:
        """For decode steps of ``n`` sequences starting at context ``c0``: a function giving the seconds the
        first ``m`` steps take (when step ``m`` starts). O(1) per call: the fast-forward asks it once per
        sub-event to integrate memory without re-summing the run. ``window``: see `_decode_lines`."""
        mc, head, tail = crossover(*self._decode_lines(n, c0, window))
        o = self._per_step(n)
        ha, hb = head[0] + o, head[1] / 2
        ta, tb = tail[0] + o, tail[1] / 2
        at_mc = ha * mc + hb * (mc * (mc - 1))
        s_mc = mc * (mc - 1)

        def prefix(m: int) -> float:
            if m <= mc:
                return ha * m + hb * (m * (m - 1))
            return at_mc + ta * (m - mc) + tb * (m * (m - 1) - s_mc)

        return prefix

    def steps_starting_before(self, n: int, c0: int, k_max: int, horizon: float,
                              prefix: Callable[[int], float] | None = None,
                              window: tuple[int, int] | None = None) -> int:
        """How many of the next ``k_max`` decode steps start strictly before ``horizon`` seconds from now
        (at least 1: the first starts now).

        Durations never shrink along a run (context only grows), so ``horizon`` over the last and the first
        step's duration bracket the answer within a step or two; a short binary search settles it.
        ``prefix``: `decode_prefix` of the same ``n`` and ``c0``, if the caller has it already."""
        if prefix is None:
            prefix = self.decode_prefix(n, c0, window)
        if k_max <= 1 or prefix(k_max - 1) < horizon:
            return max(k_max, 1)
        # the largest m in [0, k_max - 2] whose start prefix(m) is before the horizon (prefix(0) = 0)
        lo, hi = 0, k_max - 2
        longest = prefix(k_max) - prefix(k_max - 1)
        shortest = prefix(1)
        if longest > 0:
            lo = min(max(math.ceil(horizon / longest) - 1, 0), hi)
            if prefix(lo) >= horizon:
                lo = 0
        if shortest > 0:
            hi = min(max(math.ceil(horizon / shortest), lo), hi)
            if hi < k_max - 2 and prefix(hi + 1) < horizon:
                hi = k_max - 2  # the bracket was off (rounding): search the whole range
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if prefix(mid) < horizon:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1 if prefix(lo) < horizon else 1

    def omits(self) -> tuple[str, ...]:
        """What this run's steps cost on real GPUs that the model leaves out, each as a phrase (none: empty):
        the summary's ``clock_omits``, so that a multi-GPU step time is not read as a checked one."""
        omits: tuple[str, ...] = ()
        if self.tensor_parallel > 1 and not (self.allreduce_latency_s and self.allreduce_bus_gb_s):
            omits = (f"tensor-parallel communication: two all-reduces per layer per step across the "
                     f"{self.tensor_parallel} GPUs (step times are optimistic; a calibration table's "
                     "allreduce_latency_s and allreduce_bus_gb_s add them; docs/reproduction.md measured what "
                     "NCCL's would add at OPT-66B and 175B)",)
        if self.data_parallel > 1 and self.model.num_experts:
            omits += (data_parallel_exchange(self.data_parallel),)
        if self.decode_context_parallel > 1:
            omits += (communication_omitted(self.decode_context_parallel),)
        return omits

    def describe(self) -> dict:
        return {"cost_model": self.source, "cost_profile": self.profile, "bandwidth_frac": self.bandwidth_frac,
                "flops_frac": self.flops_frac, "step_overhead_s": self.step_overhead_s,
                "seq_overhead_s": self.seq_overhead_s, "prefill_token_s": self.prefill_token_s,
                "mixed_overlap": self.mixed_overlap} | (
            {"allreduce_latency_s": self.allreduce_latency_s, "allreduce_bus_gb_s": self.allreduce_bus_gb_s}
            if self.allreduce_latency_s or self.allreduce_bus_gb_s else {})
