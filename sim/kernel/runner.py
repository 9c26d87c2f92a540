"""`run_simulation(config, workload)` and `run_config(config)`: one simulation, end to end.

Resolves the deployment (model, GPU, KV capacity), builds the replica (`sim.kernel.replica`) and the engine,
runs (several replicas: `sim.kernel.fleet`), and returns a `SimResult` of tidy DataFrames plus the summary
dict. `write_result` saves it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from sim.kernel.arrivals import ArrivalSource, first_arrival_s
from sim.kernel.async_outputs import refuse_unmodelled
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import StepCostModel
from sim.kernel.engine import Engine
from sim.kernel.fleet import run_fleet
from sim.kernel.fleet_parallel import parallel_note, run_fleet_parallel, runs_in_parallel
from sim.kernel.ignored_settings import SettingWarning, ignored_lines
from sim.kernel.metrics import Recorder
from sim.kernel.parallel_sampling import as_run
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
from sim.kernel.spec_decode import check_spec_run
from sim.kernel.summary import build_summary
from workloads.workload import Workload

LOADED_WITH = "loaded_with"
"""The attribute `resolve_workload` sets on the workload it loads: the configuration fields it was loaded with
(`workload_settings`), so that `run_simulation` can tell the configuration's own workload from another."""
_SAME_REQUESTS = ("arrival_time_s", "prompt_tokens", "output_tokens", "max_tokens", "prefix_group", "prefix_len",
                  "priority", "session_id", "turn", "think_time_s", "hash_offsets", "hash_values")
"""The columns a configuration's workload fields decide (``n`` and ``beam_width`` are not among them: a caller
may give the configuration's workload parallel sampling or beams, as `sim.reproduce.experiments` does)."""


def run_simulation(config: SimConfig, workload: Workload, *, progress=None, cost: StepCostModel | None = None,
                   workers: int = 1, warn: bool = True) -> SimResult:
    """Simulate ``workload`` under ``config``. ``progress``: optional callable given counts of finished
    requests as they finish (a progress bar's ``update``); ``cost``: a step-cost model to use instead of the
    one ``config`` names (``kvsim calibrate --from-trace`` tries coefficients without writing tables). More
    than one replica: `sim.kernel.fleet.run_fleet`; ``workers`` > 1 runs a fleet whose router reads no replica
    state in that many processes, with identical results (`sim.kernel.fleet_parallel`; other runs ignore it).

    ``config``'s workload fields (`SimConfig.WORKLOAD_FIELDS`) must name ``workload`` or be left at their
    defaults: the run takes the workload it is given, and ``config`` is echoed as what was run
    (`check_workload_settings`). ``warn``: `warnings.warn` each setting the run ignores (the summary's
    ``ignored_settings``) and a ``workers`` count that does not apply, in the words ``kvsim run`` prints
    them (the CLI and sweeps pass False: the CLI prints its own lines, a sweep's table has the column)."""
    check_run_arguments(config, workload)
    dataclasses.replace(config)  # fields set after construction are checked as the constructor checks them
    refuse_unmodelled(config, workload)
    loaded = check_workload_settings(config, workload)
    note = parallel_note(config, workers, workload)
    if warn and note:
        warnings.warn(note, SettingWarning, stacklevel=caller_stacklevel())
    result = _simulate(config, workload, progress, cost, workers)
    if not loaded and not draws_from_seed(config, workload):
        result.summary["seed"] = None  # nothing in the run used it, and the workload's own seed is in its source
    for line in ignored_lines(result.summary) if warn else ():
        warnings.warn(line, SettingWarning, stacklevel=caller_stacklevel())
    return result


def caller_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning from `run_simulation` point at the first line outside kvsim's
    simulator and its helpers (a notebook cell calling `run_config` or `compare_allocators`), not at kvsim's
    own call: that line is the one the user can change."""
    own = (str(Path(__file__).resolve().parents[1]),)  # sim/: the runner, sim.reproduce, sim.sweep
    frame, level = sys._getframe(2), 2  # level 1 is the caller of warnings.warn: run_simulation
    while frame is not None and frame.f_code.co_filename.startswith(own):
        frame, level = frame.f_back, level + 1
    return level


def _simulate(config: SimConfig, workload: Workload, progress, cost: StepCostModel | None,
              workers: int) -> SimResult:
    """The run itself: one replica here, a fleet in this process or in ``workers`` processes."""
    if runs_in_parallel(config, workers, workload):
        return run_fleet_parallel(config, workload, workers, progress=progress)  # (each fleet takes `as_run`'s)
    if config.replicas > 1:
        return run_fleet(config, workload, progress=progress)
    if config.prefill_replicas:
        from sim.kernel.disaggregation import run_pd_fleet

        return run_pd_fleet(config, workload, progress=progress)
    workload = as_run(config, workload)  # outputs cut at max_model_len, samples fanned out, as vLLM runs them
    check_spec_run(config, workload)
    wall_start = time.perf_counter()
    cap = resolve_capacity(config)
    model, gpu = cap.model, cap.gpu
    recorder = Recorder(len(workload))
    memory, cost, sched = build_replica(config, model, gpu, cap.kv_tokens, recorder, cost)
    start = first_arrival_s(workload)
    source = ArrivalSource.for_memory(workload, memory, start_s=start,
                                      lookahead_hashes=sched.spec is not None and sched.spec.hash_lookahead() > 0)
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
    extra = summary_extra(config, workload, cap, cost, memory) | {"memory_snapshots": count,
                                                                   "memory_maps": len(recorder.snapshots)}
    summary = build_summary(allocator=config.allocator, requests=requests, memory=recorder.memory,
                            max_running=recorder.max_running, num_preemptions=sched.groups.num_preemptions,
                            start_s=start, end_s=end, wall_time_s=0.0, capacity=capacity,
                            total_blocks=total_blocks,
                            prefill_tokens=int(steps["prefill_tokens"].sum()),
                            cached_prompt_tokens=sched.groups.cached_prompt_tokens,
                            tier=tier_summary([(memory, sched.groups)]), extra=extra, kv_tokens=cap.kv_tokens)
    if sched.spec is not None:
        summary["spec_decoding"] = sched.spec.summary()
    summary["wall_time_s"] = time.perf_counter() - wall_start
    return SimResult(requests, steps, recorder.memory_frame, summary, config)


def check_run_arguments(config: object, workload: object) -> None:
    """A TypeError naming the argument and what to pass, for a ``config`` that is not a `SimConfig` or a
    ``workload`` that is not a `workloads.Workload` (a frame, a path, a list: each otherwise fails deep in the
    run with an AttributeError or a pandas KeyError)."""
    if isinstance(config, Workload) and isinstance(workload, SimConfig):
        raise TypeError("run_simulation: the arguments are swapped; call run_simulation(config, workload)")
    if not isinstance(config, SimConfig):
        hint = " (a dict of fields: SimConfig(**d))" if isinstance(config, dict) else ""
        raise TypeError(f"run_simulation: config must be a sim.SimConfig, got {type(config).__name__}{hint}")
    if isinstance(workload, Workload):
        return
    import pandas as pd

    if isinstance(workload, pd.DataFrame):
        hint = "a frame: workloads.workload_from_frame(df)"
    elif isinstance(workload, (str, os.PathLike)):
        hint = "a trace file: workloads.load_trace(path)"
    elif isinstance(workload, (list, tuple)):
        hint = ("a list of requests: a frame of their columns (arrival_time_s, prompt_tokens, output_tokens, ...) "
                "through workloads.workload_from_frame(df)")
    else:
        hint = "workloads.load_preset(name), workloads.load_trace(path) or workloads.workload_from_frame(df)"
    raise TypeError(f"run_simulation: workload must be a workloads.Workload, got {type(workload).__name__} ({hint})")


def workload_settings(config: SimConfig) -> dict:
    """The fields `resolve_workload` loads ``config``'s workload from: its workload fields and ``seed``."""
    return {name: getattr(config, name) for name in (*SimConfig.WORKLOAD_FIELDS, "seed")}


def check_workload_settings(config: SimConfig, workload: Workload) -> bool:
    """Whether ``workload`` is the one ``config``'s workload fields name; a ValueError when those fields are
    set (not their defaults) and name another workload, since the run would take ``workload`` while
    ``r.config`` and ``config.json`` said the fields applied.

    Why: a ``rate`` or ``num_requests`` added to the fields of a caller's own workload would otherwise change
    nothing, silently. The configuration's own workload is the one `resolve_workload` marked with these fields
    (the CLI's path); any other is compared, request by request, with the one they load (a workload derived
    from it by `Workload.select` with ``n`` or ``beam_width``, as the paper's experiments do, is the same).
    With every workload field at its default, any workload runs (False: it is the caller's own)."""
    wanted = workload_settings(config)
    if getattr(workload, LOADED_WITH, None) == wanted:
        return True
    defaults = SimConfig()
    given = {name: getattr(config, name) for name in SimConfig.WORKLOAD_FIELDS
             if getattr(config, name) != getattr(defaults, name)}
    if not given:
        return False
    try:
        own = resolve_workload(config)
    except (ValueError, KeyError, OSError):
        own = None  # a file that is not there, or fields that load nothing: not this workload either
    if own is not None and _same_requests(own, workload):
        return True
    fields = ", ".join(f"{name}={value!r}" for name, value in given.items())
    raise ValueError(f"run_simulation: the config's workload fields {fields} name another workload than the one "
                     "passed, and the run would take the one passed; leave them out of the config and shape the "
                     "workload itself (workloads.load_preset(name, num_requests=..., rate=...), "
                     "workloads.load_trace(path, arrivals='poisson:rate=...', num_requests=...), "
                     "workload.head(n)), or call run_config(config) to run the workload they name")


def _same_requests(a: Workload, b: Workload) -> bool:
    """Whether two workloads hold the same requests in the columns a configuration decides (`_SAME_REQUESTS`)."""
    return len(a) == len(b) and all(np.array_equal(getattr(a, col), getattr(b, col), equal_nan=col == "think_time_s")
                                    for col in _SAME_REQUESTS)


def draws_from_seed(config: SimConfig, workload: Workload) -> bool:
    """Whether the run itself draws from ``config.seed``: beam search picks surviving beams with it, and a
    fleet's random router picks replicas with it. Otherwise the seed only loads the configuration's workload."""
    return (config.replicas > 1 and config.router == "random") or bool((workload.beam_width > 1).any())


def exact(value: float) -> str:
    """A float as a spec writes it: short (``4``) where that reads back as the same number, else every digit
    (``:g`` alone rounds to six, so ``--rate 1.23456789`` on a trace ran at 1.23457)."""
    short = f"{value:g}"
    return short if float(short) == value else repr(float(value))


def resolve_workload(config: SimConfig) -> Workload:
    """The workload a configuration names: its trace, its preset, or the default preset (`DEFAULT_PRESET`),
    marked (`LOADED_WITH`) with the fields it was loaded with."""
    import workloads
    from workloads.presets import DEFAULT_PRESET

    if config.trace is not None:
        arrivals = f"poisson:rate={exact(config.rate)}" if config.rate is not None else config.arrivals
        workload = workloads.load_trace(config.trace, format=config.trace_format, columns=config.trace_columns,
                                        skip_bad_rows=config.skip_bad_rows, arrivals=arrivals, seed=config.seed,
                                        num_requests=config.num_requests)
    else:
        preset = config.preset if config.preset is not None else DEFAULT_PRESET
        workload = workloads.load_preset(preset, num_requests=config.num_requests,
                                         rate=config.rate, seed=config.seed)
    setattr(workload, LOADED_WITH, workload_settings(config))  # `check_workload_settings` knows it as the config's
    return workload


def run_config(config: SimConfig, *, progress=None, warn: bool = True) -> SimResult:
    """Resolve the configuration's workload and simulate it (``warn``: as `run_simulation`'s)."""
    return run_simulation(config, resolve_workload(config), progress=progress, warn=warn)


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
