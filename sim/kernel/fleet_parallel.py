"""A fleet whose router reads no replica state, its replicas simulated in worker processes, exactly.

With ``round-robin`` or ``random`` (``needs_state`` False, `sim.kernel.routers`) every request's replica is
known before the run and the replicas never look at each other: each is a single replica on its share of the
trace (`sim.kernel.fleet`). So the parent routes every request with the fleet's own router (the same choices
and the same Generator draws as in one process), splits the replicas into ``workers`` contiguous groups
(replica numbers in order; the same groups on every run), and each worker runs a `Fleet` of the whole workload
in which only its group's replicas have requests and engines. Nothing couples replicas: the memory-map
snapshot times come from the fleet's arrival span, which every worker computes alike, and the fleet's end is
the latest replica end. A worker sends back compact data (its requests' result arrays, each replica's step
rows and snapshots as raw arrays, its counters), and the parent builds the tables and summary with
`fleet_summary.fleet_result` as the in-process fleet does, so every table and summary (``wall_time_s`` aside)
is byte-identical to ``workers=1``. A router that reads state (least-requests, least-kv, prefix-aware)
couples the replicas at every arrival, and a mixture of experts' data-parallel ranks step in lock-step
(`sim.kernel.lockstep`): such a fleet runs in one process (`parallel_note` says so).

``workers`` is how to run, not what to simulate, so it is an argument of `run_simulation`, not a `SimConfig`
field: ``config.json`` and sweep grids are the same whatever it is.
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from allocators.breakdown import MemoryBreakdown
from sim.kernel.arrivals import releases_arrivals
from sim.kernel.config import SimConfig
from sim.kernel.data_parallel import steps_in_lockstep
from sim.kernel.metrics import Recorder
from sim.kernel.replica import SimResult, summary_extra
from sim.kernel.routers import ROUTERS
from sim.kernel.spec_decode import check_spec_run
from sim.kernel.worker_processes import refuse_while_starting, worker_died

_REQUEST_ARRAYS = ("arrival_s", "admitted_s", "first_token_s", "finished_s", "preemptions", "rejected")


def check_workers(workers: int) -> int:
    """``workers`` itself, or a one-line error for anything but a positive integer."""
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"--workers must be a positive integer, got {workers!r}")
    return int(workers)


def runs_in_parallel(config: SimConfig, workers: int, workload=None) -> bool:
    """Whether a run of ``config`` with ``workers`` takes the parallel path: a fleet, a router that reads no
    replica state, more than one worker, and a ``workload`` whose arrivals are all known before the run (a
    closed loop's come from every replica's completions: `sim.kernel.fleet`)."""
    return (check_workers(workers) > 1 and config.replicas > 1 and not ROUTERS[config.router].needs_state
            and not (workload is not None and releases_arrivals(workload)) and not steps_in_lockstep(config))


def parallel_note(config: SimConfig, workers: int, workload=None) -> str | None:
    """The line to tell a user whose ``--workers`` does not apply (None when it does or was not asked for)."""
    if check_workers(workers) == 1 or runs_in_parallel(config, workers, workload):
        return None
    if config.replicas == 1:
        return f"note: --workers {workers} splits the replicas of a fleet; one replica runs in one process"
    if steps_in_lockstep(config):
        return (f"note: --workers {workers} splits independent replicas; a mixture of experts' data-parallel ranks "
                "step in lock-step, so they run in one process")
    if workload is not None and releases_arrivals(workload):
        return (f"note: --workers {workers} applies to arrivals known before the run; this workload's are "
                "released by requests finishing on every replica, so the fleet runs in one process")
    return (f"note: --workers {workers} applies to routers that read no replica state (round-robin, random); "
            f"{config.router} reads it at every arrival, so the fleet runs in one process")


def replica_groups(replicas: int, workers: int) -> list[list[int]]:
    """Replica numbers split into at most ``workers`` contiguous groups of near-equal size, in order."""
    return [part.tolist() for part in np.array_split(np.arange(replicas), min(workers, replicas))]


@dataclass
class ReplicaOutcome:
    """What one replica's simulation leaves for the fleet's tables and summary (`fleet_summary.fleet_result`):
    its recorder's step rows, snapshots and integrals (raw arrays, not frames: smaller to send, and the
    parent builds the frames as the one-process fleet does), its end, and its counters."""

    number: int
    rec: Recorder  # without the per-request arrays, which are the fleet's
    end_s: float
    groups: SimpleNamespace  # what fleet_result and tier_summary read of its `GroupMechanics`
    host_tier: SimpleNamespace | None
    final: MemoryBreakdown  # its pool as its last row left it (`fleet_summary.idle_until` to the fleet's end)
    final_map: tuple | None  # that pool's memory map, where snapshot moments fell after its last row
    spec: dict | None  # its spec decoding summary (`Replica.spec_summary`)


def _slim(rec: Recorder) -> Recorder:
    """A copy of ``rec``'s per-replica part (step rows, snapshots, integrals), without the fleet's arrays."""
    slim = Recorder(0)
    for name in ("floats", "ints", "group_ints", "group_names", "memory", "max_running", "snapshots"):
        setattr(slim, name, getattr(rec, name))
    return slim


@dataclass
class GroupOutcome:
    """A worker's result: its requests' positions and result arrays, and its replicas' outcomes."""

    index: np.ndarray
    arrays: dict
    source_arrival_s: np.ndarray
    reasons: dict
    replicas: list


def simulate_group(config: SimConfig, workload, replica_of: np.ndarray, numbers: list[int]) -> GroupOutcome:
    """Run the replicas ``numbers`` of the fleet on their requests (``replica_of``: every request's replica)."""
    from sim.kernel.fleet import Fleet

    fleet = Fleet(config, workload)
    fleet.replica_of[:] = replica_of
    fleet.routed = fleet.size
    for n in numbers:
        fleet.replicas[n].inbox.extend(np.flatnonzero(replica_of == n).tolist())
    replicas = [fleet.replicas[n] for n in numbers]
    fleet.simulate(replicas)
    outcomes = []
    for r in replicas:
        if config.debug_invariants:
            r.memory.check_invariants()
        g, tier = r.sched.groups, r.memory.host_tier
        outcomes.append(ReplicaOutcome(
            r.number, _slim(r.rec), r.end_s,
            SimpleNamespace(cached_by_index=g.cached_by_index, host_by_index=g.host_by_index,
                            num_preemptions=g.num_preemptions, cached_prompt_tokens=g.cached_prompt_tokens,
                            host_prompt_tokens=g.host_prompt_tokens,
                            preempted_prompt_tokens=g.preempted_prompt_tokens, prefix_cache=g.prefix_cache,
                            external_prefix_cache=g.external_prefix_cache),
            None if tier is None else SimpleNamespace(offload_bytes=tier.offload_bytes, reload_bytes=tier.reload_bytes,
                                                      skipped_blocks=tier.skipped_blocks, dropped_blocks=tier.dropped_blocks,
                                                      num_blocks=tier.num_blocks),
            r.memory.breakdown(False), r.final_map, r.spec_summary()))
    index = np.flatnonzero(np.isin(replica_of, numbers))
    return GroupOutcome(index, {name: getattr(fleet.rec, name)[index] for name in _REQUEST_ARRAYS},
                        fleet.source.arrival_s[index], fleet.rec.reasons, outcomes)


class _Finished:
    """A replica as `fleet_summary.fleet_result` reads it, rebuilt from its `ReplicaOutcome`."""

    def __init__(self, o: ReplicaOutcome) -> None:
        self.number = o.number
        self.rec = o.rec
        self.end_s = o.end_s
        self.final_map = o.final_map
        self.sched = SimpleNamespace(groups=o.groups)
        self.memory = SimpleNamespace(host_tier=o.host_tier, breakdown=lambda *args: o.final)
        self.spec_summary = lambda: o.spec


def run_fleet_parallel(config: SimConfig, workload, workers: int, *, progress=None) -> SimResult:
    """`sim.kernel.fleet.run_fleet` for a state-independent router, its replicas in ``workers`` processes."""
    from sim.kernel.fleet import Fleet
    from sim.kernel.fleet_summary import fleet_result
    from sim.kernel.parallel_sampling import as_run

    workload = as_run(config, workload)
    check_spec_run(config, workload)
    refuse_while_starting(f"run_simulation(workers={workers})")
    wall_start = time.perf_counter()
    fleet = Fleet(config, workload)  # routes, and holds the fleet-wide arrays the results are merged into
    fleet.route_ahead()
    for r in fleet.replicas:
        r.inbox.clear()
    outcomes: dict[int, ReplicaOutcome] = {}
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["sim.kernel.fleet_parallel", "sim.kernel.fleet"])  # imported once, not per worker
    groups = replica_groups(config.replicas, workers)
    with ProcessPoolExecutor(max_workers=len(groups), mp_context=context) as executor:
        futures = [executor.submit(simulate_group, config, workload, fleet.replica_of, numbers) for numbers in groups]
        for future in futures:  # in group order: the merge does not depend on which worker ends first
            try:
                group = future.result()
            except BrokenProcessPool as exc:
                raise worker_died(f"run_simulation(workers={workers})", exc) from None
            for name, values in group.arrays.items():
                getattr(fleet.rec, name)[group.index] = values
            fleet.source.arrival_s[group.index] = group.source_arrival_s
            fleet.rec.reasons.update(group.reasons)
            outcomes.update((o.number, o) for o in group.replicas)
            if progress is not None:
                progress(len(group.index))
    cost, memory = fleet.replicas[0].cost, fleet.replicas[0].memory
    fleet.replicas = [_Finished(outcomes[n]) for n in range(config.replicas)]
    extra = summary_extra(config, workload, fleet.cap, cost, memory)
    extra["memory_snapshots"] = fleet.num_snapshots
    result = fleet_result(fleet, workload, max(o.end_s for o in outcomes.values()), extra)
    result.summary["wall_time_s"] = time.perf_counter() - wall_start
    return result
