"""`kvsim sweep` keeps the commas inside a value (a column mapping, an arrival spec) instead of splitting them
into grid points, and a sweep with failed points exits 1 after writing what finished, saying how many failed
and why. Real simulations of a 6-request trace."""

import pandas as pd
import pytest
from click.testing import CliRunner

from sim.cli import main

MAPPING = "arrival_time_s=t,prompt_tokens=inp,output_tokens=outp"
FAST = ["--step-time", "0.01", "--kv-tokens", "4096", "--workers", "1", "--quiet"]


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "odd.csv"
    path.write_text("t,inp,outp\n" + "".join(f"{i * 0.5},{40 + i},{5 + i}\n" for i in range(6)))
    return str(path)


def sweep(*args):
    return CliRunner().invoke(main, ["sweep", *args])


@pytest.mark.parametrize("flag", ["--trace-columns", "--columns"])
def test_the_issues_sweep_reads_the_mapping_whole(trace, tmp_path, flag):
    """Guards `--trace-columns a=b,c=d`, which became 3 grid values and 3 failed points, with exit 0."""
    out = tmp_path / "s.parquet"
    result = sweep("--trace", trace, flag, MAPPING, "--allocator", "paged,contiguous-max", *FAST, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "2 points: 2 run (0 failed)" in result.output
    table = pd.read_parquet(out)
    assert list(table["trace_columns"]) == [MAPPING, MAPPING] and list(table["completed"]) == [6, 6]


def test_spec_values_keep_their_commas_and_split_on_semicolons(trace, tmp_path):
    out = tmp_path / "s.parquet"
    result = sweep("--trace", trace, "--columns", MAPPING, "--arrivals", "gamma:rate=2,cv=3;poisson:rate=4",
                   *FAST, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert list(pd.read_parquet(out)["arrivals"]) == ["gamma:rate=2,cv=3", "poisson:rate=4"]


def test_failed_points_exit_1_after_writing_what_finished(trace, tmp_path):
    """One unknown model among three (a model is looked up per point, in that point's catalog): the two good
    points are in the table, the command exits 1, and stderr says how many failed and why."""
    out = tmp_path / "s.csv"
    result = sweep("--trace", trace, "--columns", MAPPING, "--model", "opt-13b,no-such,llama-2-7b", *FAST,
                   "--out", str(out))
    assert result.exit_code == 1, result.output
    table = pd.read_csv(out)
    assert list(table["status"]) == ["ok", "failed", "ok"] and list(table["completed"].dropna()) == [6, 6]
    summary = result.stderr.strip().splitlines()[-1]
    assert summary.startswith("Error: 1 of 3 points failed: 1 x ") and "no-such" in summary


def test_a_points_own_trace_errors_are_counted_as_failures(trace, tmp_path):
    """Without the timestamp mapped, every point fails for the same reason: one line says so, exit 1."""
    out = tmp_path / "s.parquet"
    result = sweep("--trace", trace, "--columns", "prompt_tokens=inp,output_tokens=outp", "--seed", "0,1", *FAST,
                   "--out", str(out))
    assert result.exit_code == 1
    assert "Error: 2 of 2 points failed: 2 x TraceError:" in result.stderr
    assert "field 'arrival_time_s'" in result.stderr and out.exists()


@pytest.mark.parametrize("command", [["sweep"], ["slo", "--ttft-p99", "1"], ["plan", "--ttft-p99", "1"]])
def test_a_trace_given_as_an_argument_is_pointed_to_trace(trace, tmp_path, monkeypatch, command):
    """Guards `kvsim sweep good.csv` (as `kvsim run good.csv`), whose error said only what grid flags look like:
    an existing file, or a name ending as a trace does, gets the hint where a trace goes; another word not."""
    monkeypatch.chdir(tmp_path)
    grid = "grid flags look like --field-name V1,V2"
    for token in (trace, "missing.jsonl"):
        result = CliRunner().invoke(main, [*command, token, *FAST])
        assert result.exit_code == 2, result.output
        assert result.stderr.splitlines() == [
            f"Error: unexpected argument {token!r}: {grid} (a trace file goes in --trace FILE)"]
    result = CliRunner().invoke(main, [*command, "paged", *FAST])
    assert result.exit_code == 2 and result.stderr.splitlines() == [f"Error: unexpected argument 'paged': {grid}"]
    assert [p.name for p in tmp_path.iterdir()] == ["odd.csv"]  # refused before anything ran or was written
