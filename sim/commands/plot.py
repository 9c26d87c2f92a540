"""`kvsim plot`: draw a figure from `kvsim run --out` directories or from a `kvsim sweep` results table.

Several run directories draw one figure comparing them (small multiples, bars side by side), keyed by each
run's allocator. A path ending in ``.parquet`` or ``.csv`` is a sweep table and goes to the sweep figure.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from sim.commands.failure import fail

RUN_KINDS = ("memory", "breakdown", "batch", "batch-sizes", "memory-map", "latency", "reuse")
"""Figures drawn from run directories; `SWEEP_KIND` is the one drawn from a sweep table."""
FLEET_KINDS = ("replicas",)
"""Figures drawn from the run directory of a fleet (`kvsim run --replicas N --out DIR`)."""
SWEEP_KIND = "sweep"
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


_JSON_TYPES = {"list": "an array", "str": "a string", "int": "a number", "float": "a number", "bool": "a boolean",
               "NoneType": "null"}


def _read_json(path: Path) -> dict:
    """A run's ``summary.json``: a JSON object (what `kvsim run --out` writes), else one error naming the file,
    before anything calls ``.get`` on an array."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a run summary: expected a JSON object, as `kvsim run --out` writes, "
                         f"got {_JSON_TYPES.get(type(data).__name__, type(data).__name__)}")
    return data


def _read_table(run_dir: Path, name: str, kind: str):
    """``NAME.parquet`` or ``NAME.csv`` (`kvsim run --format`) from a run directory."""
    import pandas as pd

    for path, reader in ((run_dir / f"{name}.parquet", pd.read_parquet), (run_dir / f"{name}.csv", pd.read_csv)):
        if path.is_file():
            try:
                frame = reader(path)
            except Exception as exc:  # pyarrow and the csv parser raise several types for a damaged file
                raise ValueError(f"{path}: cannot read: {exc}") from None
            frame.attrs["source"] = str(path)  # so `sim.plots.data.require_columns` names the file it checks
            return frame
    raise ValueError(f"{run_dir}: no {name}.parquet or {name}.csv, which the {kind!r} figure needs "
                     "(write a run directory with `kvsim run --out DIR`)")


def summary_keys(kind: str) -> tuple[str, ...]:
    """The summary values the figure ``kind`` draws: checked per file, since a frame of several runs' summaries
    would hide one run's missing value as a gap in its bar."""
    from sim.plots.style import SHARES

    return {"breakdown": tuple(f"{s}_frac" for s in SHARES), "batch-sizes": ("mean_running",)}.get(kind, ())


def _require_summary_keys(path: Path, summary: dict, kind: str) -> None:
    """One error naming the summary file and the values the figure needs that it lacks (or holds as null)."""
    missing = [key for key in summary_keys(kind) if summary.get(key) is None]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)}, which the {kind!r} figure draws "
                         "(write a run directory with `kvsim run --out DIR`)")


def load_runs(run_dirs: list[Path], tables: tuple[str, ...], kind: str) -> tuple[dict[str, dict], dict[str, dict]]:
    """Each run's summary and the named tables, keyed by allocator; runs that share an allocator are all keyed
    by their directory's name instead (compare's ``paged`` and ``paged-no-reuse``), or by their paths as given
    where those names are the same too (two traces' ``paged`` runs)."""
    if len({d.resolve() for d in run_dirs}) < len(run_dirs):
        raise ValueError(f"a run directory is given twice: {' '.join(map(str, run_dirs))}")
    for run_dir in run_dirs:
        if not run_dir.is_dir():
            raise ValueError(f"{run_dir}: not a run directory (expected `kvsim run --out` output or a sweep table)")
        if not (run_dir / "summary.json").exists():
            runs = sorted(d.name for d in run_dir.iterdir() if (d / "summary.json").is_file())
            if runs:  # `kvsim compare --out DIR` writes a run directory per allocator under DIR
                raise ValueError(f"{run_dir}: holds the runs {', '.join(runs)} (a `kvsim compare --out` directory); "
                                 f"plot them: kvsim plot {run_dir}/*")
            raise ValueError(f"{run_dir}: no summary.json: not a `kvsim run --out` directory")
    loaded = [_read_json(run_dir / "summary.json") for run_dir in run_dirs]
    for run_dir, summary in zip(run_dirs, loaded, strict=True):
        _require_summary_keys(run_dir / "summary.json", summary, kind)
    allocators = [str(summary.get("allocator", run_dir.name)) for summary, run_dir in zip(loaded, run_dirs, strict=True)]
    keys = []
    for allocator, run_dir in zip(allocators, run_dirs, strict=True):
        sharing = [d.name for a, d in zip(allocators, run_dirs, strict=True) if a == allocator]
        keys.append(allocator if len(sharing) == 1 else run_dir.name if sharing.count(run_dir.name) == 1
                    else str(run_dir))
    summaries = dict(zip(keys, loaded, strict=True))
    frames = {key: {name: _read_table(run_dir, name, kind) for name in tables}
              for key, run_dir in zip(keys, run_dirs, strict=True)}
    return summaries, frames


def draw_runs(run_dirs: list[Path], kind: str, time_s: float | None, replica: int | None = None):
    """The figure ``kind`` for the given runs."""
    from sim import plots

    needs = {"memory": ("steps",), "batch": ("steps",), "memory-map": ("memory",), "latency": ("requests",),
             "replicas": ("steps",), "reuse": ("steps", "requests")}
    summaries, frames = load_runs(run_dirs, needs.get(kind, ()), kind)
    if kind == "memory":
        if len(frames) == 1:
            (name, tables), = frames.items()
            return plots.plot_memory_over_time(tables["steps"], title=name)
        return plots.plot_memory_comparison({k: t["steps"] for k, t in frames.items()})
    if kind == "breakdown":
        return plots.plot_breakdown(summaries)
    if kind == "replicas":
        if len(frames) != 1 or "replicas" not in next(iter(summaries.values())):
            raise ValueError(f"--kind replicas draws one fleet run (kvsim run --replicas N --out DIR); "
                             f"{', '.join(map(str, run_dirs))} {'is not one' if len(frames) == 1 else 'are several'}")
        return plots.plot_replicas_over_time(next(iter(frames.values()))["steps"])
    if kind == "batch":
        return plots.plot_batch_over_time({k: t["steps"] for k, t in frames.items()})
    if kind == "batch-sizes":
        return plots.plot_batch_sizes(summaries)
    if kind == "memory-map":
        if len(frames) == 1:
            (name, tables), = frames.items()
            return plots.plot_memory_map(tables["memory"], time_s=time_s, title=name, replica=replica)
        return plots.plot_memory_maps({k: t["memory"] for k, t in frames.items()}, time_s=time_s, replica=replica)
    if kind == "reuse":
        return plots.plot_reuse({k: t["steps"] for k, t in frames.items()},
                                {k: t["requests"] for k, t in frames.items()}, summaries)
    return plots.plot_latency_cdf({k: t["requests"] for k, t in frames.items()})


def draw_sweep(table: Path, metric: str | None, x: str | None, hue: str | None):
    from sim.plots.sweep import plot_sweep
    from sim.sweep.store import load_results

    if not table.exists():
        raise ValueError(f"{table}: no such sweep table")
    results = load_results(table)
    if "sustained_rate" in results.columns and metric in (None, "sustained_rate"):  # a `kvsim slo --out` table
        from sim.plots.sweep import plot_slo, swept_fields

        varying = swept_fields(results[results["status"] != "failed"] if "status" in results else results)
        return plot_slo(results, x=x or (varying[0] if varying else "allocator"),
                        hue=hue or (varying[1] if len(varying) > 1 and x is None else None))
    options = {k: v for k, v in {"metric": metric, "x": x, "hue": hue}.items() if v is not None}
    return plot_sweep(results, **options)


@click.command("plot")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="RUN_DIR...")
@click.option("--kind", type=click.Choice([*RUN_KINDS, *FLEET_KINDS, SWEEP_KIND]), default=None,
              help="Figure to draw (default: memory for runs, sweep for a sweep table).")
@click.option("--out", "out", type=click.Path(path_type=Path), default=None,
              help="Image file (.png, .svg or .pdf); default RUN_DIR/KIND.png, or TABLE[-METRIC].png beside a table.")
@click.option("--time", "time_s", type=float, default=None,
              help="memory-map: the instant to show, in simulated seconds (a run records up to 12 snapshots, "
                   "fewer of a large pool: its summary's memory_snapshots; the nearest is shown and the caption "
                   "says which; default the middle one).")
@click.option("--replica", type=click.IntRange(min=0), default=None,
              help="memory-map of a fleet run (--replicas N): the replica whose pool to show (default 0).")
@click.option("--metric", default=None, help="sweep: the summary column to plot.")
@click.option("--x", "x", default=None, help="sweep: the swept field on the x axis.")
@click.option("--hue", default=None, help="sweep: the field that tells lines apart.")
@click.option("--dpi", type=click.IntRange(min=20, max=600), default=150, show_default=True,
              help="Resolution of a .png, in dots per inch.")
def plot_command(paths: tuple[Path, ...], kind: str | None, out: Path | None, time_s: float | None,
                 replica: int | None, metric: str | None, x: str | None, hue: str | None, dpi: int) -> None:
    """Draw a figure from one or more `kvsim run --out` directories, or from a `kvsim sweep` table.

    Kinds for runs: memory (shares of KV memory over time), breakdown (time-averaged shares, Fig. 2 style),
    batch (running requests over time), batch-sizes (mean batch size, Fig. 13 style), memory-map (the arena
    coloured by slot state, each request outlined), latency (TTFT and TPOT CDFs), replicas (each replica's KV
    memory and queue over time, for one `kvsim run --replicas N` run), reuse (prefix-cache hits by tier over
    time, prefill saved, TTFT). Several runs are drawn side by side, labelled by allocator (by directory when
    two share one); with several, the figure goes into the first run's directory unless --out says where.
    """
    from sim.sweep.store import TABLE_SUFFIXES

    is_sweep = len(paths) == 1 and paths[0].suffix in TABLE_SUFFIXES
    kind = kind or (SWEEP_KIND if is_sweep else "memory")
    if (kind == SWEEP_KIND) != is_sweep:
        fail("--kind sweep takes one sweep table (.parquet or .csv)" if kind == SWEEP_KIND
             else f"--kind {kind} takes run directories, not a sweep table")
    if time_s is not None and (kind != "memory-map" or not math.isfinite(time_s) or time_s < 0):
        fail(f"--time {time_s:g}: the instant of a --kind memory-map, in simulated seconds >= 0"
             + ("" if kind == "memory-map" else f", not of --kind {kind}"))
    if not is_sweep and (given := [f for f, v in (("--metric", metric), ("--x", x), ("--hue", hue)) if v]):
        fail(f"{', '.join(given)}: options of a sweep table's figure, not of run directories")
    if replica is not None and kind != "memory-map":
        fail(f"--replica applies to --kind memory-map, not {kind} (--kind replicas draws every replica)")
    if out is None:
        out = (paths[0].with_name(f"{paths[0].stem}{'-' + metric if metric else ''}.png") if is_sweep
               else paths[0] / f"{kind}.png")
    if out.suffix.lower() not in FIGURE_SUFFIXES:
        fail(f"--out {out}: the image type comes from the suffix; use one of {', '.join(FIGURE_SUFFIXES)}")
    try:
        fig = draw_sweep(paths[0], metric, x, hue) if is_sweep else draw_runs(list(paths), kind, time_s, replica)
    except (ValueError, KeyError) as exc:
        fail(exc)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    click.echo(f"wrote {out}")


COMMANDS = [plot_command]
