"""The fewest replicas that meet a service-level target: `kvsim plan`'s search, one per configuration.

Search: bracket by doubling from one replica (1, 2, 4, ...) until the target holds, then bisect the integer
bracket (last failing N, first passing N) until they are adjacent: about 2 log2(N) simulations, never every
N. Like the rate search (`sim.sweep.slo`) it assumes monotonicity: more replicas never make the target
harder to meet; every probe keeps the configuration's seed, so the same requests arrive at the same times
and only their spreading over replicas changes. Passing the target is `SloTarget.check`: no rejected or
unfinished request and every bound met.
"""

from __future__ import annotations

import functools
from typing import Any

from sim.sweep.executors import run_tasks
from sim.sweep.grid import Grid
from sim.sweep.hashing import config_values, kvsim_version
from sim.sweep.point import STATUS_FAILED, STATUS_OK, PointFn, PointTask, describe_error, simulate_point
from sim.sweep.slo import STATUS_ABOVE_MAX, Probes, SloTarget, steady_state_warning

DEFAULT_MAX_REPLICAS = 256


def search_replicas(point_fn: PointFn, config: Any, target: SloTarget, max_replicas: int = DEFAULT_MAX_REPLICAS,
                    point_id: str = "") -> dict[str, Any]:
    """Bracket and bisect one configuration's replica count; one result (never raises for a simulation
    error). ``replicas`` is the fewest that meet ``target`` (None when even ``max_replicas`` do not) and
    ``summary`` the fleet summary there; ``warning`` says when that probe was too short to show the rate's
    steady state (`sim.sweep.slo.steady_state_warning`; only with a ``rate`` to compare with)."""
    if max_replicas < 1:
        raise ValueError(f"max_replicas must be at least 1, got {max_replicas}")
    probes = Probes(point_fn, config, target, "replicas")
    meets = probes.meets

    low, high, error = 0, None, None  # low: the most replicas known to fail (0: none tried)
    try:
        n = 1
        while True:
            if meets(n):
                high = n
                break
            low = n
            if n >= max_replicas:
                break
            n = min(2 * n, max_replicas)
        while high is not None and high - low > 1:
            mid = (low + high) // 2
            if meets(mid):
                high = mid
            else:
                low = mid
    except Exception as exc:  # the search stops; what it learned so far is still reported
        error = describe_error(exc)
    status = STATUS_FAILED if error else STATUS_ABOVE_MAX if high is None else STATUS_OK
    values = {k: v for k, v in config_values(config).items() if k != "replicas"}
    summary = probes.summaries.get(high, {}) if high is not None else {}
    rate = getattr(config, "rate", None)
    return {
        "point_id": point_id, "status": status, "error": error, **values,
        "target": target.describe(),
        "replicas": high if error is None else None,
        "fail_reason": probes.reason_at(low),
        "simulations": len(probes.tried),
        "probes": probes.outcomes(),
        "summary": summary,
        # as the rate search warns: a fleet whose queues were still growing when the probe's arrivals stopped
        # can pass a latency target it would miss in steady state
        "warning": steady_state_warning(summary, rate) if summary and rate else None,
    }


def run_plan(grid: Grid, target: SloTarget, *, max_replicas: int = DEFAULT_MAX_REPLICAS,
             point_fn: PointFn = simulate_point, config_cls: type | None = None, workers: int = 1,
             executor: str = "local", scheduler: str | None = None) -> list[dict[str, Any]]:
    """One replica search per configuration of ``grid`` (which must not set ``replicas``), in grid order.
    Searches are independent, so they run in parallel like sweep points; each search is sequential."""
    from sim.sweep.run import build_tasks, default_config_cls

    if "replicas" in grid.base or "replicas" in grid.axes:
        raise ValueError("the plan chooses the number of replicas itself; do not give --replicas")
    tasks, invalid, _ = build_tasks(grid, config_cls or default_config_cls(), kvsim_version())
    rows: dict[int, dict[str, Any]] = {item["index"]: item["row"] for item in invalid}
    fn = functools.partial(_search_task, point_fn, target, max_replicas)
    for outcome in run_tasks(fn, tasks, workers=workers, executor=executor, scheduler=scheduler):
        task = tasks[outcome.index]
        rows[task.index] = outcome.result or {"point_id": task.point_id, "status": STATUS_FAILED,
                                              "error": outcome.error, **config_values(task.config),
                                              "replicas": None, "summary": {}}
    for row in rows.values():
        if row.get("status") == STATUS_FAILED:  # an invalid point's row carries the config's replicas (1):
            row["replicas"] = None  # no answer, which the table must not show as one
    return [rows[i] for i in sorted(rows)]


def _search_task(point_fn: PointFn, target: SloTarget, max_replicas: int, task: PointTask) -> dict[str, Any]:
    return search_replicas(point_fn, task.config, target, max_replicas, point_id=task.point_id)
