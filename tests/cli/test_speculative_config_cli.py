"""``--speculative-config`` on the command line: a drafter method parses and sizes the pool (`kvsim capacity`),
and unknown methods are refused with the reason, naming the flag."""

import json

from click.testing import CliRunner

from sim.cli import main

EAGLE = json.dumps({"method": "eagle", "model": "yuhuili/EAGLE-llama2-chat-7B", "num_speculative_tokens": 3})


def test_capacity_with_an_eagle_drafter():
    """Llama-2-7B on an H100: 7,462 blocks without a drafter, 7,189 with EAGLE's layer (and weights)."""
    base = ["capacity", "--model", "llama-2-7b", "--gpu", "h100-80gb", "--json"]
    plain = json.loads(CliRunner().invoke(main, base).stdout)
    result = CliRunner().invoke(main, [*base, "--speculative-config", EAGLE])
    assert result.exit_code == 0, result.output
    eagle = json.loads(result.stdout)
    assert (plain["kv_capacity_tokens"], plain["kv_capacity_blocks"]) == (119_398, 7_462)
    assert (eagle["kv_capacity_tokens"], eagle["kv_capacity_blocks"]) == (115_031, 7_189)
    assert eagle["drafter_layers"] == 1 and eagle["kv_pool_bytes_per_token"] == 33 * 2 * 32 * 128 * 2


def test_run_refuses_an_unknown_method_with_the_reason():
    text = json.dumps({"method": "draft_model", "model": "m", "num_speculative_tokens": 3})
    result = CliRunner().invoke(main, ["run", "--num-requests", "2", "--speculative-config", text,
                                       "--spec-acceptance-rate", "0.5"])
    assert result.exit_code != 0
    assert "--speculative-config: method 'draft_model' is not modelled" in result.output
    assert "eagle, eagle3, mtp" in result.output


def test_run_with_eagle_reports_the_smaller_pool():
    result = CliRunner().invoke(main, ["run", "--model", "llama-2-7b", "--gpu", "h100-80gb", "--num-requests", "4",
                                       "--speculative-config", EAGLE, "--spec-acceptance-rate", "0.7", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["kv_capacity_tokens"] == 115_031
    assert summary["spec_decoding"]["num_speculative_tokens"] == 3
