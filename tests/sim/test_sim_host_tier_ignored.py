"""``--cpu-offload-gib`` where no host tier can sit (no prefix cache to spill: a contiguous allocator or
vAttention, prefix caching off, a hybrid KV pool): the summary says so (``host_tier_ignored``) and ``kvsim run``
warns, instead of reporting zero host hits as if the tier had been tried."""

import json

import pytest
from click.testing import CliRunner

from allocators import ALLOCATORS, allocator_class
from allocators.catalog import get_gpu, get_model
from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.metrics import Recorder
from sim.kernel.replica import build_replica, host_tier_ignored


@pytest.mark.parametrize("allocator", list(ALLOCATORS))
@pytest.mark.parametrize("model_name", ["llama-3-8b", "gemma-3-12b"])
@pytest.mark.parametrize("prefix_caching", [True, False])
def test_the_reason_is_given_exactly_when_no_tier_is_attached(allocator, model_name, prefix_caching):
    config = SimConfig(allocator=allocator, model=model_name, gpu="h100-80gb", kv_tokens=40_000,
                       cpu_offload_gib=1.0, prefix_caching=prefix_caching)
    model = get_model(model_name)
    memory, _, _ = build_replica(config, model, get_gpu("h100-80gb"), 40_000, Recorder(0))
    reason = host_tier_ignored(config, model)
    assert (reason is None) == (memory.host_tier is not None)
    if reason is not None:
        assert reason.startswith("--cpu-offload-gib 1 ignored: ")
    if allocator_class(allocator).supports_host_tier and prefix_caching and model_name == "llama-3-8b":
        assert reason is None


def test_no_tier_asked_for_gives_no_reason():
    config = SimConfig(allocator="contiguous-max", model="llama-3-8b", gpu="h100-80gb", kv_tokens=40_000)
    assert host_tier_ignored(config, get_model("llama-3-8b")) is None


@pytest.mark.parametrize("args,reason", [
    (["--allocator", "contiguous-max"], "contiguous-max keeps no prefix cache to spill (a host tier sits behind "
                                        "paged, paged-cow, radix)"),
    (["--allocator", "paged", "--no-prefix-caching"], "prefix caching is off (--no-prefix-caching)"),
    (["--allocator", "paged", "--model", "gemma-3-12b", "--gpu", "h100-80gb"],
     "gemma-3-12b's hybrid KV pool (attention groups) has no host tier in kvsim"),
])
def test_run_warns_and_the_summary_says_why(args, reason):
    result = CliRunner().invoke(main, ["run", "--num-requests", "5", "--cpu-offload-gib", "2", "--json", *args])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["host_tier_ignored"].startswith("--cpu-offload-gib 2 ignored: " + reason)
    assert summary["host_tier_blocks"] == 0
    assert f"Warning: {summary['allocator']}: --cpu-offload-gib 2 ignored" in result.stderr


def test_a_used_tier_has_no_such_key():
    result = CliRunner().invoke(main, ["run", "--num-requests", "5", "--cpu-offload-gib", "2", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert "host_tier_ignored" not in summary and summary["host_tier_blocks"] > 0
    assert "ignored" not in result.stderr
