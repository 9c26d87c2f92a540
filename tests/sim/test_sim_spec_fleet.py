"""Speculative decoding on several replicas (``--replicas``, ``--data-parallel-size``): each replica is an engine
drafting for its own requests, as vLLM's data-parallel engine cores each run their own drafter and rejection
sampler. With a router that reads no state, a replica decides exactly as one engine given only its requests; the
fleet's spec decoding counters are its replicas' summed; worker processes give the same files."""

import json

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation, write_result
from tests.sim.test_sim_fleet import poisson

NGRAM = json.dumps({"method": "ngram", "num_speculative_tokens": 3})
EAGLE = json.dumps({"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3-Instruct-8B", "num_speculative_tokens": 2})
GROUPS = np.where(np.arange(90) % 3 == 0, np.arange(90) % 4, -1)
WORKLOAD = poisson(90, 20.0, prompt=(300, 600), prefix_group=GROUPS, prefix_len=np.where(GROUPS >= 0, 256, 0))
"""Every third request shares one of four 256-token prefixes."""


def _config(speculative_config: str, rate: float, **options) -> SimConfig:
    """Contended replicas of Llama-3-8B (preemptions, prefix hits with EAGLE's lookahead hashes), audited."""
    return SimConfig(model="llama-3-8b", gpu="a100-40gb", kv_tokens=3000, max_num_batched_tokens=256,
                     prefix_caching=True, speculative_config=speculative_config, spec_acceptance_rate=rate,
                     debug_invariants=1, **options)


@pytest.mark.parametrize("speculative_config", [NGRAM, EAGLE], ids=["ngram", "eagle"])
def test_each_replica_decides_as_one_engine_given_its_requests(speculative_config):
    """Round-robin over two replicas: replica r's requests finish when, and preempt as often as, one engine's
    run of them alone. Every draft is accepted (rate 1): a request's draws follow its index in the trace, which
    differs in a run of half the rows."""
    fleet = run_simulation(_config(speculative_config, 1.0, replicas=2, router="round-robin"), WORKLOAD)
    assert fleet.summary["preemptions"] > 0
    counters = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
    for replica in (0, 1):
        mine = (fleet.requests["replica"] == replica).to_numpy()
        alone = run_simulation(_config(speculative_config, 1.0), WORKLOAD.select(np.flatnonzero(mine)))
        for column in ("first_token_s", "finished_s", "preemptions"):
            assert np.array_equal(fleet.requests.loc[mine, column].to_numpy(), alone.requests[column].to_numpy()), column
        assert fleet.summary["per_replica"][replica]["spec_decoding"] == alone.summary["spec_decoding"]
    total = fleet.summary["spec_decoding"]
    for key in counters:
        assert total[key] == sum(s["spec_decoding"][key] for s in fleet.summary["per_replica"]) > 0, key
    assert total["mean_acceptance_length"] == 1 + total["num_accepted_tokens"] / total["num_drafts"]
    assert total["method"] == json.loads(speculative_config)["method"]


def test_data_parallel_ranks_of_a_mixture_of_experts_draft_in_lock_step():
    """``--data-parallel-size 2`` on a mixture of experts steps its ranks together (`sim.kernel.lockstep`); with
    drafts every request still finishes, audited, and both ranks' counters add up."""
    config = SimConfig(model="deepseek-v3", gpu="h200", kv_tokens=6000, max_num_batched_tokens=512,
                       data_parallel_size=2, router="round-robin", speculative_config=NGRAM,
                       spec_acceptance_rate=0.6, debug_invariants=1)
    result = run_simulation(config, WORKLOAD)
    assert result.summary["completed"] == len(WORKLOAD)
    assert result.summary["lockstep_steps"] > 0
    ranks = [s["spec_decoding"]["num_accepted_tokens"] for s in result.summary["per_replica"]]
    assert min(ranks) > 0 and result.summary["spec_decoding"]["num_accepted_tokens"] == sum(ranks)


def test_worker_processes_give_the_same_files(tmp_path):
    """A state-free router's replicas in worker processes (`sim.kernel.fleet_parallel`): the same files as one
    process, the per-replica spec summaries carried back."""
    config = SimConfig(kv_tokens=5000, prefix_caching=True, memory_snapshots=3, replicas=3, router="random",
                       speculative_config=NGRAM, spec_acceptance_rate=0.5)
    files = []
    for workers in (1, 2):
        result = run_simulation(config, WORKLOAD, workers=workers)
        result.summary.pop("wall_time_s")
        files.append({p.name: p.read_bytes() for p in write_result(result, tmp_path / str(workers), "csv")})
    assert files[0] == files[1]
    assert json.loads(files[0]["summary.json"])["spec_decoding"]["num_drafts"] > 0
