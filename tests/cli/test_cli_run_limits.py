"""Regression: ``kvsim run``/``compare`` take --gpu-memory-utilization; --num-requests beyond a trace file
is a one-line error as for a preset; ``kvsim trace stats DIR`` says it is a directory."""

import json

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
