"""kvsim on Nemotron-H-8B with vLLM's ngram speculative decoding and prefix caching off (``mamba_cache_mode=
'none'``) against vLLM 0.33's own scheduler and KV cache manager given the same pool (six Mamba groups whose
``MambaSpec`` has ``num_speculative_blocks = num_speculative_tokens``, then one attention group, blocks of 1,040
tokens: ``tools/vllm_oracle/mamba_driver.py``'s ``*_spec_K`` cases), the drafts accepted as kvsim draws them:
every engine step's running and waiting requests, prefill tokens and used blocks, `compare.py`'s run-wide and
per-request metrics and vLLM's spec decoding counters, exactly; the fast-forward makes the same decisions. (vLLM's
async engine loop is not driven with drafts by the oracle: synchronous only.)"""

import numpy as np
import pytest

from tests.sim.mamba_oracle import assert_decisions_are_vllms, assert_every_step_is_vllms, mamba
from tests.sim.vllm_oracle import ROOT, cases

DATA = ROOT / "tests" / "sim" / "data" / "vllm_oracle_mamba_spec"
CASES = cases(DATA)
K = {"mamba_none_contended_spec_2": 2, "mamba_none_offline_burst_spec_3": 3, "mamba_none_small_budget_spec_4": 4}


def test_the_cases_cover_two_to_four_drafts_with_preemptions():
    assert set(CASES) == set(K)
    for case in CASES:
        assert mamba.compare.oracle_metrics(DATA / case)["preemptions"] > 0, case


@pytest.mark.parametrize("case", CASES)
def test_every_step_is_vllms(case):
    slow = mamba.run(DATA / case, step_by_step=True)
    assert_every_step_is_vllms(slow, DATA / case)
    assert mamba.spec_differences(slow, DATA / case) == {"num_drafts": "", "num_draft_tokens": "",
                                                         "num_accepted_tokens": ""}


@pytest.mark.parametrize("case", CASES)
def test_each_request_holds_one_plus_k_state_blocks_per_mamba_group(case):
    """The blocks vLLM has in use after every step are those of its requests' attention tokens and drafts plus
    ``6 x (1 + k)`` state blocks each (kvsim's ``mamba_used_blocks``, equal to vLLM's ``used_blocks`` above):
    without the speculative blocks, 6 a request, every step with a request would differ."""
    steps = mamba.run(DATA / case, step_by_step=True).steps
    steps = steps[steps["num_steps"] > 0]
    held = steps["used_blocks"] - steps["full_used_blocks"]
    assert np.array_equal(held, steps["mamba_used_blocks"])
    assert (held % (6 * (1 + K[case])) == 0).all() and (held > 0).any()
    assert np.array_equal(steps["mamba_used_blocks"], steps["running"] * 6 * (1 + K[case]))


@pytest.mark.parametrize("case", CASES)
def test_the_fast_forward_makes_the_same_decisions(case):
    fast = mamba.run(DATA / case)
    slow = mamba.metrics(mamba.run(DATA / case, step_by_step=True))
    for metric in mamba.compare.METRICS:
        assert np.array_equal(mamba.metrics(fast)[metric], slow[metric]), metric
    assert_decisions_are_vllms(fast, DATA / case)
