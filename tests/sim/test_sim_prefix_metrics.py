"""What prefix caching buys, in the summary: ``prefill_tokens``, ``cached_prompt_tokens``, ``prefix_hit_frac``
and the per-request ``cached_tokens`` column, by hand on a shared system prompt and on the Mooncake sample."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

import workloads
from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from workloads import Workload
from workloads.presets import SAMPLES_DIR

MOONCAKE = SAMPLES_DIR / "conversation_trace.jsonl"


def system_prompt_workload() -> Workload:
    """Three requests far apart (each finishes before the next arrives), 600-token prompts whose first 512
    tokens are one shared system prompt (``prefix_group`` 0): 32 blocks of 16 known to be identical."""
    return Workload(arrival_time_s=np.array([0.0, 100.0, 200.0]), prompt_tokens=np.array([600, 600, 600]),
                    output_tokens=np.array([5, 5, 5]), prefix_group=np.zeros(3, int), prefix_len=np.full(3, 512),
                    name="system-prompt")


def check_consistent(result) -> None:
    s, requests = result.summary, result.requests
    assert s["prefill_tokens"] == int(result.steps["prefill_tokens"].sum())
    assert s["cached_prompt_tokens"] == int(requests["cached_tokens"].sum())
    total = s["prefill_tokens"] + s["cached_prompt_tokens"]
    assert s["prefix_hit_frac"] == (s["cached_prompt_tokens"] / total if s["cached_prompt_tokens"] else 0.0)
    assert requests["cached_tokens"].dtype == np.int64


def test_shared_system_prompt_by_hand():
    w = system_prompt_workload()
    off = run_simulation(SimConfig(kv_tokens=20_000, prefix_caching=False), w)
    assert (off.summary["prefill_tokens"], off.summary["cached_prompt_tokens"], off.summary["prefix_hit_frac"]) == (
        1800, 0, 0.0)
    assert off.requests["cached_tokens"].tolist() == [0, 0, 0]
    # automatic prefix caching: the first request fills the cache, the next two hit the 512-token prefix
    on = run_simulation(SimConfig(kv_tokens=20_000, prefix_caching=True), w)
    assert on.requests["cached_tokens"].tolist() == [0, 512, 512]
    assert on.summary["prefill_tokens"] == 600 + 88 + 88
    assert on.summary["cached_prompt_tokens"] == 1024
    assert on.summary["prefix_hit_frac"] == pytest.approx(1024 / 1800)
    # copy-on-write registers the shared prefix before the first admission: every request hits it
    cow = run_simulation(SimConfig(allocator="paged-cow", kv_tokens=20_000, prefix_caching=False), w)
    assert cow.requests["cached_tokens"].tolist() == [512, 512, 512]
    assert cow.summary["prefill_tokens"] == 3 * 88
    assert cow.summary["prefix_hit_frac"] == pytest.approx(1536 / 1800)
    for result in (off, on, cow):
        check_consistent(result)
    contiguous = run_simulation(SimConfig(allocator="contiguous-oracle", kv_tokens=20_000, prefix_caching=True), w)
    assert contiguous.summary["cached_prompt_tokens"] == 0 and contiguous.summary["prefill_tokens"] == 1800


def test_a_hit_never_covers_the_last_prompt_token():
    """A prompt made only of the shared prefix still computes its last token (its logits are needed)."""
    w = Workload(arrival_time_s=np.array([0.0, 50.0]), prompt_tokens=np.array([512, 512]),
                 output_tokens=np.array([3, 3]), prefix_group=np.zeros(2, int), prefix_len=np.full(2, 512),
                 name="prefix-only")
    on = run_simulation(SimConfig(kv_tokens=20_000, prefix_caching=True), w)
    assert on.requests["cached_tokens"].tolist() == [0, 496]  # 31 of 32 blocks: the lookup stops short
    assert on.summary["prefill_tokens"] == 512 + 16
    check_consistent(on)


def test_mooncake_sample_with_prefix_caching():
    w = workloads.load_trace(MOONCAKE).head(120)
    config = dict(model="llama-3-8b", gpu="h200")
    off = run_simulation(SimConfig(prefix_caching=False, **config), w)
    on = run_simulation(SimConfig(prefix_caching=True, **config), w)
    for result in (off, on):
        check_consistent(result)
        assert result.summary["preemptions"] == 0
    assert off.summary["cached_prompt_tokens"] == 0 and off.summary["prefix_hit_frac"] == 0.0
    assert on.summary["cached_prompt_tokens"] > 0 and 0.05 < on.summary["prefix_hit_frac"] < 0.95
    # without preemptions every prompt token is computed once or found cached, never both
    assert on.summary["prefill_tokens"] + on.summary["cached_prompt_tokens"] == off.summary["prefill_tokens"]
    hits = on.requests["cached_tokens"]
    assert (hits % 16 == 0).all() and (hits < on.requests["prompt_tokens"]).all()
    assert on.summary["ttft_p50_s"] < off.summary["ttft_p50_s"]


def test_cli_json_reports_the_prefix_keys(tmp_path):
    args = ["run", str(MOONCAKE), "--model", "llama-3-8b", "--gpu", "h200", "--num-requests", "40",
            "--prefix-caching", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["cached_prompt_tokens"] > 0 and 0 < summary["prefix_hit_frac"] < 1
    assert summary["prefill_tokens"] > 0


@pytest.mark.parametrize("replicas", [1, 2])
def test_hits_of_preempted_requests_are_told_apart(replicas):
    """Prompts that share nothing, on a pool too small for them all: every hit is a preempted request finding its
    own blocks again when it is re-admitted (vLLM's ``preempted_hits``), and the summary says so; the fleet's
    worker processes carry the count back too."""
    w = workloads.generate("fixed:prompt=600,output=400", "poisson:rate=40", 60, seed=0)
    config = SimConfig(prefix_caching=True, kv_tokens=4000, memory_snapshots=0, replicas=replicas)
    result = run_simulation(config, w, workers=replicas)
    s = result.summary
    assert s["preemptions"] > 0 and s["cached_prompt_tokens"] > 0
    assert s["preempted_hit_tokens"] == s["cached_prompt_tokens"]
    shared = run_simulation(SimConfig(prefix_caching=True, kv_tokens=200_000, memory_snapshots=0),
                            system_prompt_workload()).summary
    assert shared["preemptions"] == 0 and shared["preempted_hit_tokens"] == 0 < shared["cached_prompt_tokens"]
