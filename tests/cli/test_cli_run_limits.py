"""Regression: ``kvsim run``/``compare`` take --gpu-memory-utilization; --num-requests beyond a trace file
is a one-line error as for a preset; ``kvsim trace stats DIR`` says it is a directory; counts, rates and spec
values past what kvsim can hold or time are one-line errors naming them."""

import json

import pytest
from click.testing import CliRunner

from sim.cli import main


def trace(tmp_path, count=3):
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s,prompt_tokens,output_tokens\n" + "".join(f"{i},100,10\n" for i in range(count)))
    return str(path)


def test_run_and_compare_take_gpu_memory_utilization(tmp_path):
    runner = CliRunner()
    path = trace(tmp_path)
    summaries = {}
    for util in ("0.9", "0.7"):
        out = runner.invoke(main, ["run", path, "--gpu-memory-utilization", util, "--step-time", "0.01", "--json"])
        assert out.exit_code == 0, out.output
        summaries[util] = json.loads(out.stdout)
    assert summaries["0.7"]["kv_capacity_tokens"] < summaries["0.9"]["kv_capacity_tokens"]
    out = runner.invoke(main, ["compare", path, "--allocators", "paged", "--gpu-memory-utilization", "0.7",
                               "--step-time", "0.01"])
    assert out.exit_code == 0, out.output
    out = runner.invoke(main, ["run", path, "--gpu-memory-utilization", "1.5"])
    assert out.exit_code == 2 and "--gpu-memory-utilization" in out.output


def test_num_requests_beyond_a_trace_file_is_an_error(tmp_path):
    runner = CliRunner()
    path = trace(tmp_path)
    out = runner.invoke(main, ["run", path, "--num-requests", "5", "--step-time", "0.01"])
    assert out.exit_code == 2
    assert "--num-requests 5 asks for more requests than the trace has (3)" in out.output
    assert out.output.strip().splitlines()[-1].startswith("Error: ")  # the usual `fail` message
    out = runner.invoke(main, ["run", path, "--num-requests", "3", "--step-time", "0.01", "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["requests"] == 3


def test_trace_stats_of_a_directory_says_so(tmp_path):
    out = CliRunner().invoke(main, ["trace", "stats", str(tmp_path)])
    assert out.exit_code == 2
    assert "is a directory" in out.output and "no such file" not in out.output


@pytest.mark.parametrize("args, message", [
    # before: numpy's "Maximum allowed dimension exceeded" or a MemoryError traceback
    (["run", "--num-requests", str(10**20)], "preset sharegpt-demo: num_requests must be <= 1e+08"),
    (["run", "--preset", "sharegpt-paper", "--rate", "1e6"],
     "preset sharegpt-paper: an hour at rate 1e+06 is 3.6e+09 requests, more than 1e+08; give --num-requests"),
    # before: "arrival_time_s must be finite and sorted", or a run on a clock too coarse to time its steps
    (["run", "--num-requests", "20", "--rate", "1e-20"], "arrivals Poisson(rate=1e-20): the last of 20 requests"),
    # before: "cannot convert float infinity to integer" (a traceback)
    (["trace", "generate", "--preset", "sharegpt-paper", "--rate", "inf", "--out", "t.csv"],
     "preset sharegpt-paper: rate must be a positive finite number (got inf)"),
    # before: OverflowError tracebacks
    (["trace", "generate", "--lengths", "fixed:prompt=10,output=10", "--arrivals", "gamma:rate=2,cv=1e200",
      "--num-requests", "5", "--out", "t.csv"], "cv must be within [1e-100, 1e+100], got 1e+200"),
    (["trace", "generate", "--lengths", "fixed:prompt=10,output=10", "--arrivals", "poisson:rate=2",
      "--num-requests", "5", "--n", str(10**20), "--out", "t.csv"], "generate: n must be <= 1e+06"),
    # before: a search of 7.6e13 simulations, one that never ended, a fleet that ran out of memory
    (["slo", "--e2e-p50", "1", "--growth", "1.0000000000001"], "could take 7.61e+13 simulations, over the 200"),
    (["slo", "--e2e-p50", "1", "--tolerance", "1e-300"], "--tolerance must be at least 1e-09 and finite, got 1e-300"),
    (["plan", "--ttft-p99", "1", "--rate", "1", "--max-replicas", str(10**12)],
     "--max-replicas must be in 1..10,000, got 1,000,000,000,000"),
    (["run", "--replicas", str(10**12)], "--replicas must be at most 10,000, got 1,000,000,000,000"),
])
def test_values_past_what_kvsim_holds_are_one_line(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 2, out.output
    assert out.output.strip().splitlines() == [out.output.strip()] and out.output.startswith("Error: "), out.output
    assert message in out.output


def test_a_huge_rate_is_still_a_burst():
    out = CliRunner().invoke(main, ["run", "--num-requests", "20", "--rate", "1e30", "--step-time", "0.01", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["completed"] == 20
