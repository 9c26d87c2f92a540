"""Regressions found by driving the `kvsim` command line as a demanding user would."""

import json

import click
import pytest
from click.testing import CliRunner

from sim.cli import fail, main


def _invoke(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_fail_keeps_quotes_that_belong_to_the_message(capsys):
    # `kvsim plot EMPTY_DIR` said "...No such file or directory: 'EMPTY_DIR/summary.json" (closing quote eaten).
    with pytest.raises(click.exceptions.Exit) as info:
        fail(ValueError("x/summary.json: cannot read: [Errno 2] No such file or directory: 'x/summary.json'"))
    assert info.value.exit_code == 2
    assert capsys.readouterr().err.rstrip("\n").endswith("'x/summary.json'")
    with pytest.raises(click.exceptions.Exit):
        fail(KeyError("unknown model 'nope'"))
    assert capsys.readouterr().err == "Error: unknown model 'nope'\n"


def test_a_usage_error_is_one_line():
    result = _invoke(["capacity", "--model", "nope"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [result.output.strip()]
    assert result.output.startswith("Error: unknown model 'nope'; valid choices: opt-13b")


def test_plot_of_a_directory_without_summary_names_the_file(tmp_path):
    result = _invoke(["plot", tmp_path])
    assert result.exit_code == 2
    assert "no summary.json: not a `kvsim run --out` directory" in result.output and "Traceback" not in result.output


def test_calibrate_runs_as_the_readme_shows_without_model(tmp_path):
    # README: "On a machine without a GPU, `kvsim calibrate --device cpu --quick` runs the same pipeline end to
    # end" -- but --model was required, so the documented command failed with "Missing option '--model'".
    out = tmp_path / "x.json"
    result = _invoke(["calibrate", "--device", "cpu", "--quick", "--out", out])
    assert result.exit_code == 0, result.output
    table = json.loads(out.read_text())
    assert table["model"] == "llama-3-8b" and table["device"] == "cpu"
