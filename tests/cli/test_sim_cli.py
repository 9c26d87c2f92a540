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
