"""`kvsim sweep` and `kvsim slo` on the command line, with the simulator replaced by the queue fake."""

from __future__ import annotations

import json
import sys
import types

import pandas as pd
import pytest
from click.testing import CliRunner
from test_sweep_fakes import queue_point

from sim.cli import main


@pytest.fixture
def fake_simulator(monkeypatch):
    """`sim.kernel.runner.run_config` answers from the queue fake (in-process runs only: --workers 1)."""
    module = types.ModuleType("sim.kernel.runner")
    module.run_config = lambda config, **_options: types.SimpleNamespace(summary=queue_point(config))
    monkeypatch.setitem(sys.modules, "sim.kernel.runner", module)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_sweep_writes_the_table_and_a_rerun_skips(tmp_path, fake_simulator):
    out = tmp_path / "s.parquet"
    args = ["sweep", "--allocator", "paged,contiguous-max", "--block-size", "8,16", "--seed", "0,1",
            "--workers", "1", "--quiet", "--out", str(out)]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert "8 points: 8 run (0 failed), 0 already done" in result.output
    table = pd.read_parquet(out)
    assert len(table) == 8 and list(table["seed"]) == [0, 1] * 4
    result = invoke(*[a if a != "0,1" else "0,1,2" for a in args])
    assert "12 points: 4 run (0 failed), 8 already done" in result.output


def test_sweep_from_toml_with_flag_override(tmp_path, fake_simulator):
    config = tmp_path / "grid.toml"
    config.write_text('[base]\nnum_requests = 50\n[axes]\nallocator = ["paged", "broken"]\nrate = [1.0, 2.0]\n')
    out = tmp_path / "s.csv"
    result = invoke("sweep", "--config", str(config), "--rate", "3", "--workers", "1", "--out", str(out))
    assert result.exit_code == 1  # a failed point fails the command, after the table is written
    assert "2 points: 2 run (1 failed)" in result.output
    assert "Error: 1 of 2 points failed: 1 x RuntimeError: simulated failure" in result.output
    assert "RuntimeError: simulated failure" in result.output  # failures listed (stderr is mixed in)
    table = pd.read_csv(out)
    assert list(table["rate"]) == [3.0, 3.0] and list(table["num_requests"]) == [50, 50]


@pytest.mark.parametrize(("args", "message"), [
    (["--blocksize", "16"], "unknown configuration field 'blocksize'"),
    (["--block-size", "x"], "expected an integer"),
    (["--dask-scheduler", "tcp://127.0.0.1:8786", "--executor", "local"], "it needs --executor dask"),
    (["--out", "s.txt"], "must end in .parquet or .csv"),
])
def test_sweep_usage_errors_exit_2(tmp_path, args, message, fake_simulator):
    result = CliRunner().invoke(main, ["sweep", "--workers", "1", *args], catch_exceptions=False)
    assert result.exit_code == 2 and message in result.output


@pytest.mark.parametrize(("values", "message"), [
    (["--allocator", "paged,Paged"], "unknown allocator 'Paged'; valid choices: contiguous-max, contiguous-pow2"),
    (["--allocator", "contiguous-max", "--placement", "buddy,First-Fit"], "unknown placement 'First-Fit'"),
])
def test_unknown_allocator_names_are_refused_before_any_point_runs(tmp_path, values, message, fake_simulator):
    """`kvsim run --allocator Paged` refuses the name; a sweep ran the other points first and failed that one
    after them. It is refused as the grid is built now, with the valid names, and no table is written."""
    out = tmp_path / "s.csv"
    result = CliRunner().invoke(main, ["sweep", *values, "--workers", "1", "--quiet", "--out", str(out)])
    assert result.exit_code == 2 and message in result.output
    assert "points" not in result.output and not out.exists()


def test_dask_missing_is_a_clear_error(tmp_path, monkeypatch, fake_simulator):
    monkeypatch.setitem(sys.modules, "distributed", None)
    result = CliRunner().invoke(main, ["sweep", "--executor", "dask", "--out", str(tmp_path / "s.parquet")])
    assert result.exit_code == 2 and "pip install 'kvsim[dist]'" in result.output


def test_slo_table_json_parquet_and_plot(tmp_path, fake_simulator):
    out, plot = tmp_path / "slo.parquet", tmp_path / "slo.png"
    result = invoke("slo", "--allocator", "paged,contiguous-max", "--e2e-p50", "0.5", "--tolerance", "0.05",
                    "--workers", "1", "--out", str(out), "--plot", str(plot))
    assert result.exit_code == 0, result.output
    assert "target: e2e_p50_s<=0.5" in result.output and "sustained_rate" in result.output
    table = pd.read_parquet(out)
    assert list(table["status"]) == ["ok", "ok"]
    assert plot.stat().st_size > 1000
    result = invoke("slo", "--allocator", "paged", "--normalized-latency", "0.005", "--json", "--workers", "1")
    rows = json.loads(result.output)
    assert rows[0]["status"] == "ok" and rows[0]["rate_ok"] <= 6.4 < rows[0]["rate_fail"]


@pytest.mark.parametrize(("args", "message"), [
    ([], "give at least one target"),
    (["--e2e-p50", "1", "--rate", "1,2"], "chooses the rate itself"),
    (["--e2e-p50", "1", "--arrivals", "gamma:rate=1,cv=3"], "sets each probe's rate itself, as --rate does; do "
                                                             "not give --arrivals"),
    (["--e2e-p50", "1", "--growth", "1"], "growth must be above 1"),
])
def test_slo_usage_errors_exit_2(args, message, fake_simulator):
    result = CliRunner().invoke(main, ["slo", "--workers", "1", *args], catch_exceptions=False)
    assert result.exit_code == 2 and message in result.output
