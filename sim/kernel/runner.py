"""`run_simulation(config, workload)` and `run_config(config)`: one simulation, end to end.

Resolves the deployment (model, GPU, KV capacity), builds the replica (`sim.kernel.replica`) and the engine,
runs (several replicas: `sim.kernel.fleet`), and returns a `SimResult` of tidy DataFrames plus the summary
dict. `write_result` saves it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from sim.kernel.arrivals import ArrivalSource, first_arrival_s
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import StepCostModel
from sim.kernel.engine import Engine
from sim.kernel.fleet import run_fleet
from sim.kernel.fleet_parallel import run_fleet_parallel, runs_in_parallel
from sim.kernel.metrics import Recorder
from sim.kernel.replica import (  # noqa: F401  (re-exported: the runner is where callers look for them)
    MEMORY_MAP_ROWS,
    SimResult,
    build_replica,
    make_cost_model,
    requests_frame,
    resolve_capacity,
    snapshot_count,
    summary_extra,
    tier_summary,
)
from sim.kernel.snapshot_schedule import SnapshotSchedule
from sim.kernel.summary import build_summary


def run_simulation(config: SimConfig, workload, *, progress=None, cost: StepCostModel | None = None,
                   workers: int = 1) -> SimResult:
    """Simulate ``workload`` under ``config``. ``progress``: optional callable given counts of finished
    requests as they finish (a progress bar's ``update``); ``cost``: a step-cost model to use instead of the
    one ``config`` names (``kvsim calibrate --from-trace`` tries coefficients without writing tables). More
    than one replica: `sim.kernel.fleet.run_fleet`; ``workers`` > 1 runs a fleet whose router reads no replica
    state in that many processes, with identical results (`sim.kernel.fleet_parallel`; other runs ignore it)."""
    if runs_in_parallel(config, workers, workload):
        return run_fleet_parallel(config, workload, workers, progress=progress)
    if config.replicas > 1:
        return run_fleet(config, workload, progress=progress)
    wall_start = time.perf_counter()
    cap = resolve_capacity(config)
    model, gpu = cap.model, cap.gpu
    recorder = Recorder(len(workload))
    memory, cost, sched = build_replica(config, model, gpu, cap.kv_tokens, recorder, cost)
    start = first_arrival_s(workload)
    source = ArrivalSource.for_memory(workload, memory, start_s=start)
    recorder.on_done = source.on_done
    count = snapshot_count(config, memory.breakdown().capacity)  # slots: a hybrid pool counts group slots
    snaps = SnapshotSchedule.for_workload(count, workload, start, source.released_arrivals)
    engine = Engine(sched, cost, source, recorder, start_s=start, snapshots=snaps,
                    check_every=config.debug_invariants, progress=progress)
    end = engine.run() if len(workload) else start
    if config.debug_invariants:
        memory.check_invariants()
    requests = requests_frame(workload, recorder, source.arrival_s, sched.groups.cached_by_index,
                              sched.groups.host_by_index)
    pool = memory.breakdown()
    total_blocks, capacity = pool.total_blocks, pool.capacity  # a hybrid pool counts group slots
    steps = recorder.steps_frame(capacity, total_blocks)
    extra = summary_extra(config, workload, model, gpu, cap.source, cost) | {"memory_snapshots": count}
    summary = build_summary(allocator=config.allocator, requests=requests, memory=recorder.memory,
                            max_running=recorder.max_running, num_preemptions=sched.groups.num_preemptions,
                            start_s=start, end_s=end, wall_time_s=0.0, capacity=capacity,
                            total_blocks=total_blocks,
                            prefill_tokens=int(steps["prefill_tokens"].sum()),
                            cached_prompt_tokens=sched.groups.cached_prompt_tokens,
                            tier=tier_summary([(memory, sched.groups)]), extra=extra, kv_tokens=cap.kv_tokens)
    summary["wall_time_s"] = time.perf_counter() - wall_start
    return SimResult(requests, steps, recorder.memory_frame, summary, config)


def resolve_workload(config: SimConfig):
    """The workload a configuration names: its trace, its preset, or the default preset (`DEFAULT_PRESET`)."""
    import workloads
    from workloads.presets import DEFAULT_PRESET

    if config.trace is not None:
        arrivals = f"poisson:rate={config.rate:g}" if config.rate is not None else config.arrivals
        return workloads.load_trace(config.trace, format=config.trace_format, columns=config.trace_columns,
                                    skip_bad_rows=config.skip_bad_rows, arrivals=arrivals, seed=config.seed,
                                    num_requests=config.num_requests)
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
