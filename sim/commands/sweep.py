"""`kvsim sweep` (a grid of simulations into a results table) and `kvsim slo` (highest rate under a target).

Grid flags are not declared one by one: any SimConfig field is an axis, spelled as its `kvsim run` flag
(``--block-size 8,16,32``), so a field added to SimConfig is sweepable at once. ``--scheduler`` is the
batching policy, as in ``kvsim run``; the Dask scheduler's address is ``--dask-scheduler`` (an address given
as ``--scheduler tcp://...``, the old spelling, is still taken as one).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import click

from sim.commands.failure import fail

GRID_HELP = """
Grid flags: every SimConfig field, as --field-name V1,V2,... (for example --allocator paged,contiguous-max
--block-size 8,16,32 --seed 0,1,2 --preset sharegpt-paper --trace FILE); a boolean flag alone means true;
--axis NAME=V1,V2 names a field directly. The values of --columns (field=column,...) and --arrivals
(KIND:k=v,...) hold commas, so several of them are separated by ';'. --catalog FILE (or $KVSIM_CATALOG) adds
models and GPUs, in every point. --config FILE reads a TOML file with a [base] table of fields and an [axes]
table of lists; flags override it.
"""


class GridCommand(click.Command):
    """A command whose unknown ``--flags`` are grid axes; its help lists the configuration fields."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from sim.kernel.config import SimConfig
        from sim.sweep.grid import config_field_types

        formatter.write_paragraph()
        formatter.write_text(GRID_HELP.strip())
        names = ", ".join(name.replace("_", "-") for name in config_field_types(SimConfig))
        formatter.write_paragraph()
        formatter.write_text(f"Configuration fields: {names}.")
        formatter.write_paragraph()
        formatter.write_text(f"vLLM's spellings of fields, as flags and (with '_') TOML keys: {vllm_aliases_text()}. Two "
                             f"spellings of one field in one grid are refused.")


def vllm_aliases_text() -> str:
    """``--tensor-parallel-size`` (or ``-tp``) = ``tensor-parallel``, ..., from `sim.kernel.vllm_names`."""
    from sim.kernel.vllm_names import VLLM_ALIASES, VLLM_SHORT_FLAGS

    def dashed(name: str) -> str:
        return name.replace("_", "-")

    return ", ".join(f"{dashed(alias)}{f' ({VLLM_SHORT_FLAGS[field]})' if field in VLLM_SHORT_FLAGS else ''}"
                     f" = {dashed(field)}" for alias, field in VLLM_ALIASES.items())


_GRID_CONTEXT = {"ignore_unknown_options": True, "allow_extra_args": True}


def _grid(args: list[str], config_file: str | None) -> Any:
    """The grid the flags and the TOML file spell; ``$KVSIM_CATALOG`` is the catalog unless one is given, and
    every catalog file is read now, so a bad one is one error rather than a failure in every point. Every
    allocator and placement named is checked now too (as ``kvsim run`` checks them: exact names), so that a
    misspelt one (``Paged``) is one error listing the valid names, not a failed point found after the others
    ran."""
    from allocators import allocator_class
    from allocators.catalog_file import load_catalog_file
    from allocators.placement import placement_class
    from sim.kernel.config import SimConfig
    from sim.sweep.grid import Grid, grid_from_flags, load_grid_toml

    grid = load_grid_toml(config_file, SimConfig) if config_file else Grid({}, {})
    grid = grid.merged(grid_from_flags(args, SimConfig))
    if os.environ.get("KVSIM_CATALOG") and "catalog" not in grid.base and "catalog" not in grid.axes:
        grid = grid.merged(Grid({"catalog": os.environ["KVSIM_CATALOG"]}, {}))
    for path in {*grid.axes.get("catalog", ()), grid.base.get("catalog")} - {None}:
        load_catalog_file(path)
    for field, registered in (("allocator", allocator_class), ("placement", placement_class)):
        for name in (*grid.axes.get(field, ()), *([grid.base[field]] if field in grid.base else [])):
            registered(name)
    return grid


def _dask_address(args: list[str], dask_scheduler: str | None) -> tuple[list[str], str | None]:
    """Take the old spelling ``--scheduler ADDRESS`` out of the grid flags: a value with ``://`` or a port
    is a Dask address, never a batching policy."""
    out, i = [], 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        taken = args[i:i + 2] if flag == "--scheduler" and not eq else args[i:i + 1]
        value = taken[-1] if not eq else value
        if flag == "--scheduler" and ("://" in value or (":" in value and value.rpartition(":")[2].isdigit())):
            if dask_scheduler not in (None, value):
                raise ValueError(f"--dask-scheduler {dask_scheduler} and --scheduler {value}: give one address")
            dask_scheduler = value
        else:
            out += taken
        i += len(taken)
    return out, dask_scheduler


def _executor_options(func: Any) -> Any:
    func = click.option("--quiet", is_flag=True, help="No progress bar.")(func)
    func = click.option("--dask-scheduler", "scheduler", default=None, metavar="ADDRESS",
                        help="Dask scheduler address (tcp://host:8786); implies --executor dask. Default: a "
                             "private local cluster.")(func)
    func = click.option("--executor", type=click.Choice(["local", "dask"]), default=None,
                        help="Local worker processes (the default), or a Dask distributed cluster.")(func)
    func = click.option("--workers", type=int, default=None,
                        help="Parallel points (default: the number of cores; 1 runs in this process).")(func)
    func = click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
                        help="TOML file with [base] and [axes] tables.")(func)
    return func


def _slo_target_options(func: Any) -> Any:
    """The latency bounds an SLO is made of (`kvsim slo` and `kvsim plan`)."""
    func = click.option("--normalized-latency", type=float, default=None,
                        help="Bound on normalized latency (s per output token, the paper's metric).")(func)
    func = click.option("--e2e-p50", type=float, default=None, help="Bound on median end-to-end latency (s).")(func)
    func = click.option("--tpot-p50", type=float, default=None,
                        help="Bound on median time per output token (s).")(func)
    func = click.option("--ttft-p99", type=float, default=None, help="Bound on p99 time to first token (s).")(func)
    return func


def _execution(ctx: click.Context, config_file: str | None, workers: int | None, executor: str | None,
               scheduler: str | None) -> tuple[Any, dict[str, Any]]:
    """The grid, and how to run it: `run_sweep`'s workers, executor and scheduler keyword arguments."""
    from sim.sweep.executors import default_workers

    args, scheduler = _dask_address(list(ctx.args), scheduler)
    if scheduler is not None and executor == "local":
        raise ValueError(f"--dask-scheduler {scheduler} is a Dask scheduler's address; it needs --executor dask")
    executor = executor or ("dask" if scheduler is not None else "local")
    workers = default_workers() if workers is None else workers
    return _grid(args, config_file), {"workers": workers, "executor": executor, "scheduler": scheduler}


def skipped_rows_text(count: Any, reasons: Any) -> str:
    """``3 (1 x line: wrong number of fields; 2 x prompt_tokens: ...)``: a summary's ``skipped_rows`` and
    ``skipped_reasons`` (a dict, or its JSON text in a results table) in the notation of `kvsim run`'s summary
    table (`sim.kernel.summary.format_summary`), so every command says the same of the same rows."""
    from sim.kernel.summary import counts_text

    if isinstance(reasons, str):
        try:
            reasons = json.loads(reasons)
        except ValueError:  # a table edited by hand: its text as it is, not a traceback after the run
            return f"{int(count)} ({reasons})"
    why = counts_text(reasons if isinstance(reasons, dict) else {})
    return f"{int(count)} ({why})" if why else str(int(count))


def skipped_rows_lines(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """``skipped rows of TRACE: 3 (...)`` for each trace read with --skip-bad-rows (or that skipped rows),
    from rows holding a summary's ``skipped_rows``/``skipped_reasons`` and the configuration's ``trace`` and
    ``skip_bad_rows``. Every point of a grid reads its trace itself, so the points of one trace make one line,
    not one each; a failed point (no summary) makes none."""
    import pandas as pd

    lines: dict[str, None] = {}
    for row in rows:
        count = row.get("skipped_rows")
        if count is None or pd.isna(count):  # None, NaN or pd.NA: a table's failed point
            continue
        if count or row.get("skip_bad_rows") in (True, "True"):  # numpy's True too; a CSV's may be text
            source = row.get("trace") or row.get("preset") or "the workload"
            lines[f"skipped rows of {source}: {skipped_rows_text(count, row.get('skipped_reasons'))}"] = None
    return list(lines)


def ignored_settings_lines(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """``Warning: FLAG ignored in N of M points: why`` for each setting points ran without (a summary's
    ``ignored_settings``: a dict, or its JSON text in a results table), as `kvsim run` warns each: in a sweep
    they were only in a column of the table, which nobody reads for a flag they meant to vary."""
    rows = list(rows)
    counts: dict[tuple[str, str], int] = {}
    for row in rows:
        ignored = row.get("ignored_settings")
        if isinstance(ignored, str):
            try:
                ignored = json.loads(ignored)
            except ValueError:  # a table edited by hand: nothing to count
                continue
        for flag, why in (ignored.items() if isinstance(ignored, dict) else ()):
            counts[(flag, why)] = counts.get((flag, why), 0) + 1
    return [f"Warning: {flag} ignored in {n} of {len(rows)} points: {why}" for (flag, why), n in counts.items()]


def _failure_summary(failed: Any, total: int, noun: str = "points") -> str:
    """``3 of 12 points failed: 2 x ValueError: ...; 1 x ...``: how many, and why, most common first."""
    reasons = failed["error"].fillna("unknown error").value_counts()
    why = "; ".join(f"{count} x {reason}" for reason, count in reasons.head(3).items())
    more = f"; and {len(reasons) - 3} other reasons" if len(reasons) > 3 else ""
    return f"{len(failed)} of {total} {noun} failed: {why}{more}"


@click.command("sweep", cls=GridCommand, context_settings=_GRID_CONTEXT)
@_executor_options
@click.option("--out", default="sweep.parquet", show_default=True,
              help="Results table (.parquet or .csv); finished points are kept and skipped on a rerun.")
@click.pass_context
def sweep(ctx: click.Context, config_file: str | None, workers: int | None, executor: str | None,
          scheduler: str | None, quiet: bool, out: str) -> None:
    """Run every point of a grid of configurations, one row per point into a results table.

    Exits 1 when any point failed, after writing every point that finished (a rerun retries the failed
    ones), and says how many failed and why."""
    from sim.sweep.run import run_sweep

    try:
        grid, execution = _execution(ctx, config_file, workers, executor, scheduler)
        report = run_sweep(grid, out, progress=not quiet and sys.stderr.isatty(), **execution)
    except (ValueError, RuntimeError) as exc:
        fail(exc)
    click.echo(f"{report.line()}; results in {out}")
    if (superseded := report.superseded_line(out)) is not None:
        click.echo(f"Warning: {superseded}", err=True)
    rows = report.table.to_dict("records")
    for line in skipped_rows_lines(rows):
        click.echo(line)
    for line in ignored_settings_lines(rows):
        click.echo(line, err=True)  # as `kvsim run` warns
    failed = report.table[report.table["status"] != "ok"]
    if len(failed):
        click.echo(f"Error: {_failure_summary(failed, len(report.table))} (status and error columns of {out})",
                   err=True)
        raise click.exceptions.Exit(1)


@click.command("slo", cls=GridCommand, context_settings=_GRID_CONTEXT)
@_executor_options
@_slo_target_options
@click.option("--rate-min", type=float, default=0.5, show_default=True, help="First rate tried (req/s).")
@click.option("--rate-max", type=float, default=1000.0, show_default=True, help="Highest rate tried (req/s).")
@click.option("--growth", type=float, default=2.0, show_default=True, help="Bracketing factor per step.")
@click.option("--tolerance", type=float, default=0.05, show_default=True,
              help="Stop bisecting when high / low - 1 is at most this.")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON records.")
@click.option("--out", default=None, help="Also write the table (.parquet or .csv).")
@click.option("--plot", "plot_file", default=None,
              help="Also save a plot of the sustained rates (.png, .svg or .pdf).")
@click.pass_context
def slo(ctx: click.Context, config_file: str | None, workers: int | None, executor: str | None,
        scheduler: str | None, quiet: bool, ttft_p99: float | None, tpot_p50: float | None,
        e2e_p50: float | None, normalized_latency: float | None, rate_min: float, rate_max: float,
        growth: float, tolerance: float, as_json: bool, out: str | None, plot_file: str | None) -> None:
    """Find, per configuration, the highest request rate that meets a latency target.

    Brackets the rate by geometric growth from --rate-min, then bisects to --tolerance, with the same seed
    at every rate. A run with any rejected or unfinished request fails the target, whatever its latency.

    Each probe replays a fixed number of requests (--num-requests), so past the server's capacity they queue
    rather than pile up without end: queueing shows in time to first token and end-to-end latency, hardly in
    time per output token. Bound --ttft-p99, --e2e-p50 or --normalized-latency, and use 1,000 requests or
    more, or an overloaded rate can pass (the status then reads above-max).
    """
    from sim.commands.plot import FIGURE_SUFFIXES
    from sim.sweep.run import run_slo
    from sim.sweep.slo import SLO_METRICS, SearchSettings, SloTarget
    from sim.sweep.store import TABLE_SUFFIXES

    # Output names are checked before the searches, which may take hours, not after them.
    if out and Path(out).suffix not in TABLE_SUFFIXES:
        fail(f"--out {out}: use a .parquet or .csv file name")
    if plot_file and Path(plot_file).suffix.lower() not in FIGURE_SUFFIXES:
        fail(f"--plot {plot_file}: the image type comes from the suffix; use one of {', '.join(FIGURE_SUFFIXES)}")
    given = {"ttft_p99": ttft_p99, "tpot_p50": tpot_p50, "e2e_p50": e2e_p50,
             "normalized_latency": normalized_latency}
    try:
        target = SloTarget({SLO_METRICS[k]: v for k, v in given.items() if v is not None})
        settings = SearchSettings(rate_min, rate_max, growth, tolerance)
        grid, execution = _execution(ctx, config_file, workers, executor, scheduler)
        table = run_slo(grid, target, settings, progress=not quiet and sys.stderr.isatty(), **execution)
    except (ValueError, RuntimeError) as exc:
        fail(exc)
    varying = [name for name in grid.axes if len(grid.axes[name]) > 1]
    if out:
        _write_table(table, out)
    if as_json:
        click.echo(table.to_json(orient="records", indent=2))
    else:
        shown = ["allocator", *varying, "status", "sustained_rate", "rate_ok", "rate_fail", "simulations",
                 "fail_reason", "error"]
        click.echo(f"target: {target.describe()}")
        click.echo(table[[c for c in dict.fromkeys(shown) if c in table]].to_string(index=False))
        warned = table[table["warning"].notna()] if "warning" in table else table.iloc[:0]
        for _, row in warned.iterrows():  # named by every axis that varies, as plan names its rows
            point = ", ".join([str(row["allocator"])] + [f"{name} {row[name]}" for name in varying
                                                          if name != "allocator" and name in row])
            click.echo(f"warning: {point}: {row['warning']}")
        for line in skipped_rows_lines(table.to_dict("records")):  # in --json and --out: the row's columns
            click.echo(line)
    if plot_file:
        from sim.plots.sweep import plot_slo

        try:  # after the table is out: a search that met the target nowhere leaves nothing to draw
            fig = plot_slo(table, x=varying[0] if varying else "allocator",
                           hue=varying[1] if len(varying) > 1 else None)
        except ValueError as exc:
            fail(f"--plot {plot_file}: {exc}")
        fig.savefig(plot_file, bbox_inches="tight")
    exit_if_searches_failed(table)


def exit_if_searches_failed(table: Any) -> None:
    """Exit 1 with one ``Error:`` line when a search of `kvsim slo` or `kvsim plan` failed (an unknown router, a
    bad point), after its table is out: a failed row among the answers must not read as an answer."""
    failed = table[table["status"] == "failed"] if "status" in table else table.iloc[:0]
    if len(failed):
        click.echo(f"Error: {_failure_summary(failed, len(table), 'searches')}", err=True)
        raise click.exceptions.Exit(1)


def _write_table(table: Any, out: str) -> None:
    """Write the table; the suffix (one of `sim.sweep.store.TABLE_SUFFIXES`) was checked before the run."""
    if out.endswith(".csv"):
        table.to_csv(out, index=False)
    else:
        table.to_parquet(out, index=False)


COMMANDS = [sweep, slo]
