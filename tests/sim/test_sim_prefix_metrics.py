"""What prefix caching buys, in the summary: ``prefill_tokens``, ``cached_prompt_tokens``, ``prefix_hit_frac``
and the per-request ``cached_tokens`` column, by hand on a shared system prompt and on the Mooncake sample; and
vLLM's own counters (``prefix_cache_queries``, ``prefix_cache_hits``, ``prefix_cache_hit_rate`` and the preempted
requests' apart), counted by hand where a request waits and where one is preempted and re-admitted."""

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


def vllm_counters(summary: dict) -> tuple:
    return tuple(summary[key] for key in ("prefix_cache_queries", "prefix_cache_hits", "prefix_cache_preempted_queries",
                                          "prefix_cache_preempted_hits"))


def test_vllms_counters_on_a_shared_system_prompt():
    """Each admission looks its 600 tokens up; the second and third find the 512-token prefix: without
    preemptions or a host tier, vLLM's hit rate is ``prefix_hit_frac``. Without automatic prefix caching vLLM
    records nothing, and a shared prefix registered by copy-on-write is no lookup of vLLM's."""
    w = system_prompt_workload()
    on = run_simulation(SimConfig(kv_tokens=20_000, prefix_caching=True), w).summary
    assert vllm_counters(on) == (1800, 1024, 0, 0)
    assert on["prefix_cache_hit_rate"] == pytest.approx(1024 / 1800) == on["prefix_hit_frac"]
    off = run_simulation(SimConfig(kv_tokens=20_000, prefix_caching=False), w).summary
    cow = run_simulation(SimConfig(allocator="paged-cow", kv_tokens=20_000, prefix_caching=False), w).summary
    for summary in (off, cow):
        assert vllm_counters(summary) == (0, 0, 0, 0) and summary["prefix_cache_hit_rate"] == 0.0
    assert cow["prefix_hit_frac"] > 0


@pytest.mark.parametrize("step_by_step", [False, True])
def test_a_waiting_request_is_counted_once_when_admitted(step_by_step):
    """A (100-token prompt, 50 outputs) holds 7 of 12 usable blocks after its prefill; B (100 tokens) needs 7 for
    its whole prompt, so it waits from step 1 to A's end at step 50, tried at every step; vLLM 0.33 records a
    lookup only when it admits the request: 200 tokens looked up in all."""
    w = Workload(arrival_time_s=np.array([0.0, 1.0]), prompt_tokens=np.full(2, 100), output_tokens=np.array([50, 5]),
                 name="waiting")
    result = run_simulation(SimConfig(kv_tokens=13 * 16, prefix_caching=True, step_time=1.0,
                                      step_by_step=step_by_step, memory_snapshots=0), w)
    assert result.requests["admitted_s"].tolist() == [0.0, 50.0]
    assert vllm_counters(result.summary) == (200, 0, 0, 0)


@pytest.mark.parametrize("step_by_step", [False, True])
def test_a_preempted_request_is_counted_apart_when_re_admitted(step_by_step):
    """A and B, 48-token prompts whose first 32 tokens are one shared prefix, 100 outputs each, 10 usable blocks of
    16. Step 0 admits A (48 looked up, none found) and B (48, the 32 A is computing): 4 blocks. Both take a block
    at decode steps 1, 17 and 33; at step 49 A needs one and none is free, so B, the latest admitted, is preempted
    with 49 tokens generated and waits for 97 tokens' room, tried at every step. A takes B's 4 freed blocks,
    evicting them; once A has finished, B is re-admitted: 97 tokens looked up, the 32-token prefix found.
    vLLM's counters keep that apart: its hit rate is 32 / 96, where ``prefix_hit_frac`` is 64 / (64 + 129)."""
    w = Workload(arrival_time_s=np.zeros(2), prompt_tokens=np.full(2, 48), output_tokens=np.full(2, 100),
                 prefix_group=np.zeros(2, int), prefix_len=np.full(2, 32), name="preempted")
    result = run_simulation(SimConfig(kv_tokens=11 * 16, prefix_caching=True, step_time=1.0,
                                      step_by_step=step_by_step, memory_snapshots=0), w)
    s = result.summary
    assert result.requests["preemptions"].tolist() == [0, 1] and result.requests["cached_tokens"].tolist() == [0, 64]
    assert vllm_counters(s) == (96, 32, 97, 32)
    assert s["prefix_cache_hit_rate"] == pytest.approx(1 / 3)
    assert (s["prefill_tokens"], s["preempted_hit_tokens"]) == (48 + 16 + 65, 32)
    assert s["prefix_hit_frac"] == pytest.approx(64 / 193)


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
    # and vLLM's counters read the same rate: each admission looks up exactly the tokens it computes or finds
    assert on.summary["prefix_cache_queries"] == off.summary["prefill_tokens"]
    assert on.summary["prefix_cache_hit_rate"] == pytest.approx(on.summary["prefix_hit_frac"])
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
    assert summary["prefix_cache_hits"] > 0 and 0 < summary["prefix_cache_hit_rate"] < 1


def test_compare_prints_vllms_hit_rate_beside_kvsims():
    """`kvsim compare`'s table has vLLM's rate under kvsim's own, each allocator's as its run's summary says."""
    args = [str(MOONCAKE), "--model", "llama-3-8b", "--gpu", "h200", "--num-requests", "40", "--prefix-caching"]
    table = CliRunner().invoke(main, ["compare", "--allocator", "contiguous-oracle,paged", *args])
    assert table.exit_code == 0, table.output
    rows = {line.split()[0]: line.split()[1:] for line in table.stdout.splitlines() if line.strip()}
    names = list(rows)
    assert names.index("prefix_cache_hit_rate") == names.index("prefix_hit_frac") + 1
    summary = json.loads(CliRunner().invoke(main, ["run", *args, "--allocator", "paged", "--json"]).stdout)
    assert rows["prefix_cache_hit_rate"] == ["0", f"{summary['prefix_cache_hit_rate']:.4g}"]
    assert summary["prefix_cache_hit_rate"] > 0


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
    # vLLM's counters: 60 fresh lookups of 600 tokens finding nothing, the hits all apart
    assert (s["prefix_cache_queries"], s["prefix_cache_hits"], s["prefix_cache_hit_rate"]) == (36_000, 0, 0.0)
    assert s["prefix_cache_preempted_hits"] == s["cached_prompt_tokens"]
    assert s["prefix_cache_preempted_queries"] > s["prefix_cache_preempted_hits"]
    if replicas > 1:  # each replica counts its own lookups
        for key in ("prefix_cache_queries", "prefix_cache_preempted_queries", "prefix_cache_preempted_hits"):
            assert sum(r[key] for r in s["per_replica"]) == s[key]
    shared = run_simulation(SimConfig(prefix_caching=True, kv_tokens=200_000, memory_snapshots=0),
                            system_prompt_workload()).summary
    assert shared["preemptions"] == 0 and shared["preempted_hit_tokens"] == 0 < shared["cached_prompt_tokens"]
