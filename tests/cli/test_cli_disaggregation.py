"""``kvsim run --prefill-replicas P --decode-replicas D --kv-transfer-config JSON``: a P/D fleet end to end."""

import json

import pandas as pd
from click.testing import CliRunner

from sim.cli import main

NIXL = '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'
PD = ["run", "--model", "llama-2-7b", "--gpu", "h100-80gb", "--num-requests", "30", "--prefill-replicas", "1",
      "--decode-replicas", "2", "--kv-transfer-config", NIXL]


def test_run_json_has_the_disaggregation_block_and_tables(tmp_path):
    result = CliRunner().invoke(main, [*PD, "--kv-transfer-gb-s", "25", "--kv-transfer-latency-s", "0.001", "--json",
                                       "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    block = summary["disaggregation"]
    assert (block["prefill_replicas"], block["decode_replicas"], block["transfers"]) == (1, 2, 30)
    assert (block["kv_transfer_gb_s"], block["kv_transfer_latency_s"]) == (25.0, 0.001)
    assert summary["completed"] == 30 and summary["replicas"] == 3 and len(summary["per_replica"]) == 3
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    assert set(requests.prefill_replica) == {0} and set(requests.decode_replica) == {1, 2}
    assert (requests.transfer_end_s - requests.transfer_start_s >= 0.001).all()
    assert set(pd.read_parquet(tmp_path / "steps.parquet").replica) == {0, 1, 2}
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["prefill_replicas"], config["decode_replicas"], config["kv_transfer_config"]) == (1, 2, NIXL)


def test_table_output_prints_the_replicas():
    result = CliRunner().invoke(main, PD)
    assert result.exit_code == 0, result.output
    assert "disaggregation" in result.output and "prefill_blocks_held_for_transfer_mean" in result.output


def test_unmodelled_settings_fail_in_one_line():
    for extra, words in ((["--async-scheduling"], "not modelled with --async-scheduling"),
                         (["--router", "least-kv"], "not modelled with --router least-kv"),
                         (["--kv-transfer-config", '{"kv_connector": "P2pNcclConnector"}'], "is not modelled")):
        result = CliRunner().invoke(main, [*PD, *extra])
        assert result.exit_code == 2 and words in result.output, result.output
    result = CliRunner().invoke(main, ["run", "--prefill-replicas", "1", "--kv-transfer-config", NIXL])
    assert result.exit_code == 2 and "needs both --prefill-replicas and --decode-replicas" in result.output


def test_help_names_the_flags():
    result = CliRunner().invoke(main, ["run", "--help"])
    for flag in ("--prefill-replicas", "--decode-replicas", "--kv-transfer-config", "--kv-transfer-gb-s",
                 "--kv-transfer-latency-s"):
        assert flag in result.output, flag
