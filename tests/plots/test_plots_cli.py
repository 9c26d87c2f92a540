"""`kvsim plot` reads run directories and sweep tables, draws the asked figure and reports bad input in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from sim.commands.plot import RUN_KINDS, plot_command

SHARES = ["token_states", "reservation", "internal_frag", "external_frag", "free"]


def write_run(run_dir: Path, allocator: str, memory: bool = True) -> Path:
    run_dir.mkdir(parents=True)
    n = 20
    steps = pd.DataFrame({"time_s": np.arange(n) * 0.5, "duration_s": 0.5, "running": np.arange(n) % 7,
                          "token_states": 400, "reservation": 100, "internal_frag": 200, "external_frag": 100,
                          "free": 200, "capacity": 1000, "prefill_tokens": 64})
    steps.to_parquet(run_dir / "steps.parquet")
    requests = pd.DataFrame({"request_id": range(n), "ttft_s": np.linspace(0.1, 1, n),
                             "tpot_s": np.linspace(0.01, 0.05, n), "rejected": False, "admitted_s": np.arange(n) * 0.5,
                             "prompt_tokens": 100, "cached_tokens": np.arange(n) % 3 * 16})
    requests.to_parquet(run_dir / "requests.parquet")
    if memory:
        owners = np.repeat([-2, 3, 4, -1], 250)
        pd.DataFrame({"time_s": 5.0, "slot": np.arange(1000), "owner": owners}).to_parquet(run_dir / "memory.parquet")
    summary = {"allocator": allocator, "mean_running": 3.0,
               **{f"{s}_frac": v for s, v in zip(SHARES, [0.4, 0.1, 0.2, 0.1, 0.2], strict=True)}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


@pytest.fixture
def runs(tmp_path: Path) -> list[Path]:
    return [write_run(tmp_path / "a", "paged"), write_run(tmp_path / "b", "contiguous-max", memory=False)]


@pytest.mark.parametrize("kind", RUN_KINDS)
def test_every_kind_draws_a_png_from_one_run(runs, kind):
    result = CliRunner().invoke(plot_command, [str(runs[0]), "--kind", kind, "--dpi", "30"])
    assert result.exit_code == 0, result.output
    out = runs[0] / f"{kind}.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {out}" in result.output


def test_several_runs_draw_one_comparison_svg(runs, tmp_path):
    out = tmp_path / "figs" / "cmp.svg"
    result = CliRunner().invoke(plot_command, [*map(str, runs), "--kind", "breakdown", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert b"<svg" in out.read_bytes()[:400]


def test_missing_memory_table_is_a_one_line_usage_error(runs):
    result = CliRunner().invoke(plot_command, [str(runs[1]), "--kind", "memory-map"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "no memory.parquet or memory.csv" in result.output and "kvsim run --out" in result.output


def test_not_a_run_directory_and_bad_suffix_are_usage_errors(tmp_path, runs):
    result = CliRunner().invoke(plot_command, [str(tmp_path / "nope")])
    assert result.exit_code == 2 and "not a run directory" in result.output
    result = CliRunner().invoke(plot_command, [str(runs[0]), "--out", str(tmp_path / "x.jpg")])
    assert result.exit_code == 2 and ".png" in result.output


def test_csv_run_tables_are_read_too(runs):
    import pandas as pd

    steps = runs[0] / "steps.parquet"
    pd.read_parquet(steps).to_csv(runs[0] / "steps.csv", index=False)
    steps.unlink()
    result = CliRunner().invoke(plot_command, [str(runs[0]), "--kind", "memory", "--dpi", "30"])
    assert result.exit_code == 0, result.output


def test_a_sweep_kind_needs_a_table(runs):
    result = CliRunner().invoke(plot_command, [str(runs[0]), "--kind", "sweep"])
    assert result.exit_code == 2 and "sweep table" in result.output


def test_plot_is_registered_with_the_cli():
    from sim.cli import COMMAND_MODULES

    assert "plot" in COMMAND_MODULES


def test_a_sweep_table_goes_to_the_sweep_figure(tmp_path):
    table = tmp_path / "sweep.parquet"
    pd.DataFrame({"point_id": list("abcd"), "status": "ok", "allocator": ["paged", "paged", "contiguous-max", "contiguous-max"],
                  "rate": [1.0, 2.0, 1.0, 2.0],
                  "normalized_latency_s_per_tok": [0.03, 0.05, 0.2, 1.0]}).to_parquet(table)
    result = CliRunner().invoke(plot_command, [str(table), "--x", "rate", "--hue", "allocator", "--dpi", "30"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"


def test_one_allocator_in_two_runs_is_told_apart_by_its_path(tmp_path):
    """Two `paged` runs in directories of the same name (two traces' runs, say) are labelled by their paths;
    one directory given twice is an error, not a figure of one run drawn twice."""
    first, second = write_run(tmp_path / "x" / "paged", "paged"), write_run(tmp_path / "y" / "paged", "paged")
    result = CliRunner().invoke(plot_command, [str(first), str(second), "--kind", "breakdown", "--dpi", "30"])
    assert result.exit_code == 0, result.output
    from sim.commands.plot import load_runs

    assert list(load_runs([first, second], (), "breakdown")[0]) == [str(first), str(second)]
    other = write_run(tmp_path / "x" / "paged-no-reuse", "paged")  # compare's baseline: its directory's name
    assert list(load_runs([first, other], (), "breakdown")[0]) == ["paged", "paged-no-reuse"]
    twice = CliRunner().invoke(plot_command, [str(first), str(first), "--kind", "breakdown"])
    assert twice.exit_code == 2 and "given twice" in twice.output


def test_replicas_kind_of_a_single_replica_run_says_so(runs):
    result = CliRunner().invoke(plot_command, [str(runs[0]), "--kind", "replicas"])
    assert result.exit_code == 2 and "is not one" in result.output.strip().splitlines()[-1]


def test_a_compare_directory_or_an_empty_one_is_told_what_to_plot(tmp_path, runs):
    """`kvsim compare --out DIR` writes a run directory per allocator: DIR itself is told to plot DIR/*, where
    it said only that DIR/summary.json could not be read; an empty directory is told it is no run."""
    result = CliRunner().invoke(plot_command, [str(tmp_path)])
    assert result.exit_code == 2 and result.stderr.splitlines() == [
        f"Error: {tmp_path}: holds the runs a, b (a `kvsim compare --out` directory); plot them: kvsim plot {tmp_path}/*"]
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(plot_command, [str(tmp_path / "empty")])
    assert result.exit_code == 2 and "empty: no summary.json: not a `kvsim run --out` directory" in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--kind", "memory-map", "--time", "nan"], "--time nan: the instant of a --kind memory-map, in simulated "
                                                "seconds >= 0"),
    (["--kind", "memory-map", "--time", "-5"], "--time -5: the instant of a --kind memory-map, in simulated seconds >= 0"),
    (["--kind", "memory", "--time", "3"], "--time 3: the instant of a --kind memory-map, in simulated seconds >= 0, "
                                          "not of --kind memory"),
    (["--metric", "mean_running"], "--metric: options of a sweep table's figure, not of run directories"),
])
def test_options_a_figure_does_not_take_are_refused(runs, args, message):
    """Guards `--time nan` (drawn with a caption about "the nan s asked for"), `--time` on another kind and the
    sweep's --metric/--x/--hue on run directories, all accepted and dropped without a word."""
    result = CliRunner().invoke(plot_command, [str(runs[0]), *args])
    assert result.exit_code == 2 and result.stderr.splitlines() == [f"Error: {message}"], result.output


def test_a_text_metric_of_a_sweep_table_is_a_one_line_error(tmp_path):
    table = tmp_path / "sweep.parquet"
    pd.DataFrame({"point_id": list("ab"), "status": "ok", "allocator": ["paged", "radix"], "rate": [1.0, 1.0],
                  "throughput_tok_s": [10.0, 12.0], "step_time": [None, None]}).to_parquet(table)
    for metric in ("allocator", "step_time"):
        result = CliRunner().invoke(plot_command, [str(table), "--metric", metric])
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"Error: --metric {metric}: no number in any successful point; metrics "
                                        "with numbers here: throughput_tok_s")
