"""``--decode-context-parallel-size`` in a run: the pool's N times the tokens in blocks of N x the block size, what
that changes in the scheduler's decisions (two requests that did not fit together now do; a shared prefix hits
only whole blocks of N x 16 tokens), the clock's KV reads and what it omits, refusals and determinism."""

import json
from dataclasses import replace

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_config, run_simulation
from tests.sim.vllm_oracle import DATA, ROOT, compare
from workloads import Workload

DSV3 = dict(model="deepseek-v3", gpu="h200", tensor_parallel=8)


def run(workload: Workload, dcp: int, **extra):
    return run_simulation(SimConfig(**DSV3, decode_context_parallel_size=dcp, **extra), workload, warn=False)


def two_at_once() -> Workload:
    return Workload(arrival_time_s=np.array([0.0, 0.0]), prompt_tokens=np.array([1000, 1000]),
                    output_tokens=np.array([50, 50]), name="two")


def test_the_same_memory_holds_both_requests_in_blocks_of_128():
    """0.8 GiB over 8 H200s: 1,527 slots of 562,176 bytes at -tp 8 (the latent on every GPU), 95 blocks of 16, so
    one 1,049-token request (66 blocks at its end) at a time; at -dcp 8 12,223 slots of 70,272 bytes, 95 blocks of
    128, both requests at once (9 blocks each at their end)."""
    tp, dcp = run(two_at_once(), 1, kv_gib=0.8), run(two_at_once(), 8, kv_gib=0.8)
    assert (tp.summary["kv_capacity_tokens"], tp.summary["block_size"]) == (1_527, 16)
    assert (dcp.summary["kv_capacity_tokens"], dcp.summary["block_size"]) == (12_223, 128)
    assert tp.steps["total_blocks"].max() == dcp.steps["total_blocks"].max() == 94  # less the null block
    assert (tp.summary["max_running"], dcp.summary["max_running"]) == (1, 2)
    # the steps table's rows hold what the prompts took (decode runs are fast-forwarded): 63 blocks, two of 8
    assert tp.steps["used_blocks"].max() == 63 and dcp.steps["used_blocks"].max() == 2 * 8
    assert dcp.summary["ttft_p99_s"] < tp.summary["ttft_p99_s"]  # the second no longer waits for the first


def test_prefix_cache_hits_land_on_the_sharded_blocks():
    """A 300-token shared prefix hits 18 blocks of 16 (288 tokens) at -tp 8, 2 blocks of 128 (256) at -dcp 8:
    vLLM hashes and matches a DCP pool's blocks at ``block_size x dcp`` tokens."""
    w = Workload(arrival_time_s=np.array([0.0, 5.0]), prompt_tokens=np.array([400, 400]),
                 output_tokens=np.array([4, 4]), prefix_group=np.array([1, 1]), prefix_len=np.array([300, 300]),
                 name="shared")
    assert run(w, 1).summary["prefix_cache_hits"] == 288
    assert run(w, 8).summary["prefix_cache_hits"] == 256


def test_each_gpu_reads_its_share_of_the_kv_and_the_summary_says_what_the_clock_omits():
    one, eight = run(two_at_once(), 1), run(two_at_once(), 8)
    assert eight.summary["tpot_p50_s"] < one.summary["tpot_p50_s"]
    omits = eight.summary["clock_omits"]
    assert any(o.startswith("decode-context-parallel communication") and "8 ranks" in o for o in omits)
    assert not any("decode-context-parallel" in o for o in one.summary.get("clock_omits", []))


def test_a_run_is_deterministic():
    first, again = run(two_at_once(), 8), run(two_at_once(), 8)
    timeless = [{k: v for k, v in r.summary.items() if k != "wall_time_s"} for r in (first, again)]
    assert timeless[0] == timeless[1]
    assert first.steps.equals(again.steps)


@pytest.mark.parametrize(("extra", "message"), [
    (dict(decode_context_parallel_size=3), "vLLM requires tp_size=8 to be divisible by dcp_size=3"),
    (dict(decode_context_parallel_size=8, allocator="contiguous-max"), "needs --allocator paged or paged-cow"),
    (dict(decode_context_parallel_size=0), "--decode-context-parallel-size must be a positive integer"),
    (dict(decode_context_parallel_size=8, prefill_replicas=1, decode_replicas=1,
          kv_transfer_config='{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'),
     "not modelled with --decode-context-parallel-size 8"),
])
def test_the_config_refuses_what_vllm_or_kvsim_does_not_run(extra, message):
    with pytest.raises(ValueError) as info:
        SimConfig(**DSV3, **extra)
    assert message in str(info.value)


def test_a_config_round_trips():
    config = SimConfig(**DSV3, decode_context_parallel_size=8)
    assert SimConfig.from_dict(config.to_dict()) == config


DCP_CASES = ROOT / "tests" / "sim" / "data" / "vllm_oracle_dcp"


@pytest.mark.parametrize("case", ["contended_dcp2", "shared_prefix_dcp4"])
def test_kvsim_makes_vllms_decisions_under_dcp(case):
    """vLLM's own scheduler at ``--block-size 16`` with DCP 2 and 4 (``tools/vllm_dcp_oracle.py``): its blocks of
    32 and 64 tokens, its prefix-cache hits in them, step for step and request for request. kvsim's pool is the
    same blocks: DeepSeek-V3 (MLA) at -tp N -dcp N, ``num_blocks x 16 x N`` token slots."""
    settings = json.loads((DCP_CASES / case / "settings.json").read_text())
    dcp = settings["decode_context_parallel_size"]
    config = replace(compare.kvsim_config(settings, DATA / settings["trace_of"] / "trace.csv"), model="deepseek-v3",
                     gpu="h200", tensor_parallel=dcp, decode_context_parallel_size=dcp,
                     kv_tokens=settings["num_blocks"] * settings["block_size"] * dcp)
    result = run_config(config)
    assert result.summary["block_size"] == 16 * dcp
    ours = compare.run_metrics(result, int(round(float(result.requests["finished_s"].max()))))
    assert compare.differences(ours, compare.oracle_metrics(DCP_CASES / case)) == dict.fromkeys(compare.METRICS, "")
