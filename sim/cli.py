"""The `kvsim` command line: one click group, one module per command under `sim/commands/`.

Usage errors (bad names, negative sizes, unreadable traces) exit with code 2 and a one-line message;
`fail` is the one place that turns a ValueError or KeyError into that.
"""

from __future__ import annotations

import importlib
import warnings

import click

COMMAND_MODULES = ["capacity", "plot", "sweep", "trace", "calibrate", "run", "reproduce", "plan"]
"""Modules under `sim.commands`; each exposes the click commands listed in its ``COMMANDS``."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kvsim")
@click.pass_context
def main(ctx: click.Context) -> None:
    """kvsim: simulate LLM KV-cache memory allocation (contiguous, paged, copy-on-write)."""
    ctx.with_resource(warnings.catch_warnings())  # the hook is restored when the command ends
    previous = warnings.showwarning

    def show(message, category, *args, **kwargs) -> None:
        """kvsim's own warnings as one ``Warning: ...`` line on stderr; others as Python shows them."""
        from workloads.errors import TraceWarning  # here: importing workloads costs a second per --help

        if issubclass(category, TraceWarning):
            click.echo(f"Warning: {message}", err=True)
        else:
            previous(message, category, *args, **kwargs)

    warnings.showwarning = show


def fail(message: object) -> None:
    """Exit with code 2 (click's code for usage errors) and the one line ``Error: message`` on stderr: the
    message already names the file, row, field or valid choices, so click's usage lines would only bury it.
    A KeyError's message is its argument (``str(KeyError(m))`` wraps ``m`` in quotes); quotes inside any other
    message are kept."""
    if isinstance(message, KeyError) and message.args:
        message = message.args[0]
    click.echo(f"Error: {message}", err=True)
    raise click.exceptions.Exit(2)


for _name in COMMAND_MODULES:
    _module = importlib.import_module(f"sim.commands.{_name}")
    for _command in _module.COMMANDS:
        main.add_command(_command)
