"""``kvsim capacity``'s own ignored settings (`sim.commands.capacity_ignored`): flags that act on a run or on a
derived KV size but change none of a capacity report's figures in some combination, each reported once as a run
reports its own, and those that do act left unreported."""

import json

import pytest
from click.testing import CliRunner

from sim.cli import main


def run(*args: str):
    result = CliRunner().invoke(main, ["capacity", "--gpu", "h100-80gb", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


@pytest.mark.parametrize("size", [("--kv-tokens", "100000"), ("--kv-gib", "20")])
def test_token_budget_under_a_given_kv_size_is_reported(size):
    plain, _ = run("--model", "llama-3-8b", *size)
    r, err = run("--model", "llama-3-8b", *size, "--max-num-batched-tokens", "8192")
    assert r["max_concurrent_requests"] == plain["max_concurrent_requests"]
    assert r["kv_capacity_tokens"] == plain["kv_capacity_tokens"]
    assert list(r["ignored_settings"]) == ["--max-num-batched-tokens 8192"]
    assert f"paged: --max-num-batched-tokens 8192 ignored: {size[0]} gives the KV memory" in err


def test_token_budget_that_acts_is_not_reported():
    """Derived, it sizes the activation memory; on a sliding-window model's hybrid pool, what a prompt holds."""
    derived, _ = run("--model", "llama-3-8b")
    bigger, err = run("--model", "llama-3-8b", "--max-num-batched-tokens", "16384")
    assert bigger["kv_capacity_tokens"] < derived["kv_capacity_tokens"] and err == ""
    assert "ignored_settings" not in bigger
    windows, err = run("--model", "gemma-3-12b", "--kv-gib", "20", "--max-num-batched-tokens", "4096")
    assert "ignored_settings" not in windows and err == ""
    full, _ = run("--model", "gemma-3-12b", "--kv-gib", "20", "--max-num-batched-tokens", "4096",
                  "--disable-hybrid-kv-cache-manager")
    assert list(full["ignored_settings"]) == ["--max-num-batched-tokens 4096"]  # windows held as full attention


def test_prefix_caching_off_on_a_model_without_mamba_is_reported():
    on, _ = run("--model", "llama-3-8b", "--kv-gib", "20")
    off, err = run("--model", "llama-3-8b", "--kv-gib", "20", "--no-enable-prefix-caching")
    assert off["max_concurrent_requests"] == on["max_concurrent_requests"]
    assert list(off["ignored_settings"]) == ["--no-prefix-caching"]
    assert "paged: --no-prefix-caching ignored: the requests sized share no prompt" in err


def test_expert_parallel_under_a_given_kv_size_is_reported():
    """32 experts over 3 GPUs do not split evenly (which a run reports in its own words), yet with --kv-gib the
    weights they move take nothing from the pool."""
    plain, _ = run("--model", "gpt-oss-20b", "--kv-gib", "20", "-dp", "3")
    ep, err = run("--model", "gpt-oss-20b", "--kv-gib", "20", "-dp", "3", "-ep")
    assert ep["max_concurrent_requests"] == plain["max_concurrent_requests"]
    assert list(ep["ignored_settings"]) == ["--enable-expert-parallel"]
    assert "--kv-gib gives the KV memory; expert parallelism changes only" in err
    even, _ = run("--model", "gpt-oss-20b", "--kv-gib", "20", "-dp", "2", "-ep")
    assert "divide gpt-oss-20b's 32 routed experts evenly" in even["ignored_settings"]["--enable-expert-parallel"]
    derived, _ = run("--model", "gpt-oss-20b", "-dp", "3", "-ep")
    assert "ignored_settings" not in derived


def test_ngram_speculation_is_reported():
    spec = '{"method": "ngram", "num_speculative_tokens": 3}'
    plain, _ = run("--model", "llama-3-8b", "--kv-gib", "20")
    r, err = run("--model", "llama-3-8b", "--kv-gib", "20", "--speculative-config", spec)
    assert r["max_concurrent_requests"] == plain["max_concurrent_requests"] and r["drafter_layers"] == 0
    assert list(r["ignored_settings"]) == [f"--speculative-config {spec}"]
    assert "no drafter model (ngram)" in err
