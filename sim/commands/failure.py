"""`fail`: the one place a usage error becomes kvsim's one-line ``Error: ...`` and exit code 2.

Its own module (not `sim.cli`) so that command modules can import it at the top: `sim.cli` imports every
command module while it loads, and under ``python -m sim.cli`` it is loaded a second time as ``__main__``.
"""

from __future__ import annotations

import click


def fail(message: object) -> None:
    """Exit with code 2 (click's code for usage errors) and the one line ``Error: message`` on stderr: the
    message already names the file, row, field or valid choices, so click's usage lines would only bury it.
    A KeyError's message is its argument (``str(KeyError(m))`` wraps ``m`` in quotes); quotes inside any other
    message are kept."""
    if isinstance(message, KeyError) and message.args:
        message = message.args[0]
    click.echo(f"Error: {message}", err=True)
    raise click.exceptions.Exit(2)
