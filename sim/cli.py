"""The `kvsim` command line: one click group, one module per command under `sim/commands/`.

Usage errors (bad names, negative sizes, unreadable traces) exit with code 2 and a one-line message;
`fail` is the one place that turns a ValueError or KeyError into that.
"""

from __future__ import annotations

import importlib
import warnings

import click

from sim.commands.failure import fail  # noqa: F401  (sim.cli.fail still works for scripts that import it)
from sim.kernel.huge_pages import without_huge_page_hint

COMMAND_MODULES = ["capacity", "plot", "sweep", "trace", "calibrate", "run", "compare", "reproduce", "plan"]
"""Modules under `sim.commands`; each exposes the click commands listed in its ``COMMANDS``."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kvsim")
@click.pass_context
def main(ctx: click.Context) -> None:
    """kvsim: simulate LLM KV-cache memory allocation (contiguous, paged, copy-on-write, radix, vAttention;
    a host-memory tier; hybrid pools)."""
    ctx.with_resource(warnings.catch_warnings())  # the hook is restored when the command ends
    ctx.with_resource(without_huge_page_hint())  # as is numpy's huge-page hint (`sim.kernel.huge_pages`)
    previous = warnings.showwarning

    def show(message, category, *args, **kwargs) -> None:
        """kvsim's own warnings as one ``Warning: ...`` line on stderr; others as Python shows them."""
        # imported here: importing them costs a second per --help
        from sim.kernel.ignored_settings import SettingWarning
        from workloads.errors import TraceWarning

        if issubclass(category, (TraceWarning, SettingWarning)):
            click.echo(f"Warning: {message}", err=True)
        else:
            previous(message, category, *args, **kwargs)

    warnings.showwarning = show


for _name in COMMAND_MODULES:
    _module = importlib.import_module(f"sim.commands.{_name}")
    for _command in _module.COMMANDS:
        main.add_command(_command)

if __name__ == "__main__":  # python -m sim.cli
    main()
