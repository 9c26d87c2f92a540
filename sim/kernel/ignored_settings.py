"""Settings a run was given that change nothing in it, each with the reason.

Why: several flags only act on some allocators or modes (a host tier behind a prefix cache, pages on
vAttention, slab placement on contiguous allocators, block size and watermark on block pools, swap space on
swap preemption without a host tier, swap preemption where something can be preempted, a calibration or cost
profile without a fixed step time, a long-prefill threshold (and its adaptive floor) on chunked prefill, an
admission cap below --max-num-seqs, the prefill cadence on continuous batching, the whole-prompt admission check
on chunked prefill by an allocator that allocates chunk by chunk, the beam choice on beam searches, a cache-aware
order on a prefix cache, a router on a fleet, a router's weight on that router). Accepting one silently would let
a user read a run as the answer to the question the flag asked. The summary carries them
as ``ignored_settings`` (flag -> why; the key only when there are any); ``kvsim run``/``compare`` print one
warning each and `sim.kernel.runner.run_simulation` warns them in Python, both in the words of `ignored_lines`
(``kvsim sweep`` counts the points of each). Only values that differ from the default can be told apart from
"not given", so those are the ones reported; ``--block-size`` has no value when not given (vLLM's choice,
`sim.kernel.block_size`), so any given one is.
"""

from __future__ import annotations

from allocators.kv_cache_groups import LOCAL, disable_unifies
from allocators.option_use import (
    allocates_per_chunk,
    hands_out_blocks,
    host_tier_allocators,
    keeps_prefix_cache,
    maps_pages,
    never_outgrows,
    places_slabs,
)
from sim.kernel.config import SimConfig


class SettingWarning(UserWarning):
    """A setting a run ignores, or a ``workers`` count that does not apply: kvsim's own note, which the command
    line prints as one ``Warning:`` line wherever a command runs simulations (``calibrate --from-trace`` replays
    through `run_simulation`), and Python shows in a notebook."""


def has_host_tier(config: SimConfig) -> bool:
    """Whether the run has a host tier: ``--cpu-offload-gib`` behind an allocator that keeps a prefix cache to
    spill, with prefix caching on (`Allocator.attach_host_tier`'s rule); else the flag is reported ignored."""
    return config.cpu_offload_gib > 0 and config.prefix_caching and config.allocator in host_tier_allocators()


def cache_aware_ignored(config: SimConfig, hybrid: bool) -> str | None:
    """Why ``--cache-aware-admission-window`` does nothing in this run (None: it applies). vLLM 0.34 reorders
    only under ``fcfs`` with prefix caching on, and kvsim models it for vLLM's own pools (``paged``, or the
    hybrid pool) under continuous batching."""
    if config.scheduling_policy != "fcfs":
        return f"vLLM reorders by cached prefix under fcfs only, and this run's policy is {config.scheduling_policy}"
    if not config.prefix_caching:
        return "it reorders by cached prefix, and prefix caching is off"
    if config.scheduler != "continuous" or not (hybrid or config.allocator == "paged"):
        return "it is vLLM v1's scheduler's, modelled with --allocator paged and continuous batching"
    return None


def ignored_settings(config: SimConfig, hybrid: bool, sessions: bool = True, model=None,
                     priorities: bool = False, sampled: bool = True, host_tier=None, beams: bool = True,
                     forks: bool = True) -> dict[str, str]:
    """Flag (as given, with its value) -> why it has no effect on this run. ``hybrid``: the run's pool is
    vLLM's hybrid KV cache manager (`sim.kernel.replica.hybrid_kv_groups`); ``sessions``: the workload has
    a ``session_id`` column (without one, session affinity routes as least-requests); ``model``: the model
    served, at its KV dtype (its KV groups decide ``--disable-hybrid-kv-cache-manager``); ``priorities``:
    some request has a priority other than 0 (reported, under the column's name, where the policy does not
    read it);
    ``sampled``: some request is sampled more than once without a beam (what ``--parallel-sampling`` acts on);
    ``host_tier``: the run's tier, if any (one of no blocks holds nothing); ``beams``: some request is a beam
    search (``beam_width`` > 1, what ``--beam-keep-prob`` acts on); ``forks``: some request forks sequences (``n``
    or ``beam_width`` > 1), the only preemption an allocator that reserves final lengths can meet. The workload
    flags default to what reports nothing, for a caller that has no workload."""
    defaults = SimConfig()
    name = config.allocator
    ignored: dict[str, str] = {}
    if config.cpu_offload_gib > 0:
        flag = f"--cpu-offload-gib {config.cpu_offload_gib:g}"
        if name not in host_tier_allocators():
            ignored[flag] = (f"{name} keeps no prefix cache to spill (a host tier sits behind "
                             f"{', '.join(host_tier_allocators())})")
        elif not config.prefix_caching:
            ignored[flag] = "prefix caching is off (--no-prefix-caching), so nothing cached is spilled"
    no_tier = not has_host_tier(config)
    if config.offload_write_policy != defaults.offload_write_policy and no_tier:
        ignored[f"--offload-write-policy {config.offload_write_policy}"] = "this run has no host tier to write to"
    write_through_only = []  # (flag, what a tier would do with it, why a write-back tier ignores it)
    if config.offload_store_threshold >= 2:
        write_through_only.append((f"--offload-store-threshold {config.offload_store_threshold}", "store to",
                                   "it filters write-through stores (vLLM's store_threshold); a write_back tier "
                                   "stores only what the GPU evicts"))
    if config.offload_prompt_only != defaults.offload_prompt_only:
        write_through_only.append(("--no-offload-prompt-only", "store to",
                                   "it widens write-through stores to generated blocks (vLLM's "
                                   "offload_prompt_only); a write_back tier stores what the GPU evicts"))
    if config.offload_eviction_policy != defaults.offload_eviction_policy:
        write_through_only.append((f"--offload-eviction-policy {config.offload_eviction_policy}", "evict from",
                                   "it is vLLM's policy for its write-through tier; the write_back tier (SGLang's) "
                                   "evicts LRU"))
    for flag, verb, why in write_through_only:
        if no_tier:
            ignored[flag] = f"this run has no host tier to {verb}"
        elif config.offload_write_policy != "write_through":
            ignored[flag] = why
    if config.page_size_kib != defaults.page_size_kib and not maps_pages(name):
        ignored[f"--page-size-kib {config.page_size_kib}"] = f"only vattention maps pages; {name} does not"
    if not hands_out_blocks(name):
        if config.block_size is not None:
            holds = "maps pages of --page-size-kib" if maps_pages(name) else "reserves slabs of tokens"
            ignored[f"--block-size {config.block_size}"] = (
                f"{name} {holds}, not blocks (only the paged allocators hand out blocks)")
        if config.watermark != defaults.watermark:
            ignored[f"--watermark {config.watermark:g}"] = (
                f"it keeps a share of a block pool free, and {name} has no block pool")
    if config.placement != defaults.placement and not places_slabs(name):
        ignored[f"--placement {config.placement}"] = f"slab placement applies to contiguous allocators, not {name}"
    if config.long_prefill_token_threshold > 0 and not (config.chunked_prefill and config.scheduler == "continuous"):
        ignored[f"--long-prefill-token-threshold {config.long_prefill_token_threshold}"] = (
            "it caps prefill chunks, and this run has no chunked prefill")
    if config.long_prefill_token_threshold_adaptive:
        if not config.long_prefill_token_threshold:
            ignored["--long-prefill-token-threshold-adaptive"] = (
                "it floors --long-prefill-token-threshold, which is 0 (no cap)")
        elif not (config.chunked_prefill and config.scheduler == "continuous"):
            ignored["--long-prefill-token-threshold-adaptive"] = (
                "it floors the long-prefill threshold, which caps prefill chunks, and this run has no chunked prefill")
    if config.max_num_active_seqs == config.max_num_seqs:
        ignored[f"--max-num-active-seqs {config.max_num_active_seqs}"] = (
            "it lowers the admission cap below --max-num-seqs, and equals it")
    if config.prefill_schedule_interval > 1 and config.scheduler != "continuous":
        ignored[f"--prefill-schedule-interval {config.prefill_schedule_interval}"] = (
            "it holds prefill to one engine step in N, and static batching prefills a batch only when the last "
            "has finished")
    if config.scheduling_policy == "lpm" and not (hybrid and config.prefix_caching
                                                  or keeps_prefix_cache(name, config.prefix_caching)):
        ignored["--scheduling-policy lpm"] = "it orders by cached prefix, and this run keeps no prefix cache: FCFS"
    if config.cache_aware_admission_window and (why := cache_aware_ignored(config, hybrid)) is not None:
        ignored[f"--cache-aware-admission-window {config.cache_aware_admission_window}"] = why
    if (config.cache_aware_admission_threshold != defaults.cache_aware_admission_threshold
            and not config.cache_aware_admission_window):
        ignored[f"--cache-aware-admission-threshold {config.cache_aware_admission_threshold:g}"] = (
            "it gates --cache-aware-admission-window, which is 0")
    if config.lpm_max_queue != defaults.lpm_max_queue and config.scheduling_policy != "lpm":
        ignored[f"--lpm-max-queue {config.lpm_max_queue}"] = (
            f"it bounds lpm's sort, and this run's policy is {config.scheduling_policy}")
    if config.parallel_sampling == "fan-out" and name != "paged":
        ignored["--parallel-sampling fan-out"] = (
            f"it is vLLM v1's engine, modelled for paged; {name} runs a request's samples as one group (fork)")
    if config.scheduler == "static" and config.max_num_batched_tokens != defaults.max_num_batched_tokens:
        ignored[f"--max-num-batched-tokens {config.max_num_batched_tokens}"] = (
            "static batching runs whole prompts without a token budget (the value still sizes the activation "
            "memory reserved before a derived KV cache)")
    if config.beam_keep_prob != defaults.beam_keep_prob and not beams:
        ignored[f"--beam-keep-prob {config.beam_keep_prob:g}"] = (
            "it is the chance a beam keeps its own lineage, and no request of this workload is a beam search "
            "(beam_width > 1)")
    chunked = config.chunked_prefill and config.scheduler == "continuous"
    if not config.scheduler_reserve_full_isl and not (chunked and allocates_per_chunk(name)):
        how = "this run has no chunked prefill" if not chunked else f"{name} holds a whole prompt from its admission"
        ignored["--no-scheduler-reserve-full-isl"] = (
            f"it admits a prompt on room for its first chunk alone, and {how}")
    if config.parallel_sampling != defaults.parallel_sampling and not sampled:
        ignored[f"--parallel-sampling {config.parallel_sampling}"] = (
            "no request of this workload is sampled more than once (n > 1 without a beam)")
    if host_tier is not None and host_tier.num_blocks == 0:
        ignored[f"--cpu-offload-gib {config.cpu_offload_gib:g}"] = (
            f"it is less than one host block ({host_tier.block_bytes:,} bytes), so the tier holds nothing")
    if priorities and config.scheduling_policy != "priority":
        ignored["priority column"] = (f"the policy is {config.scheduling_policy}; only --scheduling-policy priority "
                                      "orders by it (vLLM refuses a priority without that policy)")
    ignored.update(_deployment_settings(config, defaults, model))
    ignored.update(_swap_settings(config, defaults, tiered=not no_tier, preempts=forks or not never_outgrows(name)))
    ignored.update(_clock_settings(config))
    ignored.update(_router_settings(config, defaults, sessions))
    return ignored


def _deployment_settings(config: SimConfig, defaults: SimConfig, model) -> dict[str, str]:
    """A utilization under a given KV size (it only sizes a derived one); eager mode, which changes neither the
    KV cache vLLM 0.11 sizes nor kvsim's clock; and vLLM's flag against its hybrid manager where the run has none
    to disable, or where vLLM keeps the windows anyway (`disable_unifies`)."""
    ignored: dict[str, str] = {}
    given = "--kv-tokens" if config.kv_tokens is not None else "--kv-gib" if config.kv_gib is not None else None
    if given is not None and config.gpu_memory_utilization != defaults.gpu_memory_utilization:
        ignored[f"--gpu-memory-utilization {config.gpu_memory_utilization:g}"] = (
            f"{given} gives the KV memory; this only sizes one derived from the GPU")
    if config.enforce_eager:
        ignored["--enforce-eager"] = ("vLLM 0.11 sizes the KV cache before it captures CUDA graphs, so eager mode "
                                      "leaves its size as it is, and kvsim's step clock does not change with it")
    if config.disable_hybrid_kv_cache_manager:
        flag = "--disable-hybrid-kv-cache-manager"
        groups = model.kv_groups() if model is not None else ()
        if config.allocator != "paged":
            ignored[flag] = (f"only paged is vLLM's hybrid KV cache manager; {config.allocator} keeps every token "
                             "in every layer either way")
        elif model is not None and not any(g.attention in LOCAL for g in groups):
            ignored[flag] = f"{model.name} has no sliding-window or chunked-local layers"
        elif model is not None and not disable_unifies(groups):
            ignored[flag] = (f"every layer of {model.name} has a sliding window, which vLLM keeps: its flag makes "
                             "window layers full attention only beside full-attention layers")
    gpus = config.tensor_parallel * config.data_parallel_size
    if config.enable_expert_parallel and model is not None and model.num_experts and not model.num_experts % gpus:
        ignored["--enable-expert-parallel"] = (
            f"its {gpus} GPUs divide {model.name}'s {model.num_experts} routed experts evenly, so whole experts take "
            "the memory (and a step reads the bytes) of the share of every expert they hold without it "
            "(allocators/expert_parallel.py)")
    return ignored


def _swap_settings(config: SimConfig, defaults: SimConfig, tiered: bool, preempts: bool) -> dict[str, str]:
    """Swap space where nothing is swapped into it: recompute preemption, or a host tier that takes the swapped
    KV instead (`Preemption._swap_room`); swap preemption with no host memory at all, which recomputes; and
    swap preemption where nothing is preempted (``preempts`` False: an allocator that reserves each sequence's
    final length, `Allocator.reserves_final_length`, on a workload whose requests never fork)."""
    ignored: dict[str, str] = {}
    if config.preemption == "swap" and not preempts:
        never = (f"{config.allocator} reserves each sequence's final length when it admits it and no request forks "
                 "(n or beam_width > 1), so nothing is ever preempted")
        ignored["--preemption swap"] = never
        if config.swap_space_gib != defaults.swap_space_gib:
            ignored[f"--swap-space-gib {config.swap_space_gib:g}"] = f"nothing is swapped: {never}"
        return ignored
    if config.swap_space_gib != defaults.swap_space_gib:
        flag = f"--swap-space-gib {config.swap_space_gib:g}"
        if config.preemption != "swap":
            ignored[flag] = f"nothing is swapped: preemption is {config.preemption}"
        elif tiered:
            ignored[flag] = "swapped KV goes to the host tier (--cpu-offload-gib), not to the swap space"
    if config.preemption == "swap" and config.swap_space_gib == 0 and not tiered:
        ignored["--preemption swap"] = ("there is no host memory to swap into (--swap-space-gib 0, no host tier), "
                                        "so every preemption recomputes")
    return ignored


def _clock_settings(config: SimConfig) -> dict[str, str]:
    """The step clock's sources where a stronger one is given: ``--step-time`` wins, then ``--calibration``,
    then ``--cost-profile`` (`sim.kernel.replica.make_cost_model`)."""
    ignored: dict[str, str] = {}
    if config.step_time is not None:
        for flag, value in (("--calibration", config.calibration), ("--cost-profile", config.cost_profile)):
            if value is not None:
                ignored[f"{flag} {value}"] = f"--step-time {config.step_time:g} fixes every step's time"
    elif config.calibration is not None and config.cost_profile is not None:
        ignored[f"--cost-profile {config.cost_profile}"] = f"--calibration {config.calibration} sets the clock"
    return ignored


def _router_settings(config: SimConfig, defaults: SimConfig, sessions: bool) -> dict[str, str]:
    """A router (or several API servers) on one replica, session affinity without sessions, a router's weight
    given to another router."""
    ignored: dict[str, str] = {}
    if config.router != defaults.router and config.replicas == 1:
        ignored[f"--router {config.router}"] = "one replica (--replicas 1): every request goes to it"
    elif config.router == "session-affinity" and not sessions:
        ignored["--router session-affinity"] = ("the workload has no sessions (no session_id column), so every "
                                                "request is routed as least-requests routes it")
    if (config.api_server_count or 1) > 1 and config.replicas == 1:
        ignored[f"--api-server-count {config.api_server_count}"] = ("one engine (--replicas 1): every API server "
                                                                    "sends every request to it")
    weights = (("router_load_weight", "--router-load-weight", "prefix-aware"),
               ("router_kv_overlap_score_weight", "--router-kv-overlap-score-weight", "kv-cost"))
    for field, flag, router in weights:
        value = getattr(config, field)
        if value != getattr(defaults, field) and (config.router != router or config.replicas == 1):
            ignored[f"{flag} {value:g}"] = f"only the {router} router of a fleet (--replicas > 1) reads it"
    return ignored


def ignored_lines(summary: dict) -> list[str]:
    """``RUN: FLAG VALUE ignored: why`` for each of a summary's ``ignored_settings`` (RUN: its ``run`` name, else
    its allocator): the one wording the CLI prints and `run_simulation` warns, so the two cannot drift."""
    name = summary.get("run", summary["allocator"])
    return [f"{name}: {flag} ignored: {why}" for flag, why in summary.get("ignored_settings", {}).items()]
