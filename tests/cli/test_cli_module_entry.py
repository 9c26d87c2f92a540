"""`python -m sim` and `python -m sim.cli` run the same command line as the installed `kvsim` script."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["sim", "sim.cli"])
def test_module_entry_runs_a_command(module):
    """Guards a circular import: under ``python -m sim.cli`` the CLI module loads twice (as ``__main__`` and as
    ``sim.cli``), and a command module importing ``fail`` from ``sim.cli`` at its top broke every command."""
    done = subprocess.run([sys.executable, "-m", module, "capacity", "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert '"max_concurrent_requests"' in done.stdout
