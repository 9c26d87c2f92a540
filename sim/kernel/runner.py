"""`run_simulation(config, workload)` and `run_config(config)`: one simulation, end to end.

Resolves the deployment (model, GPU, KV capacity), builds the allocator, cost model, scheduler and engine,
runs, and returns a `SimResult` of tidy DataFrames plus the summary dict. `write_result` saves it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from allocators import allocator_class, make_allocator
from allocators.capacity import KVCapacity, kv_capacity
from allocators.catalog import GIB, get_gpu, get_model, register_catalog_file
from sim.kernel.arrivals import ArrivalSource
from sim.kernel.calibration_store import find_calibration, peaks_of
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import CalibratedStepCost, ConstantStepCost, StepCostModel
from sim.kernel.cost_profiles import make_step_cost
from sim.kernel.engine import Engine
from sim.kernel.memory import KVMemory
from sim.kernel.metrics import Recorder
from sim.kernel.scheduler import Scheduler
from sim.kernel.summary import build_summary

MEMORY_MAP_ROWS = 2**22
"""Memory-map snapshots keep one row per slot: a run records at most this many rows in all (about 150 MB as a
table), so a large pool gets fewer snapshots and one above 4M slots none (its summary's ``memory_snapshots``
says how many were taken)."""


def snapshot_count(config: SimConfig, kv_tokens: int, replicas: int = 1) -> int:
    """How many memory-map snapshots a run takes: ``config.memory_snapshots``, fewer when they would exceed
    `MEMORY_MAP_ROWS` rows."""
    return min(config.memory_snapshots, MEMORY_MAP_ROWS // (kv_tokens * replicas))


@dataclass
class SimResult:
    """Per-request table, per-step table, memory-map snapshots, the summary and the configuration."""

    requests: object
    steps: object
    memory: object
    summary: dict
    config: SimConfig


def make_cost_model(config: SimConfig, model, gpu) -> StepCostModel:
    """``--step-time`` wins, then ``--calibration``, then ``--cost-profile``, then the user's or the shipped
    table for this GPU and model (`sim.kernel.calibration_store`), then the default profile (`sim.kernel.cost_profiles`)."""
    if config.step_time is not None:
        return ConstantStepCost(config.step_time)
    common = dict(block_size=config.block_size, paged=allocator_class(config.allocator).kind == "paged",
                  tensor_parallel=config.tensor_parallel)
    path = config.calibration or (None if config.cost_profile else find_calibration(gpu.name, model.name))
    if path is not None:
        return CalibratedStepCost.from_file(path, model, peaks_of(path, gpu), **common)
    return make_step_cost(config.cost_profile, model, gpu, **common)


def resolve_capacity(config: SimConfig) -> KVCapacity:
    """The deployment's KV capacity, its model and GPU, after reading ``config.catalog`` (whose entries the
    configuration may name: a sweep point in another process reads the file itself)."""
    if config.catalog is not None:
        register_catalog_file(config.catalog)
    model, gpu = get_model(config.model), get_gpu(config.gpu)
    return kv_capacity(model, gpu, tensor_parallel=config.tensor_parallel,
                       gpu_memory_utilization=config.gpu_memory_utilization,
                       max_num_batched_tokens=config.max_num_batched_tokens, kv_gib=config.kv_gib,
                       kv_tokens=config.kv_tokens, enforce_eager=config.enforce_eager)


def summary_extra(config: SimConfig, workload, model, gpu, capacity_source: str, cost) -> dict:
    """The summary keys that describe the run rather than measure it."""
    return {
        "workload": getattr(workload, "name", "workload"), "workload_source": getattr(workload, "source", ""),
        "skipped_rows": int(getattr(workload, "skipped_rows", 0)),
        "skipped_reasons": dict(sorted(getattr(workload, "skipped_reasons", {}).items())),
        "model": model.name, "gpu": gpu.name,
        "block_size": config.block_size, "scheduler": config.scheduler, "seed": config.seed,
        "kv_capacity_source": capacity_source, **cost.describe(),
    }


def build_replica(config: SimConfig, model, gpu, kv_tokens: int, recorder: Recorder,
                  cost: StepCostModel | None = None):
    """One serving replica: its KV memory (the allocator behind `KVMemory`), cost model and scheduler (a fleet
    builds one per replica).
    ``cost``: a step-cost model to use instead of the one ``config`` names."""
    max_model_len = config.max_model_len or model.max_seq_len
    alloc = make_allocator(config.allocator, kv_tokens, block_size=config.block_size,
                           max_model_len=max_model_len, placement=config.placement,
                           prefix_caching=config.prefix_caching, watermark=config.watermark)
    cost = cost or make_cost_model(config, model, gpu)
    swap_slots = int(config.swap_space_gib * GIB * config.tensor_parallel // model.kv_bytes_per_token)
    memory = KVMemory(alloc)
    sched = Scheduler(memory, recorder, continuous=config.scheduler == "continuous",
                      max_num_seqs=config.max_num_seqs, max_num_batched_tokens=config.max_num_batched_tokens,
                      chunked_prefill=config.chunked_prefill, preemption=config.preemption, swap_slots=swap_slots,
                      max_model_len=max_model_len, lazy=not config.step_by_step,
                      rng=np.random.default_rng(config.seed), beam_keep_prob=config.beam_keep_prob,
                      long_prefill_token_threshold=config.long_prefill_token_threshold,
                      scheduler_reserve_full_isl=config.scheduler_reserve_full_isl,
                      scheduling_policy=config.scheduling_policy)
    return memory, cost, sched


def run_simulation(config: SimConfig, workload, *, progress=None, cost: StepCostModel | None = None) -> SimResult:
    """Simulate ``workload`` under ``config``. ``progress``: optional callable given counts of finished
    requests as they finish (a progress bar's ``update``); ``cost``: a step-cost model to use instead of the
    one ``config`` names (``kvsim calibrate --from-trace`` tries coefficients without writing tables). More
    than one replica: `sim.kernel.fleet.run_fleet`."""
    if config.replicas > 1:
        from sim.kernel.fleet import run_fleet

        return run_fleet(config, workload, progress=progress)
    wall_start = time.perf_counter()
    cap = resolve_capacity(config)
    model, gpu = cap.model, cap.gpu
    recorder = Recorder(len(workload))
    memory, cost, sched = build_replica(config, model, gpu, cap.kv_tokens, recorder, cost)
    times = workload.arrival_time_s
    start = float(times[0]) if len(workload) and getattr(workload, "closed_loop", None) is None else 0.0
    source = ArrivalSource.for_memory(workload, memory, start_s=start)
    recorder.on_done = source.on_done
    span = float(times[-1]) - start if len(workload) else 0.0
    count = snapshot_count(config, cap.kv_tokens)
    snaps = tuple(start + span * (i + 1) / (count + 1) for i in range(count))
    engine = Engine(sched, cost, source, recorder, start_s=start, snapshot_times=snaps,
                    check_every=config.debug_invariants, progress=progress)
    end = engine.run() if len(workload) else start
    if config.debug_invariants:
        memory.check_invariants()
    requests = requests_frame(workload, recorder, source.arrival_s, sched.cached_by_index)
    total_blocks = memory.breakdown().total_blocks
    steps = recorder.steps_frame(cap.kv_tokens, total_blocks)
    extra = summary_extra(config, workload, model, gpu, cap.source, cost) | {"memory_snapshots": count}
    summary = build_summary(allocator=config.allocator, requests=requests, memory=recorder.memory,
                            max_running=recorder.max_running, num_preemptions=sched.num_preemptions,
                            start_s=start, end_s=end, wall_time_s=0.0, capacity=cap.kv_tokens,
                            total_blocks=total_blocks,
                            prefill_tokens=int(steps["prefill_tokens"].sum()),
                            cached_prompt_tokens=sched.cached_prompt_tokens, extra=extra)
    summary["wall_time_s"] = time.perf_counter() - wall_start
    return SimResult(requests, steps, recorder.memory_frame(), summary, config)


def requests_frame(workload, rec: Recorder, arrival_s: np.ndarray, cached_by_index: dict[int, int] | None = None):
    """One row per request (``docs/architecture.md``). ``cached_by_index``: prompt tokens each request's
    admissions found cached, by workload position (absent: none)."""
    import pandas as pd

    out = np.asarray(workload.output_tokens, np.int64)
    num_seqs = np.maximum(np.asarray(workload.n, np.int64), np.asarray(workload.beam_width, np.int64))
    ttft = rec.first_token_s - arrival_s
    e2e = rec.finished_s - arrival_s
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (rec.finished_s - rec.first_token_s) / np.maximum(out - 1, 1), np.nan)
    reasons = np.full(len(out), "", dtype=object)
    for i, reason in rec.reasons.items():
        reasons[i] = reason
    cached = np.zeros(len(out), np.int64)
    for i, tokens in (cached_by_index or {}).items():
        cached[i] = tokens
    return pd.DataFrame({
        "request_id": np.asarray(workload.ids, np.int64), "arrival_s": arrival_s, "admitted_s": rec.admitted_s,
        "first_token_s": rec.first_token_s, "finished_s": rec.finished_s,
        "prompt_tokens": np.asarray(workload.prompt_tokens, np.int64), "output_tokens": out, "num_seqs": num_seqs,
        "cached_tokens": cached, "preemptions": rec.preemptions, "rejected": rec.rejected, "reject_reason": reasons,
        "ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "normalized_latency_s_per_tok": e2e / out,
    })


def resolve_workload(config: SimConfig):
    """The workload a configuration names: its trace, its preset, or the default preset (`DEFAULT_PRESET`)."""
    import workloads
    from workloads.presets import DEFAULT_PRESET

    if config.trace is not None:
        arrivals = f"poisson:rate={config.rate:g}" if config.rate is not None else config.arrivals
        workload = workloads.load_trace(config.trace, format=config.trace_format, columns=config.trace_columns,
                                        skip_bad_rows=config.skip_bad_rows, arrivals=arrivals, seed=config.seed)
        if config.num_requests is None:
            return workload
        if config.num_requests > len(workload):  # as a preset does: never silently fewer than asked
            raise workloads.TraceError(f"{config.trace}: --num-requests {config.num_requests} asks for more "
                                       f"requests than the trace has ({len(workload)})")
        return workload.head(config.num_requests)
    if config.preset is not None:
        return workloads.load_preset(config.preset, num_requests=config.num_requests, rate=config.rate,
                                     seed=config.seed)
    return workloads.load_preset(DEFAULT_PRESET, num_requests=config.num_requests, rate=config.rate,
                                 seed=config.seed)


def run_config(config: SimConfig, *, progress=None) -> SimResult:
    """Resolve the configuration's workload and simulate it."""
    return run_simulation(config, resolve_workload(config), progress=progress)


def write_result(result: SimResult, out_dir: str | Path, fmt: str = "parquet") -> list[Path]:
    """``requests``, ``steps`` and ``memory`` tables (parquet or csv), ``summary.json`` and ``config.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in ("requests", "steps", "memory"):
        frame = getattr(result, name)
        path = out / f"{name}.{fmt}"
        if fmt == "csv":
            frame.to_csv(path, index=False)
        else:
            frame.to_parquet(path, index=False)
        paths.append(path)
    for name, data in (("summary", result.summary), ("config", result.config.to_dict())):
        path = out / f"{name}.json"
        path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
        paths.append(path)
    return paths
