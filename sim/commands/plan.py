"""``kvsim plan``: the fewest replicas that meet a latency target, per router (or any other grid axis).

The grid flags are `kvsim sweep`'s (every SimConfig field, ``--router a,b`` included); the target flags are
`kvsim slo`'s. The rate is given (``--rate``, or a trace's own timestamps); the replica count is searched
(`sim.sweep.replicas`).
"""

from __future__ import annotations

import json
import math
from typing import Any

import click

from sim.commands.failure import fail
from sim.commands.sweep import (
    _GRID_CONTEXT,
    GridCommand,
    _execution,
    _executor_options,
    _slo_target_options,
    exit_if_searches_failed,
    skipped_rows_lines,
)
from sim.kernel.config import MAX_REPLICAS
from sim.sweep.replicas import DEFAULT_MAX_REPLICAS

SHOWN_SUMMARY_KEYS = ("ttft_p99_s", "tpot_p50_s", "e2e_p50_s", "prefix_hit_frac", "preempted_hit_tokens",
                      "prefix_cache_hit_rate", "load_imbalance")
"""``preempted_hit_tokens`` beside ``prefix_hit_frac``: requests preempted and recomputed re-hit their own
blocks, which a workload with no shared prefix shows as hits too. ``prefix_cache_hit_rate`` is the fleet's
vLLM "Prefix cache hit rate" (`sim.kernel.prefix_cache_stats`; preempted and host hits left out), the figure a
deployment's metrics will show to compare the plan with. ``--json`` has every key of the fleet summary, these
included, under each row's ``summary``."""


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def format_plan(rows: list[dict[str, Any]], varying: list[str]) -> str:
    """One line per search: the varying grid fields, the replicas found, and the fleet there."""
    header = [*varying, "status", "replicas", "simulations", *SHOWN_SUMMARY_KEYS, "fail_reason_below", "error"]
    lines = [header]
    for row in rows:
        summary = row.get("summary") or {}
        lines.append([_cell(row.get(k)) for k in varying]
                     + [_cell(row.get(k)) for k in ("status", "replicas", "simulations")]
                     + [_cell(summary.get(k)) for k in SHOWN_SUMMARY_KEYS]
                     + [_cell(row.get("fail_reason")), _cell(row.get("error"))])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines)


@click.command("plan", cls=GridCommand, context_settings=_GRID_CONTEXT)
@_executor_options
@_slo_target_options
@click.option("--max-replicas", type=int, default=DEFAULT_MAX_REPLICAS, show_default=True,
              help=f"Most replicas tried (at most {MAX_REPLICAS:,}).")
@click.option("--json", "as_json", is_flag=True, help="Print a list of objects (router, replicas, summary, ...).")
@click.pass_context
def plan(ctx: click.Context, config_file: str | None, workers: int | None, executor: str | None,
         scheduler: str | None, quiet: bool, ttft_p99: float | None, tpot_p50: float | None,
         e2e_p50: float | None, normalized_latency: float | None, max_replicas: int, as_json: bool) -> None:
    """Find the fewest replicas that meet a latency target at a given rate, per router.

    Example: kvsim plan --preset sharegpt-paper --rate 40 --num-requests 2000 --router round-robin,prefix-aware
    --ttft-p99 2. Brackets by doubling from one replica, then bisects (about 2 log2 N simulations per router).
    A run with any rejected or unfinished request fails the target, whatever its latency.
    """
    from sim.sweep.replicas import run_plan
    from sim.sweep.slo import SLO_METRICS, SloTarget

    given = {"ttft_p99": ttft_p99, "tpot_p50": tpot_p50, "e2e_p50": e2e_p50,
             "normalized_latency": normalized_latency}
    try:
        target = SloTarget({SLO_METRICS[k]: v for k, v in given.items() if v is not None})
        if not 1 <= max_replicas <= MAX_REPLICAS:
            raise ValueError(f"--max-replicas must be in 1..{MAX_REPLICAS:,}, got {max_replicas:,}")
        grid, execution = _execution(ctx, config_file, workers, executor, scheduler)
        rows = run_plan(grid, target, max_replicas=max_replicas, **execution)
    except (ValueError, RuntimeError) as exc:
        fail(exc)
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        _exit_if_failed(rows)
        return
    varying = [name for name in grid.axes if len(grid.axes[name]) > 1] or ["router"]
    click.echo(f"target: {target.describe()}")
    click.echo(format_plan(rows, varying))
    for row in rows:
        if row.get("warning"):
            click.echo(f"warning: {', '.join(str(row.get(name)) for name in varying)}: {row['warning']}")
    # the fleet summary (each row's, in --json) counts the trace rows --skip-bad-rows dropped
    for line in skipped_rows_lines({**(row.get("summary") or {}), **row} for row in rows):
        click.echo(line)
    _exit_if_failed(rows)


def _exit_if_failed(rows: list[dict]) -> None:
    """`exit_if_searches_failed` of the plan's rows (it exited 0 with a failed row among them, as if a plan)."""
    import pandas as pd

    exit_if_searches_failed(pd.DataFrame(rows))


COMMANDS = [plan]
