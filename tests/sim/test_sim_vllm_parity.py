"""kvsim's continuous scheduler + paged allocator against vLLM v1's real scheduler, case by case.

The reference outputs in ``tests/sim/data/vllm_oracle`` were written by vLLM 0.33.0's own ``Scheduler`` driven step by
step (``tools/vllm_oracle``); replaying them needs only kvsim. Every metric must be equal, not close: a
difference means kvsim decided something vLLM does not (``docs/vllm-v1.md``).
"""

import json

import numpy as np
import pandas as pd
import pytest

from sim.kernel.runner import run_config
from tests.sim.vllm_oracle import DATA, cases, compare

CASES = cases(DATA)



def test_the_harness_covers_the_required_cases():
    """Guards the vLLM parity case list (contention, caching on/off, long prompts at two budgets, ...)."""
    assert set(CASES) >= {"contended", "ample", "shared_prefix_cached", "shared_prefix_uncached",
                          "long_prompts_2048", "long_prompts_8192", "max_num_seqs", "block_size_32",
                          "offline_burst", "long_prefill_threshold", "reserve_full_isl_off", "priority",
                          "sessions_open_loop", "offload_sessions", "hash_units", "hash_units_40",
                          "offload_hash_units",
                          "offload_shared_prefix", "offload_arc_sessions", "offload_arc_shared_prefix",
                          "offload_arc_small_gpu", "offload_generated_blocks", "offload_whole_prompts",
                          "parallel_sampling", "parallel_sampling_priority",
                          "max_model_len_capped", "hybrid_long_prompts", "hybrid_contended", "hybrid_shared_prefix",
                          "hybrid_sessions", "hybrid_reserve_full_isl_off", "hybrid_long_prefill_threshold",
                          "hybrid_small_budget_threshold", "hybrid_priority", "hybrid_priority_contended",
                          "hybrid_long_prompts_2048", "hybrid_long_prompts_8192", "hybrid_block_size_32",
                          "hybrid_block_size_256", "hybrid_offline_burst", "hybrid_max_num_seqs",
                          "hybrid_shared_prefix_uncached", "hybrid_max_model_len_capped",
                          "hybrid_parallel_sampling",
                          # vLLM 0.33's default sparse window retention above; dense and periodic here
                          "hybrid_contended_dense", "hybrid_shared_prefix_dense", "hybrid_sessions_dense",
                          "hybrid_retention_interval_256",
                          # vLLM's hybrid manager on chunked-local attention (Llama 4's)
                          "chunked_long_prompts", "chunked_contended", "chunked_shared_prefix", "chunked_sessions",
                          "chunked_priority_contended",
                          # found by tools/vllm_oracle/fuzz.py
                          "offload_long_prefill_threshold", "offload_whole_prompts_few", "threshold_16_contended",
                          "offload_parallel_sampling_threshold", "offload_sessions_watermark",
                          # for its async reference (tests/sim/test_sim_async_scheduling.py)
                          "offload_full_pool_decoders"}


@pytest.mark.parametrize("case", CASES)
def test_kvsim_makes_vllms_decisions(case):
    """Total steps, running requests, preemptions, prefill tokens and every request's first-token and finish
    step equal vLLM's exactly."""
    ours, theirs = compare.kvsim_metrics(DATA / case), compare.oracle_metrics(DATA / case)
    assert compare.differences(ours, theirs) == dict.fromkeys(compare.METRICS, "")


@pytest.mark.parametrize("case", [c for c in CASES if "offload" not in c])
def test_vllms_prefix_cache_counters(case):
    """vLLM's ``prefix_cache_queries`` and hits, as fixed by the reference outputs: vLLM 0.33 records a lookup when
    it admits a request, apart for a request preempted before, so each request's one fresh admission looks up
    its prompt (every child's, when sampled ``n`` times) and the hits of all admissions are the requests' hits
    summed; nothing is recorded without prefix caching. (A host tier's hits are another counter, its
    connector's.)"""
    settings = json.loads((DATA / case / "settings.json").read_text())
    summary = run_config(compare.kvsim_config(settings, DATA / case / "trace.csv")).summary
    trace, theirs = pd.read_csv(DATA / case / "trace.csv"), pd.read_csv(DATA / case / "requests.csv")
    prompts = int((trace["prompt_tokens"] * trace.get("n", 1)).sum())
    caching = settings["enable_prefix_caching"]
    assert summary["prefix_cache_queries"] == (prompts if caching else 0)
    assert summary["prefix_cache_hits"] + summary["prefix_cache_preempted_hits"] == theirs["cached_tokens"].sum()
    assert caching or summary["prefix_cache_preempted_queries"] == 0


@pytest.mark.parametrize("case", CASES)
def test_fast_forward_equals_step_by_step(case):
    """The decode fast-forward stays exact under vLLM's slot accounting, deferred decoders and cache hits."""
    fast = compare.kvsim_metrics(DATA / case)
    slow = compare.kvsim_metrics(DATA / case, step_by_step=True)
    for metric in compare.METRICS:
        assert np.array_equal(fast[metric], slow[metric]), metric
