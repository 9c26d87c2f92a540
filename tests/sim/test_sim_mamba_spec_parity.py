"""kvsim on Nemotron-H-8B with vLLM's ngram speculative decoding, prefix caching off (``mamba_cache_mode='none'``)
and on (``'align'``, the speculative state blocks moved along the Mamba table), against vLLM 0.33's own scheduler
and KV cache manager given the same pool (six Mamba groups whose ``MambaSpec`` has ``num_speculative_blocks =
num_speculative_tokens``, then one attention group, blocks of 1,040 tokens: ``tools/vllm_oracle/mamba_driver.py``'s
``*_spec_K`` cases), the drafts accepted as kvsim draws them:
every engine step's running and waiting requests, prefill tokens and used blocks, `compare.py`'s run-wide and
per-request metrics and vLLM's spec decoding counters, exactly (audited after every step); the fast-forward makes
the same decisions; with prefix caching on and ngram drafts, ``kvsim capacity``'s figure is the number of requests
vLLM's scheduler runs at once on that pool (``mamba_align_capacity_spec_2``); a resumed request with all but its
last token cached is admitted padded to 1 + k tokens, its placeholder drafts given slots and state columns
(``mamba_align_padded_admission_spec_3``). (Their
async runs, vLLM's ``AsyncScheduler`` with drafts: ``tests/sim/test_sim_hybrid_async_spec_parity.py``.)"""

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from sim.cli import main
from tests.sim.mamba_oracle import (
    assert_decisions_are_vllms,
    assert_every_step_is_vllms,
    assert_spec_counters_are_vllms,
    mamba,
    run,
)
from tests.sim.vllm_oracle import ROOT, cases

DATA = ROOT / "tests" / "sim" / "data" / "vllm_oracle_mamba_spec"
CASES = cases(DATA)
K = {"mamba_none_contended_spec_2": 2, "mamba_none_offline_burst_spec_3": 3, "mamba_none_small_budget_spec_4": 4,
     "mamba_align_contended_spec_2": 2, "mamba_align_shared_prefix_spec_2": 2, "mamba_align_small_budget_spec_4": 4,
     "mamba_align_capacity_spec_2": 2, "mamba_align_padded_admission_spec_3": 3}


def test_the_cases_cover_two_to_four_drafts_with_preemptions():
    assert set(CASES) == set(K)
    for case in CASES:
        assert mamba.compare.oracle_metrics(DATA / case)["preemptions"] > 0, case


@pytest.mark.parametrize("case", CASES)
def test_every_step_is_vllms(case):
    slow = run(DATA / case, step_by_step=True, debug_invariants=1)  # the hybrid audit after every step
    assert_every_step_is_vllms(slow, DATA / case)
    assert_spec_counters_are_vllms(slow, DATA / case)


@pytest.mark.parametrize("case", [c for c in CASES if "_none_" in c])
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


@pytest.mark.parametrize("case", [c for c in CASES if "_align_" in c])
def test_align_mode_requests_hold_at_least_one_plus_k_state_blocks_per_mamba_group(case):
    """With prefix caching on a running request holds its running state block and k speculative ones in each
    Mamba group, and at times the state it was copied from and a checkpoint: 1 + k to 3 + k (kvsim's
    ``mamba_used_blocks``, its steps' used blocks being vLLM's above)."""
    steps = mamba.run(DATA / case, step_by_step=True).steps
    steps = steps[(steps["num_steps"] > 0) & (steps["running"] > 0)]
    per_request = steps["mamba_used_blocks"] / steps["running"] / 6
    assert per_request.min() == 1 + K[case] and per_request.max() <= 3 + K[case]


def test_vllms_pool_holds_capacitys_requests_at_rest():
    """``kvsim capacity`` with prefix caching on and ngram drafts (k = 2) on the H100's pool of 3,506 blocks: 26
    blocks a request of 7,000 + 1,000 tokens (8 attention, 1 + 2 state blocks in each of 6 Mamba groups), 134 at
    once; vLLM's scheduler given that pool and 160 such requests at once (``mamba_align_capacity_spec_2``) runs
    134, never more, whenever every running request holds its 26 blocks and others wait."""
    result = CliRunner().invoke(main, ["capacity", "--model", "nemotron-h-8b", "--gpu", "h100-80gb", "--prompt-len",
                                       "7000", "--output-len", "1000", "--speculative-config",
                                       '{"method": "ngram", "num_speculative_tokens": 2}', "--json"])
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    settings = json.loads((DATA / "mamba_align_capacity_spec_2" / "settings.json").read_text())
    assert r["enable_prefix_caching"] and r["kv_capacity_blocks"] == settings["num_blocks"] == 3506
    assert (r["blocks_per_request"], r["max_concurrent_requests"]) == (26, 134)
    theirs = pd.read_csv(DATA / "mamba_align_capacity_spec_2" / "steps.csv.gz")
    at_rest = theirs[(theirs["used_blocks"] == 26 * theirs["running"]) & (theirs["waiting"] > 0)]
    assert at_rest["running"].max() == 134 and (at_rest["running"] == 134).sum() > 100
