"""kvsim on Qwen3-Next-80B-A3B (-tp 2 on an H200: FlashInfer's gated DeltaNet prefill, 576-token blocks on its
64-token checkpoint grid) with vLLM's ngram speculative decoding and prefix caching on (``mamba_cache_mode=
'align'``: each request's running state and k speculative blocks at the end of its Mamba tables, moved along them,
`allocators.mamba_align.place_blocks`) against vLLM 0.33's own scheduler given the same pool (``tools/vllm_oracle/
gdn_driver.py --spec``), and with prefix caching off (``gdn_none_contended_spec_2``: 1 + k state blocks a request
in each group): every engine step's running and waiting requests, prefill tokens and used blocks, `compare.py`'s
metrics and vLLM's spec decoding counters, exactly; the fast-forward makes the same decisions, audited at every
step. (Their async runs: ``tests/sim/test_sim_hybrid_async_spec_parity.py``.)"""

import pytest

from tests.sim.mamba_oracle import (
    assert_decisions_are_vllms,
    assert_every_step_is_vllms,
    assert_spec_counters_are_vllms,
    mamba,
)
from tests.sim.mamba_oracle import run as run_case
from tests.sim.vllm_oracle import ROOT, cases

DATA = ROOT / "tests" / "sim" / "data" / "vllm_oracle_gdn_spec"
CASES = cases(DATA)


def run(case: str, *, step_by_step: bool):
    return run_case(DATA / case, step_by_step=step_by_step, model="qwen3-next-80b-a3b", gpu="h200",
                    tensor_parallel=2, debug_invariants=1)


def test_the_cases_cover_contention_and_shared_prefixes_with_preemptions():
    """And long shared prefixes hit by requests run one at a time (no preemption there), whose five drafts a step
    often cross a block boundary mid-step: the state left behind there is cached as vLLM caches it."""
    one_at_a_time = "gdn_align_long_prefix_spec_5_retention_576"
    assert set(CASES) == {"gdn_none_contended_spec_2", "gdn_align_contended_spec_2", "gdn_align_shared_prefix_spec_3",
                          "gdn_align_padded_admission_spec_3", one_at_a_time}
    for case in CASES:
        assert (mamba.compare.oracle_metrics(DATA / case)["preemptions"] > 0) == (case != one_at_a_time), case


@pytest.mark.parametrize("case", CASES)
def test_every_step_is_vllms(case):
    slow = run(case, step_by_step=True)
    assert_every_step_is_vllms(slow, DATA / case)
    assert_spec_counters_are_vllms(slow, DATA / case)


@pytest.mark.parametrize("case", CASES)
def test_the_fast_forward_makes_the_same_decisions(case):
    assert_decisions_are_vllms(run(case, step_by_step=False), DATA / case)
