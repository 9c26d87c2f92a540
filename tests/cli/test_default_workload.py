"""The default workload is a named preset (``sharegpt-demo``) on the default deployment, sized like any other
run: `--gpu-memory-utilization` counts, `run` and `compare` agree, and every run's first line (stderr) names
the workload and where its KV capacity comes from."""

import json

import pytest
from click.testing import CliRunner

from sim.cli import main

SMALL = ["--num-requests", "40"]


def invoke(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result


def summary_of(*args):
    result = invoke(*args, *SMALL, "--json")
    summary = json.loads(result.stdout)  # the setup line went to stderr: stdout is still one JSON document
    summary.pop("wall_time_s")
    return summary, result.stderr.splitlines()[0]


def test_the_first_line_names_the_workload_and_the_derived_capacity():
    summary, first = summary_of("run")
    assert summary["workload"] == "sharegpt-demo" and summary["kv_capacity_source"] == "derived"
    assert first.startswith("workload sharegpt-demo (40 requests); opt-13b on 1 x a100-40gb; KV capacity 11.11 GiB")
    assert f"= {summary['kv_capacity_tokens']:,} token slots, derived from --gpu-memory-utilization 0.9" in first


def test_gpu_memory_utilization_sizes_the_default_run():
    """Guards the hidden 12 GiB that made --gpu-memory-utilization do nothing without a trace."""
    low, first = summary_of("run", "--gpu-memory-utilization", "0.85")
    high, _ = summary_of("run")
    assert low["kv_capacity_tokens"] < high["kv_capacity_tokens"]
    assert "--gpu-memory-utilization 0.85" in first


def test_the_default_is_the_named_preset_in_run_and_compare():
    """`kvsim run` is `kvsim run --preset sharegpt-demo`, and compare's paged column is that same run."""
    default, _ = summary_of("run")
    named, _ = summary_of("run", "--preset", "sharegpt-demo")
    assert named == default
    result = invoke("compare", "--allocator", "paged", *SMALL, "--json")
    (compared,) = json.loads(result.stdout)
    compared.pop("wall_time_s")
    assert compared == default and result.stderr.splitlines()[0].startswith("workload sharegpt-demo")


def test_a_preset_and_the_default_size_kv_memory_alike():
    """`compare --preset alpaca-paper` and the default used to get different KV sizes; now both derive it."""
    result = invoke("compare", "--allocator", "paged", "--preset", "alpaca-paper", *SMALL, "--json")
    (alpaca,) = json.loads(result.stdout)
    default, _ = summary_of("run")
    assert alpaca["kv_capacity_tokens"] == default["kv_capacity_tokens"]
    assert result.stderr.splitlines()[0].startswith("workload alpaca-paper (40 requests)")


@pytest.mark.parametrize(("flag", "value", "source"), [("--kv-gib", "12", "given by --kv-gib"),
                                                      ("--kv-tokens", "15728", "given by --kv-tokens")])
def test_a_given_kv_size_is_named_as_given(flag, value, source):
    summary, first = summary_of("run", flag, value)
    assert summary["kv_capacity_tokens"] == 15728  # the paper's 12 GiB / 800 KiB per token
    assert first.endswith(f"KV capacity 12.00 GiB = 15,728 token slots, {source}")
