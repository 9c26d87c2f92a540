"""kvsim on Nemotron-H-8B with prefix caching off (vLLM's ``mamba_cache_mode='none'``) and on (``'align'``, the
default: block-aligned chunks, state blocks per boundary, reachable states cached; also under a positive
or dense (None) ``--prefix-cache-retention-interval``, and with requests sampled n > 1 times; prefix caching
off with a positive interval, which vLLM ignores there) against vLLM 0.33's own
scheduler and KV cache manager given the same pool (six Mamba groups, then one attention group, blocks of 1,040
tokens: ``tools/vllm_oracle/mamba_driver.py``), step for step: every engine step's running and waiting requests,
prefill tokens, decoding requests and used blocks, and `compare.py`'s run-wide and per-request metrics, exactly,
synchronous and under vLLM's default async scheduling; the fast-forward makes the same decisions."""

import pytest

from tests.sim.mamba_oracle import (
    assert_decisions_are_vllms,
    assert_every_step_is_vllms,
    mamba,
    vllms_metrics,
)
from tests.sim.vllm_oracle import cases

CASES = cases(mamba.DATA)
RUNS = [(case, asynchronous) for case in CASES for asynchronous in (False, True)]


def test_the_cases_cover_contention_a_burst_and_chunked_prompts_in_both_engine_loops():
    """Both cache modes; in align mode also prefixes shared across requests over several blocks, identical prompts
    in one step (a hit on a state cached in the same step is deferred), resumed requests hitting their own,
    parallel sampling (siblings hitting the state their first child cached), and positive and dense
    ``prefix_cache_retention_interval``s (`tests/allocators/test_mamba_retention.py`)."""
    assert set(CASES) >= {f"mamba_{mode}_{case}" for mode in ("none", "align")
                          for case in ("contended", "offline_burst", "small_budget")}
    assert {"mamba_align_shared_prefix", "mamba_align_long_prefix"} <= set(CASES)
    # requests sampled n = 2..4 times, fanned out into child requests as vLLM v1's engine does, in both modes
    assert {"mamba_none_parallel_sampling", "mamba_align_parallel_sampling",
            "mamba_align_parallel_sampling_shared"} <= set(CASES)
    # chunks over two blocks (a checkpoint block mid-prefill), and positive retention intervals of 2 and 4 blocks
    assert {"mamba_align_contended_8192", "mamba_align_long_prefix_8192", "mamba_align_contended_retention_2080",
            "mamba_align_shared_prefix_retention_2080", "mamba_align_shared_prefix_retention_4160",
            "mamba_align_long_prefix_retention_2080", "mamba_align_long_prefix_8192_retention_2080",
            "mamba_align_long_prefix_8192_retention_4160",
            "mamba_align_parallel_sampling_shared_retention_2080"} <= set(CASES)
    # dense retention (None: every full state cached, every chunk able to export its checkpoint takes a block), and
    # prefix caching off with a positive interval vLLM accepts (a multiple of lcm(1,040, 16,384)) and ignores
    assert {"mamba_align_contended_dense", "mamba_align_shared_prefix_dense", "mamba_align_long_prefix_8192_dense",
            "mamba_none_contended_retention_1064960"} <= set(CASES)
    assert set(cases(mamba.DATA / "async")) == set(CASES)


@pytest.mark.parametrize(("case", "asynchronous"), RUNS)
def test_every_step_is_vllms(case, asynchronous):
    assert_every_step_is_vllms(mamba.run(mamba.DATA / case, step_by_step=True, asynchronous=asynchronous),
                               mamba.DATA / case, asynchronous=asynchronous)
    assert vllms_metrics(mamba.DATA / case, asynchronous=asynchronous)["preemptions"] > 0


@pytest.mark.parametrize(("case", "asynchronous"), RUNS)
def test_the_fast_forward_makes_the_same_decisions(case, asynchronous):
    assert_decisions_are_vllms(mamba.run(mamba.DATA / case, asynchronous=asynchronous), mamba.DATA / case,
                               asynchronous=asynchronous)
