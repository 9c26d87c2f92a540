"""kvsim on Qwen3-Next-80B-A3B (-tp 2 on an H200) with prefix caching off (``mamba_cache_mode='none'``, blocks of
544 tokens) and on (``'align'``, 576-token blocks on FlashInfer's 64-token checkpoint grid) against vLLM 0.33's own
scheduler and KV cache manager given the same pool, synchronous and under vLLM's default async scheduling: three gated DeltaNet groups before one attention group, as
vLLM's planner orders them (``tools/vllm_oracle/gdn_driver.py``), step for step (every engine step's running and
waiting requests, prefill tokens, decoding requests and used blocks) and `compare.py`'s run-wide and per-request
metrics, exactly; the fast-forward makes the same decisions. Also with requests sampled n > 1 times and under
positive ``--prefix-cache-retention-interval``s. The comparison is `mamba_compare.py`'s."""

import pytest

from tests.sim.mamba_oracle import assert_decisions_are_vllms, assert_every_step_is_vllms, vllms_metrics
from tests.sim.mamba_oracle import run as run_case
from tests.sim.vllm_oracle import ROOT, cases

DATA = ROOT / "tests" / "sim" / "data" / "vllm_oracle_gdn"
CASES = cases(DATA)


RUNS = [(case, asynchronous) for case in CASES for asynchronous in (False, True)]


def run(case: str, *, step_by_step: bool, asynchronous: bool = False):
    return run_case(DATA / case, step_by_step=step_by_step, asynchronous=asynchronous, model="qwen3-next-80b-a3b",
                    gpu="h200", tensor_parallel=2)


def test_the_cases_cover_both_modes_contention_chunks_and_shared_prefixes():
    """Both cache modes, parallel sampling (siblings fanned out as vLLM v1 does), and positive retention
    intervals of 2 and 4 blocks (every chunk able to export its checkpoint reserves a block for it, and each
    interval's last state is cached), and dense retention (the same blocks, every full state cached)."""
    assert set(CASES) == {"gdn_none_contended", "gdn_align_contended", "gdn_none_small_budget",
                          "gdn_align_small_budget", "gdn_align_shared_prefix", "gdn_align_parallel_sampling_shared",
                          "gdn_align_contended_retention_1152", "gdn_align_shared_prefix_retention_1152",
                          "gdn_align_shared_prefix_retention_2304",
                          "gdn_align_parallel_sampling_shared_retention_1152", "gdn_align_contended_dense",
                          "gdn_align_shared_prefix_dense"}
    assert set(cases(DATA / "async")) == set(CASES)


@pytest.mark.parametrize(("case", "asynchronous"), RUNS)
def test_every_step_is_vllms(case, asynchronous):
    assert_every_step_is_vllms(run(case, step_by_step=True, asynchronous=asynchronous), DATA / case,
                               asynchronous=asynchronous)
    assert vllms_metrics(DATA / case, asynchronous=asynchronous)["preemptions"] > 0


@pytest.mark.parametrize(("case", "asynchronous"), RUNS)
def test_the_fast_forward_makes_the_same_decisions(case, asynchronous):
    assert_decisions_are_vllms(run(case, step_by_step=False, asynchronous=asynchronous), DATA / case,
                               asynchronous=asynchronous)
