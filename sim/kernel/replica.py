"""One serving replica, built from a configuration: its KV capacity, allocator (behind `KVMemory`), cost model
and scheduler, and the tables and summary keys every run shares. `sim.kernel.runner` (one replica) and
`sim.kernel.fleet` (several) both build on it, so neither imports the other back.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from allocators import allocator_class, make_allocator
from allocators.arc_tier import ArcTier
from allocators.capacity import KVCapacity, kv_capacity, pool_bytes_per_token, with_drafter_layers
from allocators.catalog import GIB, get_gpu
from allocators.catalog_file import model_with_catalog
from allocators.host_tier import HostTier
from allocators.hybrid import HybridPagedAllocator
from allocators.kv_cache_groups import group_slots, hybrid_disabled, split_kv_groups, uses_hybrid_manager
from allocators.lru_tier import LruTier
from allocators.option_use import hands_out_blocks
from allocators.slab_layout import SlabLayout, ring_options, slab_layout
from allocators.vattention import page_options
from allocators.window_retention import check_retention_interval
from sim.kernel.block_size import run_block_size, scheduler_block_size
from sim.kernel.calibration_store import peaks_of, picked_table
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import CalibratedStepCost, ConstantStepCost, StepCostModel
from sim.kernel.cost_profiles import make_step_cost
from sim.kernel.data_parallel import steps_in_lockstep
from sim.kernel.ignored_settings import cache_aware_ignored, has_host_tier, ignored_settings
from sim.kernel.memory import KVMemory
from sim.kernel.memory_omits import memory_omits
from sim.kernel.metrics import Recorder
from sim.kernel.over_length import beyond_model_context, vllm_refusals
from sim.kernel.parallel_sampling import aggregate, sampling_mode
from sim.kernel.prefix_cache_stats import PrefixCacheStats
from sim.kernel.queue_limits import QueueLimits
from sim.kernel.request_hashes import hash_columns
from sim.kernel.scheduler import Scheduler
from sim.kernel.spec_decode import (
    SpecDecode,
    drafter_layers,
    num_lookahead_tokens,
    parse_speculative,
    speculative_method,
)
from sim.kernel.summary import arrival_keys

MEMORY_MAP_ROWS = 2**22
"""Memory-map snapshots keep one row per slot: a run records at most this many rows in all (about 150 MB as a
table), so a large pool gets fewer snapshots and one above 4M slots none (its summary's ``memory_snapshots``
says how many were taken)."""


def snapshot_count(config: SimConfig, kv_tokens: int, replicas: int = 1) -> int:
    """How many memory-map snapshots a run takes: ``config.memory_snapshots``, fewer when they would exceed
    `MEMORY_MAP_ROWS` rows."""
    return min(config.memory_snapshots, MEMORY_MAP_ROWS // (kv_tokens * replicas))


class SimResult:
    """Per-request table, per-step table, memory-map snapshots, the summary and the configuration.

    The memory-map table is built on first use (``memory`` may be given as a function that builds it): it has
    a row per slot per snapshot, about 4 million for an H200's pool, and most runs (sweeps, ``--json``) never
    read it, so a run does not spend a second building it for nothing."""

    def __init__(self, requests, steps, memory, summary: dict, config: SimConfig) -> None:
        self.requests, self.steps, self.summary, self.config = requests, steps, summary, config
        self._memory = memory

    @property
    def memory(self):
        """The memory-map snapshots: one row per slot per snapshot (`Recorder.memory_frame`)."""
        if callable(self._memory):
            self._memory = self._memory()
        return self._memory


def make_cost_model(config: SimConfig, model, gpu) -> StepCostModel:
    """``--step-time`` wins, then ``--calibration``, then ``--cost-profile``, then the user's or the shipped
    table for this GPU and model (`sim.kernel.calibration_store`), then the default profile
    (`sim.kernel.cost_profiles`)."""
    if config.step_time is not None:
        return ConstantStepCost(config.step_time)
    common = cost_options(config, model, gpu)
    path = picked_table(config.calibration, config.cost_profile, gpu.name, model.name)
    if path is not None:
        return CalibratedStepCost.from_file(path, model, peaks_of(path, gpu), **common)
    return make_step_cost(config.cost_profile, model, gpu, **common)


def slot_frac(config: SimConfig, model) -> float:
    """A pool slot's share of a token's KV: 1, except in a hybrid pool, which counts (and copies, swaps and
    offloads) group slots, each one token in ``unit`` of the layers (`allocators.kv_cache_groups`)."""
    groups = hybrid_kv_groups(config, model)
    if not groups and (rings := slab_rings(config, model)) is not None:  # a slot: a token in a slab's `unit` bytes
        return 1 / rings.per_token
    return split_kv_groups(groups)[0] / sum(g.layers for g in groups) if groups else 1.0


def host_slot_bytes(config: SimConfig, model) -> int:
    """Bytes of a host-tier slot (``--cpu-offload-gib``), a pool slot's: a host block holds a pool block of every
    GPU (vLLM's CPU offloading keeps each rank's own copy, its ``kv_offloading_size`` the sum over ranks, so KV
    that GPUs replicate takes host memory once per GPU too), a speculative drafter's KV layers included (they
    share the target's KV cache group, so its blocks, `drafter_layers`)."""
    drafters = drafter_layers(speculative_method(config.speculative_config), model) \
        if config.speculative_config is not None else 0
    return round(pool_bytes_per_token(model, config.tensor_parallel, drafters,
                                      decode_context_parallel=config.decode_context_parallel_size)
                 * slot_frac(config, model))


def slab_rings(config: SimConfig, model) -> SlabLayout | None:
    """The ring-buffer layout of ``config``'s contiguous slabs on a model with windows (`allocators.slab_layout`),
    else None."""
    options = ring_options(allocator_class(config.allocator), model)
    return slab_layout(options["kv_groups"]) if options else None


def cost_options(config: SimConfig, model, gpu) -> dict:
    """The step-cost model's settings that come from the deployment rather than a profile (``block_size``: the
    run's, `run_block_size`; ``slot_frac``: a slot moves that share of a token's KV and takes that share of the
    per-layer copy calls)."""
    return dict(block_size=run_block_size(config, model, gpu), paged=hands_out_blocks(config.allocator),
                tensor_parallel=config.tensor_parallel, slot_frac=slot_frac(config, model),
                data_parallel=config.data_parallel_size, expert_parallel=config.enable_expert_parallel,
                decode_context_parallel=config.decode_context_parallel_size)


def resolve_capacity(config: SimConfig) -> KVCapacity:
    """The deployment's KV capacity, its model and GPU, after reading ``config.catalog`` (whose entries the
    configuration may name: a sweep point in another process reads the file itself)."""
    model, gpu = model_with_catalog(config.model, config.catalog), get_gpu(config.gpu)
    if model.mamba is not None:  # a hybrid Mamba model runs only as modelled (`sim.kernel.mamba_run`)
        from sim.kernel.mamba_run import mamba_run_refusals

        mamba_run_refusals(config, model)
    return kv_capacity(model, gpu, tensor_parallel=config.tensor_parallel,
                       gpu_memory_utilization=config.gpu_memory_utilization,
                       max_num_batched_tokens=config.max_num_batched_tokens, kv_gib=config.kv_gib,
                       kv_tokens=config.kv_tokens, kv_cache_dtype=config.kv_cache_dtype,
                       data_parallel=config.data_parallel_size, expert_parallel=config.enable_expert_parallel,
                       drafter_layers=drafter_layers(speculative_method(config.speculative_config), model),
                       decode_context_parallel=config.decode_context_parallel_size)


def summary_extra(config: SimConfig, workload, cap: KVCapacity, cost, memory: KVMemory) -> dict:
    """The summary keys that describe the run rather than measure it (``page_size_kib`` and ``page_tokens``:
    None unless the allocator maps pages; ``offload_write_policy``, ``offload_store_threshold``,
    ``offload_eviction_policy`` and ``offload_prompt_only``: None without a host tier, `has_host_tier`;
    ``ignored_settings``, ``clock_omits``, ``memory_omits``, ``beyond_model_context``, a ``--max-model-len``
    above the model's own context, and ``vllm_would_refuse``, why vLLM would not start this server (a KV pool,
    ``memory``'s, short of one ``max_model_len`` request; `vllm_refusals`), only when there are any;
    ``parallel_sampling``, how requests sampled more than once ran, only when there are such requests).
    ``cap``: the deployment's KV capacity (its model at the run's KV dtype, its GPU, where its size came from)."""
    model, gpu = cap.model, cap.gpu
    pages = page_options(allocator_class(config.allocator), model, config.page_size_kib, 0, config.tensor_parallel)
    extra = {
        "workload": getattr(workload, "name", "workload"), "workload_source": getattr(workload, "source", ""),
        "skipped_rows": int(getattr(workload, "skipped_rows", 0)),
        "skipped_reasons": dict(sorted(getattr(workload, "skipped_reasons", {}).items())),
        **arrival_keys(workload),
        "model": model.name, "gpu": gpu.name,
        "block_size": scheduler_block_size(config, model, gpu), "scheduler": config.scheduler, "seed": config.seed,
        "kv_capacity_source": cap.source, **cost.describe(),
        "page_size_kib": config.page_size_kib if pages else None, "page_tokens": pages.get("page_tokens"),
        **{key: getattr(config, key) if has_host_tier(config) else None
           for key in ("offload_write_policy", "offload_store_threshold", "offload_eviction_policy",
                       "offload_prompt_only")},
    }
    if (sampling := sampling_mode(workload)) is not None:
        extra["parallel_sampling"] = sampling
    hybrid = bool(hybrid_kv_groups(config, model))
    priority = getattr(workload, "priority", None)
    beams = np.asarray(workload.beam_width) > 1
    if ignored := ignored_settings(config, hybrid, sessions=bool(getattr(workload, "has_sessions", False)),
                                   model=model, priorities=priority is not None and bool(np.any(priority != 0)),
                                   sampled=sampling is not None, host_tier=memory.host_tier,
                                   beams=bool(beams.any()), forks=bool((beams | (np.asarray(workload.n) > 1)).any())):
        extra["ignored_settings"] = ignored
    if omits := cost.omits():
        extra["clock_omits"] = list(omits)
    rings = bool(ring_options(allocator_class(config.allocator), model))
    if omits := memory_omits(config, model, window_rings=rings):
        extra["memory_omits"] = list(omits)
    if note := beyond_model_context(config.max_model_len, model):
        extra["beyond_model_context"] = note
    max_model_len = config.max_model_len or model.max_seq_len
    if refusals := vllm_refusals(config, max_model_len, memory.longest_request(max_model_len), cap):
        extra["vllm_would_refuse"] = refusals
    return extra


def hybrid_kv_groups(config: SimConfig, model) -> tuple:
    """The model's KV groups when ``paged`` on it is vLLM's hybrid KV cache manager (`allocators.hybrid`): more
    than one group or a local one, unless ``--disable-hybrid-kv-cache-manager`` (or vLLM's own for chunked-local
    attention with EAGLE or MTP, `hybrid_disabled`); else (). A speculative
    drafter's layers join its full group (`allocators.capacity.with_drafter_layers`)."""
    if model.mamba is not None and config.allocator == "paged":  # its Mamba layers are groups of their own
        return model.kv_groups()
    drafters = drafter_layers(speculative_method(config.speculative_config), model)
    groups = with_drafter_layers(model, drafters).kv_groups()
    disabled = hybrid_disabled(config.disable_hybrid_kv_cache_manager, groups, drafter=bool(drafters))
    return groups if uses_hybrid_manager(config.allocator, groups, disabled) else ()


def build_replica(config: SimConfig, model, gpu, kv_tokens: int, recorder: Recorder,
                  cost: StepCostModel | None = None):
    """One serving replica: its KV memory (the allocator behind `KVMemory`), cost model and scheduler (a fleet
    builds one per replica).
    ``cost``: a step-cost model to use instead of the one ``config`` names."""
    max_model_len = config.max_model_len or model.max_seq_len
    block_size = scheduler_block_size(config, model, gpu)  # x --decode-context-parallel-size, as vLLM's scheduler
    options = dict(block_size=block_size, max_model_len=max_model_len, placement=config.placement,
                   prefix_caching=config.prefix_caching, watermark=config.watermark)
    groups = hybrid_kv_groups(config, model)
    # the tokens in flight, which bound what a window group holds per request in the whole-sequence admission
    # check: a batch a step, two under async scheduling (vLLM's ``VllmConfig.max_in_flight_tokens``:
    # ``max_concurrent_batches`` x the budget). Without that check the caps only bound kvsim's refusal of a
    # request that can never fit (`HybridQueries.never_fits`), which keeps one step's tokens.
    two = config.async_scheduling and config.scheduler_reserve_full_isl
    in_flight = config.max_num_batched_tokens * (2 if two else 1)
    retention = config.prefix_cache_retention_interval
    if not groups:  # vLLM's check where no KV cache group slides (a positive interval would do nothing)
        check_retention_interval(retention, block_size, has_window=False)
    if model.mamba is not None:  # its pool: attention and Mamba KV cache groups (`sim.kernel.mamba_run`)
        from sim.kernel.mamba_run import mamba_allocator

        options |= dict(max_num_batched_tokens=in_flight, prefix_cache_retention_interval=retention)
    alloc = (mamba_allocator(config, model, kv_tokens, groups, options) if model.mamba is not None
             else HybridPagedAllocator(kv_tokens, kv_groups=groups, max_num_batched_tokens=in_flight,
                                       prefix_cache_retention_interval=retention, **options) if groups
             else make_allocator(config.allocator, kv_tokens, **options,
                                 **page_options(allocator_class(config.allocator), model, config.page_size_kib,
                                                kv_tokens, config.tensor_parallel),
                                 **ring_options(allocator_class(config.allocator), model)))
    cost = cost or make_cost_model(config, model, gpu)
    swap_slots = int(config.swap_space_gib * GIB * config.tensor_parallel
                     // pool_bytes_per_token(model, config.tensor_parallel,
                                             decode_context_parallel=config.decode_context_parallel_size))
    if groups:  # the host pool counts group slots too
        swap_slots = group_slots(swap_slots, groups, alloc.unit)
    elif (rings := slab_rings(config, model)) is not None:  # and ring-buffer slabs their slots
        swap_slots *= rings.per_token
    slot_bytes = host_slot_bytes(config, model)
    tier = None
    if config.cpu_offload_gib > 0:
        if config.offload_write_policy == "write_through":
            policy = ArcTier if config.offload_eviction_policy == "arc" else LruTier
            tier = policy.from_gib(config.cpu_offload_gib, slot_bytes, block_size,
                                   store_threshold=config.offload_store_threshold,
                                   prompt_only=config.offload_prompt_only)
        else:
            tier = HostTier.from_gib(config.cpu_offload_gib, slot_bytes, block_size)
    # loads beside the steps are vLLM's connector's, which looks the host up to the end of a request's tokens, or
    # with a model-based drafter's lookahead hashes (`SpecDecode.hash_lookahead`) to its last block hashed
    drafter = parse_speculative(config.speculative_config) if config.speculative_config is not None else None
    memory = KVMemory(alloc, tier, host_hits_to_end=config.offload_loads == "async"
                      and not (drafter is not None and num_lookahead_tokens(*drafter)))
    # decoders grow lazily, several steps at once, unless stepped (`--step-by-step`) or verifying drafts; a pool
    # that frees by the tokens processed (async scheduling) is then told the steps
    lazy = not config.step_by_step and config.speculative_config is None
    if config.async_scheduling and groups:  # vLLM frees window blocks by the tokens whose output is processed
        alloc.processed_basis = True
        alloc.step_basis = lazy  # told the steps, as lazily grown decoders take no snapshot
    if config.offload_loads == "async" and groups:
        kind = "Mamba" if model.mamba is not None else "chunked-local" if model.attention_chunk_size else "sliding-window"
        raise ValueError("--offload-loads async needs a model vLLM serves without its hybrid KV cache manager, which "
                         f"is not modelled with it: {model.name} has {kind} layers")
    recorder.describe_pool(memory.slots_per_token, memory.group_names)
    spec = None
    if config.speculative_config is not None:
        method, k = drafter
        spec = SpecDecode(k, config.spec_acceptance_rate, config.seed, max_model_len, method=method,
                          drafter_layers=drafter_layers(method, model), asynchronous=config.async_scheduling)
        if groups and model.mamba is None:  # window groups: accepted drafts told at a free free no window block
            memory.tell_lag = alloc.cache_held
    sched = Scheduler(memory, recorder, continuous=config.scheduler == "continuous",
                      max_num_seqs=config.max_num_seqs, max_num_active_seqs=config.max_num_active_seqs,
                      max_num_batched_tokens=config.max_num_batched_tokens,
                      chunked_prefill=config.chunked_prefill, preemption=config.preemption, swap_slots=swap_slots,
                      max_model_len=max_model_len,
                      lazy=lazy,
                      rng=np.random.default_rng(config.seed), beam_keep_prob=config.beam_keep_prob,
                      long_prefill_token_threshold=config.long_prefill_token_threshold,
                      scheduler_reserve_full_isl=config.scheduler_reserve_full_isl,
                      scheduling_policy=config.scheduling_policy, lpm_max_queue=config.lpm_max_queue,
                      cache_aware_admission_window=config.cache_aware_admission_window
                      if cache_aware_ignored(config, bool(groups)) is None else 0,
                      cache_aware_admission_threshold=config.cache_aware_admission_threshold,
                      sliding_window=model.sliding_window or 0, load_seconds=load_seconds(config, memory, cost),
                      attention_topk=model.index_topk, async_scheduling=config.async_scheduling, spec=spec,
                      attention_chunk_size=model.attention_chunk_size or 0,
                      long_prefill_token_threshold_adaptive=config.long_prefill_token_threshold_adaptive,
                      prefill_schedule_interval=config.prefill_schedule_interval,
                      engine_paced_prefill=steps_in_lockstep(config, model),
                      queue_limits=QueueLimits.of(config))
    return memory, cost, sched


def load_seconds(config: SimConfig, memory: KVMemory, cost) -> Callable[[int], float] | None:
    """With ``offload_loads`` async, the seconds a load of that many host blocks takes beside the steps: what
    the cost model charges a sync load (its bytes over PCIe and its copy calls); None (sync): loads are charged
    to the step that admits them."""
    if config.offload_loads != "async":
        return None
    block_size = memory.block_size
    return lambda blocks: cost.load_time(blocks * block_size, memory.reload_transfers(blocks))


def tier_summary(replicas) -> dict:
    """The host tier's figures for `build_summary`, summed over ``replicas`` (pairs of a `KVMemory` and its
    scheduler's `GroupMechanics`): prompt tokens loaded from the host, its traffic, the stores its threshold
    skipped, its size in blocks; the hit tokens of requests preempted before (any tier); and vLLM's counters of
    the lookups in GPU memory (``prefix_cache``) and in the host tier (``external_prefix_cache``)."""
    tiers = [memory.host_tier for memory, _ in replicas if memory.host_tier is not None]
    return {"host_hit_tokens": sum(groups.host_prompt_tokens for _, groups in replicas),
            "preempted_hit_tokens": sum(groups.preempted_prompt_tokens for _, groups in replicas),
            "prefix_cache": sum((groups.prefix_cache for _, groups in replicas), PrefixCacheStats()),
            "external_prefix_cache": sum((groups.external_prefix_cache for _, groups in replicas), PrefixCacheStats()),
            "offload_bytes": sum(t.offload_bytes for t in tiers), "reload_bytes": sum(t.reload_bytes for t in tiers),
            "offload_stores_skipped": sum(t.skipped_blocks for t in tiers),
            "offload_spills_dropped": sum(t.dropped_blocks for t in tiers),
            "host_tier_blocks": sum(t.num_blocks for t in tiers)}


def requests_frame(workload, rec: Recorder, arrival_s: np.ndarray, cached_by_index: dict[int, int] | None = None,
                   host_by_index: dict[int, int] | None = None, *, fold: bool = True):
    """One row per request (``docs/architecture.md``), with where in its trace file it was read (``trace_row``,
    NA for a request read from no file: the row a user joins results on, once skipped rows have left
    ``request_id`` counting only the rows kept), its multi-turn session and turn (NA where it is no
    session's turn) so that latency can be read per turn, and its shared system prompt (``prefix_group``, NA for
    none, and ``prefix_len``) so that ``kvsim calibrate --from-trace`` replays the hits the run had on it, and
    its samples and beams (``n``, ``beam_width``: vLLM's names; ``num_seqs`` is the larger) and its prefix
    hashes (``hash_ids``, ``prefix_hash_tokens``: `sim.kernel.request_hashes`) for it to replay.
    ``cached_by_index``: prompt tokens each request's admissions found cached, by workload position (absent:
    none); ``host_by_index``: the part of them loaded from the host tier (``host_hit_tokens``; ``gpu_hit_tokens``
    is the rest). A fanned-out workload's children are folded back into their requests
    (`sim.kernel.parallel_sampling.aggregate`), unless ``fold`` is False: one row per child, for a fleet whose
    router sends children to different replicas (`sim.kernel.fleet_summary`'s per-replica summaries)."""
    import pandas as pd

    from workloads.frames import nullable
    from workloads.workload import NONE

    size = len(workload.output_tokens)
    reasons = np.full(size, "", dtype=object)
    for i, reason in rec.reasons.items():
        reasons[i] = reason
    cached = np.zeros(size, np.int64)
    for i, tokens in (cached_by_index or {}).items():
        cached[i] = tokens
    host = np.zeros(size, np.int64)
    for i, tokens in (host_by_index or {}).items():
        host[i] = tokens
    rows = getattr(workload, "trace_row", None)
    c = {"request_id": np.asarray(workload.ids, np.int64),
         "trace_row": np.full(size, NONE, np.int64) if rows is None else np.asarray(rows, np.int64),
         "session_id": np.asarray(workload.session_id, np.int64),
         "turn": np.asarray(workload.turn, np.int64), "prefix_group": np.asarray(workload.prefix_group, np.int64),
         "prefix_len": np.asarray(workload.prefix_len, np.int64), "arrival_s": arrival_s, "admitted_s": rec.admitted_s,
         "first_token_s": rec.first_token_s, "finished_s": rec.finished_s,
         "prompt_tokens": np.asarray(workload.prompt_tokens, np.int64),
         "output_tokens": np.asarray(workload.output_tokens, np.int64),
         "length_capped_tokens": (np.zeros(size, np.int64) if getattr(workload, "length_capped", None) is None
                                  else np.asarray(workload.length_capped, np.int64)),
         "num_seqs": np.maximum(np.asarray(workload.n, np.int64), np.asarray(workload.beam_width, np.int64)),
         "n": np.asarray(workload.n, np.int64), "beam_width": np.asarray(workload.beam_width, np.int64),
         "cached_tokens": cached, "host_tokens": host, "preemptions": rec.preemptions, "rejected": rec.rejected,
         "reject_reason": reasons}
    out = c["output_tokens"]
    with np.errstate(invalid="ignore", divide="ignore"):  # per row: a fanned-out request's per child, as vLLM's
        c["tpot_s"] = np.where(out > 1, (c["finished_s"] - c["first_token_s"]) / np.maximum(out - 1, 1), np.nan)
    if fold and getattr(workload, "fan_parent", None) is not None:
        c = aggregate(c, workload.fan_parent)
    out, tpot = c["output_tokens"], c["tpot_s"]
    ttft = c["first_token_s"] - c["arrival_s"]
    e2e = c["finished_s"] - c["arrival_s"]
    session, prefix = nullable(c["session_id"]), nullable(c["prefix_group"])
    return pd.DataFrame({
        "request_id": c["request_id"], "session_id": session, "turn": nullable(c["turn"], session.isna()),
        "prefix_group": prefix, "prefix_len": np.where(prefix.isna(), 0, c["prefix_len"]),  # no group shares nothing
        "arrival_s": c["arrival_s"], "admitted_s": c["admitted_s"],
        "first_token_s": c["first_token_s"], "finished_s": c["finished_s"], "prompt_tokens": c["prompt_tokens"],
        "output_tokens": out, "length_capped_tokens": c["length_capped_tokens"], "num_seqs": c["num_seqs"],
        "n": c["n"], "beam_width": c["beam_width"],
        "cached_tokens": c["cached_tokens"], "gpu_hit_tokens": c["cached_tokens"] - c["host_tokens"], "host_hit_tokens": c["host_tokens"],
        "preemptions": c["preemptions"], "rejected": c["rejected"], "reject_reason": c["reject_reason"],
        "ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "normalized_latency_s_per_tok": e2e / out,
        "trace_row": nullable(c["trace_row"]),  # then the hashes: the columns before them keep their places
        **hash_columns(workload, fold=fold),
    })

