"""vLLM's spellings of kvsim's flags (`sim.kernel.vllm_names`): each runs exactly what kvsim's own name runs, is
shown on kvsim's --help line, and the vLLM flags whose meaning or units differ are refused saying why."""

import json
import re

import pytest
from click.testing import CliRunner

from sim.cli import main

KV = ["--kv-tokens", "2400"]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """Two shared system prompts, prompts longer than the token budget and a pool small enough to preempt: every
    aliased setting changes the summary here."""
    path = tmp_path_factory.mktemp("vllm_aliases") / "t.csv"
    rows = [f"{i * 0.05:.2f},{600 + 10 * (i % 7)},{40 + 5 * (i % 5)},{i % 2},512" for i in range(40)]
    path.write_text("arrival_time_s,prompt_tokens,output_tokens,prefix_group,prefix_len\n" + "\n".join(rows) + "\n")
    return str(path)


def summary(trace, *args):
    result = CliRunner().invoke(main, ["run", trace, "--model", "llama-3-8b", "--step-time", "0.01",
                                       "--max-num-batched-tokens", "512", "--json", *args])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    out.pop("wall_time_s")
    return out


@pytest.mark.parametrize(("kvsim", "vllm", "baseline"), [
    (["--tensor-parallel", "2"], ["--tensor-parallel-size", "2"], []),
    (["--tensor-parallel", "2"], ["-tp", "2"], []),
    ([*KV, "--no-prefix-caching"], [*KV, "--no-enable-prefix-caching"], KV),
    ([*KV, "--no-chunked-prefill"], [*KV, "--no-enable-chunked-prefill"], KV),
    ([*KV, "--no-prefix-caching", "--prefix-caching"],
     [*KV, "--no-enable-prefix-caching", "--enable-prefix-caching"], [*KV, "--no-prefix-caching"]),
    ([*KV, "--preemption", "swap"], [*KV, "--preemption-mode", "swap"], KV),
    ([*KV, "--preemption", "swap", "--swap-space-gib", "0.01"], [*KV, "--preemption", "swap", "--swap-space", "0.01"],
     [*KV, "--preemption", "swap"]),
    ([*KV, "--cpu-offload-gib", "1"], [*KV, "--kv-offloading-size", "1"], KV),
])
def test_vllm_spelling_runs_what_kvsims_name_runs(trace, kvsim, vllm, baseline):
    ours = summary(trace, *kvsim)
    assert summary(trace, *vllm) == ours
    assert summary(trace, *baseline) != ours  # the setting took effect: not a flag read and dropped


@pytest.mark.parametrize("spelling", [["--tensor-parallel", "2"], ["--tensor-parallel-size", "2"], ["-tp", "2"]])
def test_capacity_takes_vllms_tensor_parallel_size(spelling):
    result = CliRunner().invoke(main, ["capacity", "--model", "llama-3-8b", "--gpu", "a100-40gb", *spelling, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tensor_parallel"] == 2


@pytest.mark.parametrize(("command", "line"), [
    (["run"], "-tp, --tensor-parallel, --tensor-parallel-size INTEGER"),
    (["run"], "--prefix-caching, --enable-prefix-caching / --no-prefix-caching, --no-enable-prefix-caching"),
    (["run"], "--chunked-prefill, --enable-chunked-prefill / --no-chunked-prefill, --no-enable-chunked-prefill"),
    (["run"], "--preemption, --preemption-mode [recompute|swap]"),
    (["run"], "--swap-space-gib, --swap-space FLOAT"),
    (["run"], "--cpu-offload-gib, --kv-offloading-size FLOAT"),
    (["compare"], "-tp, --tensor-parallel, --tensor-parallel-size INTEGER"),
    (["capacity"], "-tp, --tensor-parallel, --tensor-parallel-size INTEGER"),
    (["calibrate"], "-tp, --tensor-parallel, --tensor-parallel-size INTEGER"),
    (["calibrate"], "--prefix-caching, --enable-prefix-caching / --no-prefix-caching, --no-enable-prefix-caching"),
])
def test_help_shows_vllms_spelling_on_kvsims_line(command, line):
    text = CliRunner().invoke(main, [*command, "--help"], terminal_width=200).output
    assert re.search(rf"^\s+{re.escape(line)}(\s|$)", text, re.M), text


@pytest.mark.parametrize(("command", "args", "why"), [
    (["run"], ["--cpu-offload-gb", "4"], "offloads model weights"),
    (["run"], ["--kv-cache-memory-bytes", "8000000000"], "bytes per GPU"),
    (["compare"], ["--num-gpu-blocks-override", "100"], "counts blocks"),
    (["capacity"], ["--kv-cache-memory-bytes", "8000000000"], "bytes per GPU"),
    (["calibrate"], ["--num-gpu-blocks-override", "100"], "counts blocks"),
])
def test_vllm_lookalike_is_refused_saying_why(command, args, why):
    result = CliRunner().invoke(main, [*command, *args])
    assert result.exit_code == 2
    assert f"Error: {args[0]} is not a kvsim setting" in result.output and why in result.output


def test_lookalikes_stay_out_of_help():
    assert "--cpu-offload-gb " not in CliRunner().invoke(main, ["run", "--help"]).output
