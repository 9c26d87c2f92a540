"""`kvsim reproduce paper`: rerun the PagedAttention paper's OPT-13B experiments and compare with its numbers."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

import click

EXPERIMENT_CHOICES = ("capacity", "fig2", "curves", "sizes", "block-size", "preemption", "sharing")


@click.group("reproduce")
def reproduce_group() -> None:
    """Reproduce published results with kvsim."""


@reproduce_group.command("paper")
@click.option("--quick", is_flag=True, help="Smoke-sized runs (about a minute at most); numbers not comparable.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for results.json, CSV tables and PNG figures (nothing is written without it).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of the table.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes for independent runs.")
@click.option("--only", "only", multiple=True, type=click.Choice(EXPERIMENT_CHOICES),
              help="Run only these experiments (repeatable).")
def paper_command(quick: bool, out: Path | None, as_json: bool, workers: int, only: tuple[str, ...]) -> None:
    """Kwon et al., SOSP 2023 (PagedAttention), OPT-13B on an A100-40GB with 12 GiB of KV memory.

    Runs the capacity check, the Fig. 2 memory breakdown and Fig. 13 batch sizes (ShareGPT at 2 req/s, one hour
    of arrivals, contiguous-max/pow2/oracle and paged), normalized latency against rate with sustained-rate
    ratios (also on the paper's OPT-66B and OPT-175B deployments: "sizes"), the block-size sweep, recompute against
    swap on preemption at each block size ("preemption", Fig. 19), and parallel sampling and beam search with
    paged-cow; prints ours against the paper's values with pass or miss. The
    sustained rate is the highest rate whose normalized latency stays under 0.2 s/token (the knee bisected,
    then interpolated).
    """
    from sim.reproduce import paper
    from sim.reproduce.experiments import SIZES
    from sim.reproduce.report import checks_table, results_json, tally, write_outputs
    from sim.reproduce.run import EXPERIMENTS, reproduce_paper

    sizes = SIZES["quick" if quick else "full"]
    flags = (["--quick"] if quick else []) + (["--out", str(out)] if out else []) + (["--json"] if as_json else [])
    flags += (["--workers", str(workers)] if workers > 1 else []) + [f"--only={name}" for name in only]
    command = " ".join(["kvsim reproduce paper", *map(shlex.quote, flags)])
    start = time.perf_counter()
    rep = reproduce_paper(sizes, workers=workers, experiments=only or EXPERIMENTS,
                          log=lambda message: click.echo(message, err=True))
    if as_json:
        click.echo(json.dumps(results_json(rep, command), indent=2, default=float))
    else:
        click.echo(f"kvsim vs the paper ({sizes.name} sizes; OPT-13B, A100-40GB, 12 GiB KV, block 16, no chunked "
                   f"prefill, recompute; cost profile {paper.COST_PROFILE}: the SOSP'23 vLLM, its per-sequence CPU "
                   f"term fitted to Fig. 13's vLLM mean batch)")
        click.echo(checks_table(rep.checks))
        for preset, rates in rep.sustained.items():
            listed = ", ".join(f"{name} {rate:.2f}" for name, rate in rates.items())
            click.echo(f"sustained rate (req/s, normalized latency <= {rep.bound_s_per_token} s/token), "
                       f"{preset}: {listed}")
        for model, rates in rep.size_sustained.items():
            gpu, gpus, kv_gib = paper.LARGER_MODELS[model]
            listed = ", ".join(f"{name} {rate:.2f}" for name, rate in rates.items())
            click.echo(f"sustained rate (req/s), sharegpt-paper on {model} ({gpus} x {gpu}, {kv_gib:g} GiB KV): "
                       f"{listed}")
        click.echo(f"{tally(rep.checks)}; {time.perf_counter() - start:.0f} s")
    if out is not None:
        paths = write_outputs(rep, out, command)
        click.echo(f"wrote {len(paths)} files to {out}", err=True)


COMMANDS = [reproduce_group]
