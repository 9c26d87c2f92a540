"""`SimConfig`: every knob of one simulation run, typed and validated on construction.

Field names are a public interface: the CLI maps its flags onto them and sweeps build configurations by field
name, so a bad value fails here, once, with a one-line reason, rather than deep inside a run.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

import numpy as np

from allocators.kv_layout import kv_element_bytes
from sim.kernel.kv_transfer import parse_kv_transfer_config
from sim.kernel.over_length import OVER_LENGTH
from sim.kernel.parallel_sampling import PARALLEL_SAMPLING
from sim.kernel.queue_limits import check_scope
from sim.kernel.routers import ROUTERS
from sim.kernel.vllm_names import VLLM_ALIASES, VLLM_SHORT_FLAGS
from sim.kernel.waiting_queue import LPM_SORT_LIMIT

SCHEDULERS = ("continuous", "static")
PREEMPTION_MODES = ("recompute", "swap")
_FLAG_NAMES = {"trace_columns": "--columns", "trace_format": "--trace-format"}


def flag(field: str) -> str:
    """The command-line flag that sets a `SimConfig` field (``kv_gib`` -> ``--kv-gib``), for error messages:
    users type flags, not field names."""
    return _FLAG_NAMES.get(field, "--" + field.replace("_", "-"))


MAX_REPLICAS = 10_000
"""Most replicas in a fleet: each is a simulator of its own (about 2.5 ms and 100 kB to build), so 10,000 take
25 s and 1 GB before the first step; --replicas 10**12 (or a `kvsim plan --max-replicas` search that doubled its
way there) ran out of memory instead of running."""

_POSITIVE_INTS = ("tensor_parallel", "max_num_seqs", "max_num_batched_tokens", "replicas", "data_parallel_size",
                  "decode_context_parallel_size", "prefill_schedule_interval")
_OPTIONAL_POSITIVE_INTS = ("kv_tokens", "block_size", "max_model_len", "num_requests", "max_num_active_seqs")
_NON_NEGATIVE_INTS = ("seed", "memory_snapshots", "debug_invariants", "long_prefill_token_threshold",
                      "lpm_max_queue", "prefill_replicas", "decode_replicas", "cache_aware_admission_window")
_OPTIONAL_NON_NEGATIVE_INTS = ("max_num_queued_reqs", "max_num_queued_tokens")
_NUMBERS = {  # field -> (None allowed, in range, what the range is)
    "kv_gib": (True, lambda v: 0 < v < math.inf, "a positive finite number"),
    # at least a microsecond: the clock ties arrivals to a step start within a nanosecond (`ARRIVAL_TIE_S`), so
    # steps of a nanosecond or less broke fast-forward's equality with stepping; no engine's step is that short
    "step_time": (True, lambda v: 1e-6 <= v < math.inf, "a finite number of seconds >= 1e-06"),
    "rate": (True, lambda v: 0 < v < math.inf, "a positive finite number"),
    "gpu_memory_utilization": (False, lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "swap_space_gib": (False, lambda v: 0 <= v < math.inf, "a finite number >= 0"),
    "cpu_offload_gib": (False, lambda v: 0 <= v < math.inf, "a finite number of GiB >= 0"),
    "watermark": (False, lambda v: 0 <= v < 1, "a fraction in [0, 1)"),
    "beam_keep_prob": (False, lambda v: 0 <= v <= 1, "a number in [0, 1]"),
    "cache_aware_admission_threshold": (False, lambda v: 0 <= v <= 1, "a fraction in [0, 1]"),
    "router_load_weight": (False, lambda v: 0 <= v < math.inf, "a finite number >= 0"),
    "router_kv_overlap_score_weight": (False, lambda v: 0 <= v < math.inf, "a finite number >= 0"),
    "kv_transfer_gb_s": (False, lambda v: 0 < v < math.inf, "a finite number > 0"),
    "kv_transfer_latency_s": (False, lambda v: 0 <= v < math.inf, "a finite number >= 0"),
}


def plain_int(value: object) -> int | None:
    """``value`` as a Python int if it is an integer (numpy's too, so a value read off an array or a DataFrame
    works), else None. A bool is not an integer here: ``block_size=True`` is a mistake, not 1."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        return None
    return int(value)


def plain_number(value: object) -> int | float | None:
    """``value`` as a Python int or float if it is a real number (numpy's too), else None (a bool, a string).
    An integer stays an int, so ``to_dict()``, ``config.json`` and sweep point ids are what a Python int gives."""
    whole = plain_int(value)
    if whole is not None:
        return whole
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return None
    return float(value)


def default_router(data_parallel_size: int) -> str:
    """The router a run gets without ``--router``: vLLM's data-parallel load balancer (``dp-lb``) in front of
    ``--data-parallel-size`` > 1 engines, as vLLM's own front end routes them; round-robin otherwise (a
    ``--replicas`` fleet, kvsim's long-standing default)."""
    return "dp-lb" if data_parallel_size > 1 else "round-robin"


SCHEDULING_POLICIES = ("fcfs", "priority", "lpm")
OFFLOAD_WRITE_POLICIES = ("write_back", "write_through")
"""When a block reaches the host tier: when the GPU evicts it, or as soon as it is computed
(`allocators.host_tier`; SGLang HiCache's ``--hicache-write-policy`` values)."""
OFFLOAD_LOAD_MODES = ("sync", "async")
"""How host-tier hits are loaded: charged to the step that admits the request, or beside the steps as vLLM's
offloading connector loads them (`sim.kernel.host_loads`)."""
OFFLOAD_EVICTION_POLICIES = ("lru", "arc")
"""How a write-through host tier picks what to drop: vLLM's CPU offloading ``eviction_policy`` values
(`allocators.lru_tier`, `allocators.arc_tier`)."""


@dataclass(slots=True)
class SimConfig:
    """One run: allocator and its options, deployment (model, GPU, KV size), scheduler, cost model, workload.

    The workload is either ``trace`` (a file) or ``preset`` (a named generator); with neither, `sim.kernel.runner`
    uses the default preset, ``sharegpt-demo`` (400 requests at 2 req/s). ``rate`` re-times arrivals as
    Poisson at that many requests per second and ``num_requests`` truncates or generates that many.
    ``kv_gib`` / ``kv_tokens`` give the KV size directly; otherwise it is derived from the GPU as vLLM does
    (`allocators.capacity.kv_capacity`).
    ``catalog`` is a TOML file of extra models and GPUs, read before ``model`` and ``gpu`` are looked up.
    ``cpu_offload_gib`` is host memory for a KV tier behind the prefix cache (`allocators.host_tier`; 0: none);
    vLLM's name for it is ``--kv-offloading-size`` (``cpu_offload_gb`` is vLLM's *weights* offload, not this).
    ``offload_write_policy`` is when a block reaches that tier: ``write_back`` (when the GPU evicts it) or
    ``write_through`` (when it is computed, as vLLM's offloading connector does); ``offload_store_threshold``
    (write-through; below 2: off) stores a block only once that many requests have offered it (vLLM's
    ``store_threshold``, `allocators.store_filter`); ``offload_eviction_policy`` (write-through) is vLLM's
    ``eviction_policy``: ``lru`` or ``arc``. ``offload_prompt_only`` (write-through) stores a request's prompt
    blocks only, not what it generates (vLLM's ``offload_prompt_only``, on by default). ``offload_loads``:
    ``sync`` charges a host hit's load to the step that admits it (every request in that step waits for it);
    ``async`` runs it beside the steps as vLLM's offloading connector does (the request holds its blocks, waits
    for its load, and is scheduled at the first step that starts after it; the requests behind it go on being
    admitted): `paged` with chunked prefill, each replica of a fleet loading beside its own steps.
    """

    COMMA_FIELDS: ClassVar[tuple[str, ...]] = ("trace_columns", "arrivals")
    """Fields whose one value is itself a comma list (``a=b,c=d``, ``gamma:rate=2,cv=3``): a sweep's command
    line must not split them into grid values."""
    FLAG_ALIASES: ClassVar[dict[str, str]] = {"columns": "trace_columns", **VLLM_ALIASES}
    """Flag names (as ``kvsim run`` spells them) that differ from the field they set: ``--columns`` and vLLM's
    spellings of kvsim's settings (`sim.kernel.vllm_names`), in a sweep's flags and TOML keys as on the command
    line."""
    SHORT_FLAGS: ClassVar[dict[str, str]] = {flag: field for field, flag in VLLM_SHORT_FLAGS.items()}
    """Single-dash flags (vLLM's ``-tp``) -> the field they set, in a sweep's flags as on the command line."""
    WORKLOAD_FIELDS: ClassVar[tuple[str, ...]] = ("trace", "trace_format", "trace_columns", "skip_bad_rows",
                                                  "arrivals", "preset", "rate", "num_requests")
    """Fields that only say which workload `sim.kernel.runner.resolve_workload` loads (``seed`` also seeds the
    run's own draws, so it is not one): a workload passed to `run_simulation` must be the one they name."""

    allocator: str = "paged"
    model: str = "opt-13b"
    gpu: str = "a100-40gb"
    kv_gib: float | None = None
    kv_tokens: int | None = None
    tensor_parallel: int = 1
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = False
    kv_cache_dtype: str = "auto"
    disable_hybrid_kv_cache_manager: bool = False
    block_size: int | None = None  # None: vLLM's choice, 16 or an MLA backend's (`sim.kernel.block_size`)
    page_size_kib: int = 2048
    placement: str = "buddy"
    max_model_len: int | None = None
    over_length: str = "cap"
    scheduler: str = "continuous"
    max_num_seqs: int = 256
    max_num_active_seqs: int | None = None  # vLLM's admission cap below max_num_seqs (None: max_num_seqs)
    max_num_batched_tokens: int = 2048
    chunked_prefill: bool = True
    prefix_caching: bool = True
    preemption: str = "recompute"
    swap_space_gib: float = 4.0
    cpu_offload_gib: float = 0.0
    offload_write_policy: str = "write_back"
    offload_store_threshold: int = 0
    offload_prompt_only: bool = True
    offload_eviction_policy: str = "lru"
    offload_loads: str = "sync"
    watermark: float = 0.0
    long_prefill_token_threshold: int = 0
    long_prefill_token_threshold_adaptive: bool = False  # vLLM's: the threshold floored at a fair share
    prefill_schedule_interval: int = 1  # vLLM's prefill cadence (`sim.kernel.prefill_cadence`)
    max_num_queued_reqs: int | None = None  # vLLM's API-server admission control (`sim.kernel.queue_limits`)
    max_num_queued_tokens: int | None = None
    scheduler_reserve_full_isl: bool = True
    scheduling_policy: str = "fcfs"
    async_scheduling: bool = False  # vLLM's engine argument; vLLM 0.33 turns it on by default (kvsim: off)
    speculative_config: str | None = None  # vLLM's engine argument (JSON); methods ngram, eagle, eagle3, mtp
    spec_acceptance_rate: float | None = None  # kvsim's: each draft token's acceptance probability
    lpm_max_queue: int = LPM_SORT_LIMIT
    cache_aware_admission_window: int = 0  # vLLM 0.34's engine arguments (`sim.kernel.waiting_queue`)
    cache_aware_admission_threshold: float = 0.5
    step_time: float | None = None
    calibration: str | None = None
    cost_profile: str | None = None
    catalog: str | None = None
    seed: int = 0
    trace: str | None = None
    trace_format: str | None = None
    trace_columns: str | None = None
    skip_bad_rows: bool = False
    arrivals: str | None = None
    preset: str | None = None
    rate: float | None = None
    num_requests: int | None = None
    step_by_step: bool = False
    beam_keep_prob: float = 0.8
    parallel_sampling: str = "auto"
    memory_snapshots: int = 12
    debug_invariants: int = 0
    replicas: int = 1
    router: str | None = None  # None: `default_router` (round-robin; dp-lb with --data-parallel-size > 1)
    router_load_weight: float = 1.0
    router_kv_overlap_score_weight: float = 1.0
    data_parallel_size: int = 1  # vLLM's engine argument: engines of --tensor-parallel GPUs each (`_check_data_parallel`)
    enable_expert_parallel: bool = False  # vLLM's engine argument (`allocators.expert_parallel`)
    prefill_replicas: int = 0  # a P/D fleet (`sim.kernel.disaggregation`): 0 and 0 = none
    decode_replicas: int = 0
    kv_transfer_config: str | None = None  # vLLM's engine argument (JSON); only NixlConnector is modelled
    kv_transfer_gb_s: float = 50.0  # each GPU's link, GB/s (`sim.kernel.kv_transfer.DEFAULT_KV_TRANSFER_GB_S`)
    kv_transfer_latency_s: float = 0.0  # each pull's fixed latency
    decode_context_parallel_size: int = 1  # vLLM's engine argument (`allocators.decode_context_parallel`)
    prefix_cache_retention_interval: int | None = 0  # vLLM's engine argument (`allocators.window_retention`)
    api_server_count: int | None = None  # vLLM's serve argument; None: vLLM's default (`api_servers`)

    def _unchecked(self, given: dict[str, tuple[object, object]]) -> list[str]:
        """``flag value`` for each of ``given`` (flag -> (its value, the one vLLM's scheduler was checked with))
        set otherwise, and for a scheduling policy other than FCFS or priority: the settings a scheduler feature
        checked only against vLLM's paged scheduler was not checked with."""
        wrong = [f"{flag} {value}" for flag, (value, want) in given.items() if value != want]
        if self.scheduling_policy not in ("fcfs", "priority"):
            wrong.append(f"--scheduling-policy {self.scheduling_policy}")
        return wrong

    def _check_async_scheduling(self) -> None:
        """``--async-scheduling`` is vLLM v1's ``AsyncScheduler``, checked against it step for step on its
        paged KV cache with chunked prefill, recompute preemption and FCFS or priority order, with or without a
        host tier run as vLLM's offloading connector runs it (write-through, loads beside the steps, LRU or ARC,
        prompt blocks only or generated ones too; `sim.kernel.async_outputs`); any other setting would run a
        combination nobody checked."""
        given = {"--allocator": (self.allocator, "paged"), "--scheduler": (self.scheduler, "continuous"),
                 "--chunked-prefill": (self.chunked_prefill, True), "--preemption": (self.preemption, "recompute")}
        if self.cpu_offload_gib > 0:
            given |= {"--offload-write-policy": (self.offload_write_policy, "write_through"),
                      "--offload-loads": (self.offload_loads, "async"),
                      "--offload-store-threshold >= 2": (self.offload_store_threshold >= 2, False)}
        if wrong := self._unchecked(given):
            raise ValueError("--async-scheduling models vLLM v1's AsyncScheduler on its paged KV cache (--allocator "
                             "paged, --scheduler continuous, chunked prefill, --preemption recompute, "
                             "--scheduling-policy fcfs or priority; a --cpu-offload-gib host tier with "
                             "--offload-write-policy write_through and --offload-loads async); "
                             "not modelled with " + ", ".join(wrong))

    def _check_speculative(self) -> None:
        """``--speculative-config`` is vLLM v1's speculative decoding (`sim.kernel.spec_decode`), checked
        against vLLM's scheduler on its paged KV cache with chunked prefill, recompute preemption, synchronous
        scheduling or async scheduling (vLLM 0.33's ``AsyncScheduler``, its default for every modelled method under
        the V2 model runner; on hybrid Mamba-2 and gated DeltaNet models where drafts are modelled synchronously) and FCFS or priority order, with or
        without a host tier run as vLLM's offloading connector runs it (write-through, loads beside the steps, no
        store threshold; LRU or ARC; prompt blocks only or not); anything
        else is refused. Several replicas (``--replicas``, ``--data-parallel-size``) are as many
        engines, each drafting for its own requests."""
        if self.speculative_config is None:
            if self.spec_acceptance_rate is not None:
                raise ValueError("--spec-acceptance-rate needs --speculative-config")
            return
        from sim.kernel.spec_decode import check_drafter_budget, parse_speculative

        method, k = parse_speculative(self.speculative_config)
        check_drafter_budget(method, k, self.max_num_batched_tokens)
        rate = plain_number(self.spec_acceptance_rate) if self.spec_acceptance_rate is not None else None
        if rate is None or not 0 <= rate <= 1:
            raise ValueError("--speculative-config needs --spec-acceptance-rate P, each draft token's acceptance "
                             f"probability in [0, 1] (kvsim's model of the drafter), got {self.spec_acceptance_rate!r}")
        self.spec_acceptance_rate = rate
        given = {"--allocator": (self.allocator, "paged"), "--scheduler": (self.scheduler, "continuous"),
                 "--chunked-prefill": (self.chunked_prefill, True), "--preemption": (self.preemption, "recompute")}
        if self.cpu_offload_gib > 0:
            given |= {"--offload-write-policy": (self.offload_write_policy, "write_through"),
                      "--offload-loads": (self.offload_loads, "async"),
                      "--offload-store-threshold >= 2": (self.offload_store_threshold >= 2, False)}
        if wrong := self._unchecked(given):
            raise ValueError("--speculative-config models vLLM v1's speculative decoding on its paged KV cache "
                             "(--allocator paged, --scheduler continuous, chunked prefill, --preemption recompute, "
                             "--scheduling-policy fcfs or priority; a --cpu-offload-gib host tier with "
                             "--offload-write-policy write_through and --offload-loads async); "
                             "not modelled with " + ", ".join(wrong))

    def _check_data_parallel(self) -> None:
        """``--data-parallel-size N`` is N replicas of one engine, as vLLM runs N engine cores of
        ``--tensor-parallel`` GPUs each behind one front end: it sets ``replicas`` to N, and another
        ``--replicas`` is refused (a fleet of data-parallel deployments routes twice, once between deployments and
        once by each one's load balancer: not modelled). Without ``--router`` such a fleet routes as vLLM's front
        end does (`default_router`)."""
        if self.data_parallel_size > 1:
            if self.replicas not in (1, self.data_parallel_size):
                raise ValueError(f"give --data-parallel-size {self.data_parallel_size} (that many engine replicas "
                                 f"behind vLLM's load balancer) or --replicas {self.replicas}, not both: a fleet of "
                                 "data-parallel deployments is not modelled")
            self.replicas = self.data_parallel_size
        if self.router is None:
            self.router = default_router(self.data_parallel_size)

    def _check_decode_context_parallel(self) -> None:
        """``--decode-context-parallel-size N`` shards each request's KV over N of the ``--tensor-parallel`` GPUs
        (`allocators.decode_context_parallel`, which refuses what vLLM refuses for a model): it is vLLM's paged
        KV cache's, so another allocator is refused, as is N not dividing the tensor-parallel size."""
        from allocators.option_use import follows_vllm_block_size

        dcp = self.decode_context_parallel_size
        if dcp > 1 and not follows_vllm_block_size(self.allocator):
            raise ValueError(f"--decode-context-parallel-size {dcp} shards vLLM's paged KV cache: it needs "
                             f"--allocator paged or paged-cow, got {self.allocator}")
        if self.tensor_parallel % dcp:
            raise ValueError(f"--decode-context-parallel-size {dcp}: vLLM requires tp_size={self.tensor_parallel} "
                             f"to be divisible by dcp_size={dcp} (DCP shards KV over the tensor-parallel GPUs)")

    def _check_api_server_count(self) -> None:
        """``--api-server-count N``: the API server processes in front of the engines, each running vLLM's
        balancer for the requests reaching it (`sim.kernel.api_servers`). Refused below 1, and above 1 where it
        cannot change a run without ``dp-lb`` (kvsim's other routers stand for a router in front of whole
        servers). With one engine it changes nothing either, but ``kvsim plan`` brackets from one replica, so
        that is reported ignored (`sim.kernel.ignored_settings`), as ``--router`` on one replica is."""
        count = self.api_server_count
        if count is None:
            return
        whole = plain_int(count)
        if whole is None or whole < 1:
            raise ValueError(f"--api-server-count must be a positive integer, got {count!r}")
        self.api_server_count = whole
        if whole > 1 and self.router != "dp-lb":
            raise ValueError(f"--api-server-count {whole}: only vLLM's data-parallel load balancer (--router dp-lb) "
                             f"routes per API server; with --router {self.router} it cannot change the run")

    @property
    def api_servers(self) -> int:
        """The API servers a run has: ``api_server_count``, or vLLM's default without it (``vllm serve`` with its
        internal load balancer: ``args.api_server_count = args.data_parallel_size``, ``entrypoints/cli/serve.py``),
        the number of engines behind ``dp-lb``; one in front of any other router."""
        if self.api_server_count is not None:
            return self.api_server_count
        return self.replicas if self.router == "dp-lb" else 1

    def __post_init__(self) -> None:
        self._check_types()
        self._check_data_parallel()
        self._check_api_server_count()
        self._check_decode_context_parallel()
        check_scope(self)
        from allocators.vattention_pages import PAGE_SIZES_KIB

        page_size = plain_int(self.page_size_kib)  # 2048.0 is refused as any other integer field refuses it
        if page_size not in PAGE_SIZES_KIB:
            raise ValueError(f"--page-size-kib must be one of {', '.join(map(str, PAGE_SIZES_KIB))}, "
                             f"got {self.page_size_kib!r}")
        self.page_size_kib = page_size
        if self.kv_gib is not None and self.kv_tokens is not None:
            raise ValueError("give at most one of --kv-gib and --kv-tokens")
        kv_element_bytes(self.kv_cache_dtype, 2)  # a one-line error for an unknown name
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"--scheduler must be one of {', '.join(SCHEDULERS)}, got {self.scheduler!r}")
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ValueError(f"--scheduling-policy must be one of {', '.join(SCHEDULING_POLICIES)}, "
                             f"got {self.scheduling_policy!r}")
        if self.preemption not in PREEMPTION_MODES:
            raise ValueError(f"--preemption must be one of {', '.join(PREEMPTION_MODES)}, got {self.preemption!r}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(f"--max-num-batched-tokens ({self.max_num_batched_tokens}) must be >= --max-num-seqs "
                             f"({self.max_num_seqs}), as vLLM requires, so every running sequence can decode")
        if self.max_num_active_seqs is not None and self.max_num_active_seqs > self.max_num_seqs:
            raise ValueError(f"--max-num-active-seqs ({self.max_num_active_seqs}) cannot be greater than "
                             f"--max-num-seqs ({self.max_num_seqs}), as vLLM requires")
        if self.offload_write_policy not in OFFLOAD_WRITE_POLICIES:
            raise ValueError(f"--offload-write-policy must be one of {', '.join(OFFLOAD_WRITE_POLICIES)}, "
                             f"got {self.offload_write_policy!r}")
        if self.offload_loads not in OFFLOAD_LOAD_MODES:
            raise ValueError(f"--offload-loads must be one of {', '.join(OFFLOAD_LOAD_MODES)}, got {self.offload_loads!r}")
        if self.offload_loads == "async" and not self.cpu_offload_gib > 0:
            raise ValueError("--offload-loads async loads host-tier hits: it needs --cpu-offload-gib > 0")
        if self.offload_loads == "async" and (self.allocator != "paged" or not self.chunked_prefill
                                              or self.scheduler != "continuous"):
            raise ValueError("--offload-loads async is vLLM's offloading connector: it needs --allocator paged and "
                             "continuous batching with chunked prefill, got --allocator "
                             f"{self.allocator}, --scheduler {self.scheduler}, chunked prefill "
                             f"{'on' if self.chunked_prefill else 'off'}")
        if self.async_scheduling:
            self._check_async_scheduling()
        self._check_speculative()
        if self.over_length not in OVER_LENGTH:
            raise ValueError(f"--over-length must be one of {', '.join(OVER_LENGTH)}, got {self.over_length!r}")
        if self.parallel_sampling not in PARALLEL_SAMPLING:
            raise ValueError(f"--parallel-sampling must be one of {', '.join(PARALLEL_SAMPLING)}, "
                             f"got {self.parallel_sampling!r}")
        if self.offload_eviction_policy not in OFFLOAD_EVICTION_POLICIES:
            raise ValueError(f"--offload-eviction-policy must be one of {', '.join(OFFLOAD_EVICTION_POLICIES)}, "
                             f"got {self.offload_eviction_policy!r}")
        if self.trace is not None and self.preset is not None:
            raise ValueError("give a TRACE file or --preset, not both")
        if self.trace is None and (self.trace_format or self.trace_columns or self.skip_bad_rows or self.arrivals):
            raise ValueError("--trace-format, --columns, --skip-bad-rows and --arrivals apply to a trace file only "
                             "(the TRACE argument)")
        if self.arrivals is not None and self.rate is not None:
            raise ValueError("give --rate (Poisson arrivals at that rate) or --arrivals (a spec such as "
                             "'trace:rate=4' or 'gamma:rate=2,cv=3'), not both")
        if self.cost_profile is not None or self.calibration is not None:
            from sim.kernel.calibrated_cost import coefficients_from_table, read_calibration
            from sim.kernel.cost_profiles import get_profile, is_table_path

            if self.cost_profile is not None and not is_table_path(self.cost_profile):
                get_profile(self.cost_profile)
            for table in (self.calibration, self.cost_profile):  # a bad table fails here, before a run (or
                if table is not None and is_table_path(table):  # a sweep's every point) prints anything
                    coefficients_from_table(read_calibration(table), table)
        if self.router not in ROUTERS:
            raise ValueError(f"--router must be one of {', '.join(ROUTERS)}, got {self.router!r}")
        for name in ("allocator", "model", "gpu", "placement"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{flag(name)} must be a non-empty name, got {getattr(self, name)!r}")
        self._check_names()
        self._check_disaggregation()

    def _check_disaggregation(self) -> None:
        """Refuse what a P/D fleet (`sim.kernel.disaggregation`) does not model, with the reason."""
        p, d = self.prefill_replicas, self.decode_replicas
        if not (p or d):
            if self.kv_transfer_config is not None:
                raise ValueError("--kv-transfer-config needs --prefill-replicas and --decode-replicas (a P/D fleet)")
            return
        if not (p and d):
            raise ValueError("a P/D fleet needs both --prefill-replicas and --decode-replicas >= 1, got "
                             f"{p} and {d}")
        if self.kv_transfer_config is None:
            raise ValueError("--prefill-replicas/--decode-replicas need --kv-transfer-config "
                             "'{\"kv_connector\": \"NixlConnector\", \"kv_role\": \"kv_both\"}' (vLLM's connector)")
        parse_kv_transfer_config(self.kv_transfer_config)
        wrong = []
        if self.data_parallel_size != 1:
            wrong.append(f"--data-parallel-size {self.data_parallel_size} (each role's replicas are the fleet)")
        elif self.replicas != 1:
            wrong.append(f"--replicas {self.replicas} (the fleet is the prefill and decode replicas)")
        if self.router != "round-robin":
            wrong.append(f"--router {self.router} (the P/D proxy picks each side round-robin)")
        for setting, bad in (("--allocator " + self.allocator, self.allocator != "paged"),
                             ("--scheduler " + self.scheduler, self.scheduler != "continuous"),
                             ("--no-chunked-prefill", not self.chunked_prefill),
                             ("--async-scheduling", self.async_scheduling),
                             ("--speculative-config", self.speculative_config is not None),
                             ("--cpu-offload-gib", self.cpu_offload_gib > 0),
                             (f"--decode-context-parallel-size {self.decode_context_parallel_size} (a sharded "
                              "side's transfers)", self.decode_context_parallel_size > 1)):
            if bad:
                wrong.append(setting)
        if wrong:
            raise ValueError("a P/D fleet models vLLM's NixlConnector on its paged KV cache (--allocator paged, "
                             "continuous batching, chunked prefill) behind a round-robin proxy, without async "
                             "scheduling, speculative decoding or a host tier; not modelled with " + ", ".join(wrong))

    def _check_names(self) -> None:
        """``allocator`` and ``placement`` name registered classes, ``model`` and ``gpu`` catalog entries (built
        in, registered, or in ``catalog``, read here without registering it): an unknown name fails here, once,
        not when each run or sweep point starts."""
        from allocators.catalog import GPUS, MODELS, get_gpu, get_model
        from allocators.catalog_file import load_catalog_file
        from allocators.option_use import require_registered

        require_registered(self.allocator, self.placement)

        models, gpus = load_catalog_file(self.catalog) if self.catalog is not None else ({}, {})
        if self.model.lower() not in MODELS and self.model.lower() not in models:
            get_model(self.model)  # its UnknownNameError lists the valid names
        if self.gpu.lower() not in GPUS and self.gpu.lower() not in gpus:
            get_gpu(self.gpu)

    def _check_types(self) -> None:
        """Every bool, integer and number field is one (numpy's scalars accepted, stored as plain Python values),
        and the numbers are in range: a string or a bool there would compare or act by its truth, not its
        meaning (``enforce_eager="False"`` runs as True)."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool":
                if not isinstance(value, (bool, np.bool_)):
                    raise ValueError(f"{flag(f.name)} must be True or False, got {value!r}")
                setattr(self, f.name, bool(value))
        for names, low, kind in ((_POSITIVE_INTS + _OPTIONAL_POSITIVE_INTS, 1, "a positive"),
                                 (_NON_NEGATIVE_INTS + _OPTIONAL_NON_NEGATIVE_INTS, 0, "a non-negative")):
            for name in names:
                value = getattr(self, name)
                if value is None and name in _OPTIONAL_POSITIVE_INTS + _OPTIONAL_NON_NEGATIVE_INTS:
                    continue
                whole = plain_int(value)
                if whole is None or whole < low:
                    raise ValueError(f"{flag(name)} must be {kind} integer, got {value!r}")
                setattr(self, name, whole)
        for name in ("replicas", "prefill_replicas", "decode_replicas"):
            if getattr(self, name) > MAX_REPLICAS:
                raise ValueError(f"{flag(name)} must be at most {MAX_REPLICAS:,}, got {getattr(self, name):,}")
        whole = plain_int(self.offload_store_threshold)
        if whole is None or whole < 0:
            raise ValueError(f"--offload-store-threshold must be a whole number of offers >= 0 (below 2: every "
                             f"block is stored), got {self.offload_store_threshold!r}")
        self.offload_store_threshold = whole
        for name, (optional, in_range, kind) in _NUMBERS.items():
            value = getattr(self, name)
            if value is None and optional:
                continue
            number = plain_number(value)
            if number is None or not in_range(number):
                raise ValueError(f"{flag(name)} must be {kind}, got {value!r}")
            setattr(self, name, number)

    def to_dict(self) -> dict:
        """Plain JSON-ready dict, in field order (written as ``config.json``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> SimConfig:
        """Inverse of `to_dict`; unknown keys are an error naming them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown SimConfig field(s) {unknown}; known: {sorted(known)}")
        return cls(**values)
