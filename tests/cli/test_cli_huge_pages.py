"""The `kvsim` command turns numpy's transparent-huge-page hint off for its run and puts it back after, unless
the environment sets numpy's own switch (`sim.kernel.huge_pages`)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.kernel.huge_pages import set_huge_page_hint


def hint() -> bool:
    """numpy's current setting (read by setting it back)."""
    value = set_huge_page_hint(True)
    set_huge_page_hint(value)
    return value


@click.command("hint-probe")
def probe() -> None:
    click.echo(f"hint={hint()}")


@pytest.fixture
def with_probe():
    main.add_command(probe)
    previous = set_huge_page_hint(True)
    yield
    set_huge_page_hint(previous)
    main.commands.pop("hint-probe")


def test_the_command_runs_without_the_hint_and_restores_it(with_probe, monkeypatch):
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    result = CliRunner().invoke(main, ["hint-probe"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "hint=False"
    assert hint() is True


def test_numpys_own_switch_rules(with_probe, monkeypatch):
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
    result = CliRunner().invoke(main, ["hint-probe"])
    assert result.output.strip() == "hint=True"
