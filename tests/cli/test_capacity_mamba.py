"""``kvsim capacity`` of a hybrid attention/Mamba model (`sim.commands.mamba_capacity`): vLLM 0.33's pool and
what a request holds in it; settings not checked against vLLM refused, naming the flag."""

import json

import pytest
from click.testing import CliRunner

from sim.cli import main


def run(*args: str):
    return CliRunner().invoke(main, ["capacity", "--model", "nemotron-h-8b", "--gpu", "h100-80gb", *args])


def test_json_figures():
    result = run("--kv-gib", "60", "--prompt-len", "1000", "--output-len", "41", "--json")
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert r["block_size"] == 1040 and r["kv_capacity_blocks"] == 3780  # vLLM's planner: data/mamba_pool.json
    assert r["mamba_pool"]["attention_groups"] == 1 and r["mamba_pool"]["mamba_groups"] == 6
    assert r["blocks_per_request"] == 1 + 6  # 1,040 tokens: one attention block, one state block per Mamba group
    assert r["max_concurrent_requests"] == 3779 // 7


def test_text_names_the_pool():
    result = run("--kv-gib", "60")
    assert result.exit_code == 0, result.output
    assert "attention block size 1040" in result.output
    assert "7 KV cache groups of 4 layers (1 attention, 6 Mamba): 3,780 blocks" in result.output
    assert "max concurrent requests: 269" in result.output


@pytest.mark.parametrize("flags, named", [
    (("--allocator", "contiguous-max"), "--allocator contiguous-max"),
    (("--allocator", "vattention"), "--allocator vattention"),
    (("--kv-cache-dtype", "fp8"), "--kv-cache-dtype fp8"),
    (("--disable-hybrid-kv-cache-manager",), "--disable-hybrid-kv-cache-manager"),
    (("--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}'), "--speculative-config"),
])
def test_unchecked_settings_are_refused(flags, named):
    result = run("--kv-gib", "60", *flags)
    assert result.exit_code != 0
    assert named in result.output and "not modelled" in result.output
