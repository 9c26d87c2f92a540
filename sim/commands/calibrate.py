"""``kvsim calibrate``: time a model's steps on this machine and fit the step-cost model's coefficients.

The work is `gpu_validation.calibration`; this module only maps flags onto it and reports. torch is
imported inside the command, so ``kvsim --help`` never loads it.
"""

from __future__ import annotations

import click

from sim.commands.options import catalog_option


@click.command("calibrate")
@click.option("--model", "model", default="llama-3-8b", show_default=True,
              help="Catalog model to time (its shapes, random weights).")
@click.option("--gpu", "gpu", default=None, help="Catalog GPU this is (default: recognised from the device).")
@catalog_option
@click.option("--device", "device", type=click.Choice(["cuda", "cpu"]), default=None,
              help="Where to time (default: cuda if torch sees one, else cpu).")
@click.option("--quick", is_flag=True, help="A small grid (and on CPU, a model scaled down 8x).")
@click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
              help="Table path (default data/calibration/<gpu>/<model>.json); measurements go beside it (.csv).")
def calibrate_command(model: str, gpu: str | None, catalog: str | None, device: str | None, quick: bool,
                      out: str | None) -> None:
    """Fit bandwidth/FLOP fractions, step overhead and paged-kernel overhead; write the calibration table."""
    from sim.cli import fail

    try:
        from gpu_validation.calibration import calibrate, default_table_path, write_run
    except ImportError as exc:  # torch is the optional "gpu" extra
        fail(f"kvsim calibrate needs torch (pip install 'kvsim[gpu]'): {exc}")
    try:
        run = calibrate(model, device=device, gpu=gpu, quick=quick,
                        progress=lambda line: click.echo(f"  {line}", err=True))
    except (ValueError, KeyError) as exc:
        fail(exc)
    table = run.table
    path = out or default_table_path(table["gpu"], table["model"])
    table_path, csv_path = write_run(run, path)
    c, f = table["coefficients"], table["fit"]
    label = "CPU numbers" if table["device"] == "cpu" else table["device_name"]
    click.echo(f"calibration of {table['model']} on {table['gpu']} ({label}, {table['dtype']}, "
               f"timed as {table['timed_model']})")
    click.echo(f"  bandwidth_frac {c['bandwidth_frac']}  flops_frac {c['flops_frac']}  "
               f"step_overhead_s {c['step_overhead_s']}")
    click.echo("  paged_kernel_overhead " + "  ".join(f"{k}: {v}" for k, v in c["paged_kernel_overhead"].items()))
    click.echo(f"  fit: {f['points']} points, rmse {f['rmse_s'] * 1e3:.3g} ms, mape {f['mape']:.1%}")
    click.echo(f"wrote {table_path} and {csv_path}")


COMMANDS = [calibrate_command]
