"""``kvsim run`` and ``kvsim compare`` end to end."""

import json

import pandas as pd
from click.testing import CliRunner

from sim.cli import main


def test_run_json_and_outputs(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", "--num-requests", "40", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    for key in ("allocator", "requests", "completed", "rejected", "preemptions", "sim_time_s", "wall_time_s",
                "throughput_tok_s", "throughput_req_s", "mean_running", "max_running",
                "normalized_latency_s_per_tok", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "e2e_p50_s",
                "token_states_frac", "reservation_frac", "internal_frag_frac", "external_frag_frac", "free_frac",
                "block_usage_frac", "token_occupancy_frac", "shared_saved_frac"):
        assert key in summary, key
    # the default deployment derives its KV memory (0.9 of an A100-40GB less OPT-13B's weights, activations and
    # vLLM 0.11's CUDA-graph memory), as any run does
    assert summary["requests"] == 40 and summary["kv_capacity_tokens"] == 14565
    assert summary["kv_capacity_source"] == "derived"
    assert len(pd.read_parquet(out / "requests.parquet")) == 40
    assert {"time_s", "num_steps", "token_states"} <= set(pd.read_parquet(out / "steps.parquet").columns)
    assert json.loads((out / "config.json").read_text())["allocator"] == "paged"
    assert (out / "memory.parquet").exists() and (out / "summary.json").exists()


def test_run_table_and_csv(tmp_path):
    result = CliRunner().invoke(main, ["run", "--allocator", "contiguous-max", "--num-requests", "20", "--out",
                                       str(tmp_path), "--format", "csv", "--step-time", "0.02"])
    assert result.exit_code == 0, result.output
    assert "throughput_tok_s" in result.output and (tmp_path / "steps.csv").exists()


def test_compare_side_by_side():
    result = CliRunner().invoke(main, ["compare", "--num-requests", "30", "--json",
                                       "--allocators", "paged,contiguous-max"])
    assert result.exit_code == 0, result.output
    summaries = json.loads(result.stdout)
    assert [s["allocator"] for s in summaries] == ["paged", "contiguous-max"]
    assert summaries[0]["mean_running"] > summaries[1]["mean_running"]
    table = CliRunner().invoke(main, ["compare", "--num-requests", "30", "--allocators", "paged,contiguous-oracle"])
    assert table.exit_code == 0 and "contiguous-oracle" in table.output


def test_bad_input_is_one_line_exit_2():
    runner = CliRunner()
    for args in (["run", "--allocator", "nope"], ["run", "--block-size", "0"], ["run", "missing.csv"],
                 ["compare", "--model", "gpt-9"]):
        result = runner.invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.output.strip().splitlines()  # the run's setup line (stderr) may come first
        assert lines[-1].startswith("Error: ") and all(line.startswith("workload ") for line in lines[:-1]), \
            (args, result.output)


def test_out_removes_an_earlier_runs_tables_of_the_other_format(tmp_path):
    """Guards `run --out DIR` then `run --out DIR --format csv`, which left the first run's parquet tables beside
    the second's csv ones, and `kvsim plot` (parquet first) drew the old run under the new summary. The other
    format's requests/steps/memory tables go, named in one stderr line; any other file stays. Both ways, and
    `compare --out`'s per-allocator directories too."""
    out = tmp_path / "p"
    out.mkdir()
    keep = ["notes.txt", "requests.parquet.bak", "ttft.png", "extra.parquet"]
    for name in keep:
        (out / name).write_text("mine")
    args = ["run", "--step-time", "0.01", "--out", str(out)]
    first = CliRunner().invoke(main, [*args, "--num-requests", "10"])
    assert first.exit_code == 0, first.output
    assert "removed" not in first.stderr
    second = CliRunner().invoke(main, [*args, "--num-requests", "12", "--format", "csv"])
    assert second.exit_code == 0, second.output
    notes = [line for line in second.stderr.splitlines() if "removed" in line]
    assert notes == [f"Note: removed an earlier run's requests.parquet, steps.parquet, memory.parquet from {out}, "
                     "so that only this run's .csv tables are there"]
    tables = {p.name for p in out.iterdir()} - set(keep)
    assert tables == {"requests.csv", "steps.csv", "memory.csv", "summary.json", "config.json"}
    assert all((out / name).read_text() == "mine" for name in keep)
    assert len(pd.read_csv(out / "requests.csv")) == 12
    back = CliRunner().invoke(main, [*args, "--num-requests", "10", "--format", "parquet"])
    assert back.exit_code == 0 and "removed an earlier run's requests.csv, steps.csv, memory.csv" in back.stderr
    assert not list(out.glob("*.csv")) and (out / "requests.parquet").exists()
    cmp = tmp_path / "cmp"
    for fmt in ("parquet", "csv"):
        result = CliRunner().invoke(main, ["compare", "--num-requests", "10", "--step-time", "0.01", "--allocator",
                                           "paged", "--out", str(cmp), "--format", fmt])
        assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (cmp / "paged").iterdir()) == [
        "config.json", "memory.csv", "requests.csv", "steps.csv", "summary.json"]
