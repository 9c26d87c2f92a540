"""kvsim on Qwen3-Next-80B-A3B before Hopper (-tp 4 on an A100-80GB, blocks of 272 tokens) against vLLM 0.33's own
scheduler and KV cache manager given the same pool (``tools/vllm_oracle/gdn_driver.py --no-checkpoint``), step for
step, synchronous and under vLLM's default async scheduling: there vLLM runs the gated DeltaNet prefill with
Triton/FLA, which exports no prefill checkpoint (``num_prefill_checkpoint_blocks`` 0), so with prefix caching on
(``mamba_cache_mode='align'``) its scheduler ends every prompt's chunk at its last cacheable boundary and never
reserves a checkpoint block, as for Mamba-1 (``tests/sim/test_sim_mamba1_parity.py``); the block size gets no
alignment beyond the kernel block's. The comparison is `mamba_compare.py`'s."""

import pytest

from sim.kernel import mamba_run
from tests.sim.mamba_oracle import (
    assert_decisions_are_vllms,
    assert_every_step_is_vllms,
    differences,
    vllms_metrics,
)
from tests.sim.mamba_oracle import run as run_case
from tests.sim.vllm_oracle import ROOT, cases

DATA = ROOT / "tests" / "sim" / "data" / "vllm_oracle_gdn_nockpt"
CASES = cases(DATA)
RUNS = [(case, asynchronous) for case in CASES for asynchronous in (False, True)]


def run(case: str, *, step_by_step: bool, asynchronous: bool = False):
    return run_case(DATA / case, step_by_step=step_by_step, asynchronous=asynchronous, model="qwen3-next-80b-a3b",
                    gpu="a100-80gb", tensor_parallel=4)


def test_the_cases_cover_both_modes_shared_and_long_prefixes_and_small_budgets():
    assert set(CASES) == {"gdn_nockpt_align_contended", "gdn_nockpt_align_shared_prefix",
                          "gdn_nockpt_align_long_prefix", "gdn_nockpt_align_small_budget",
                          "gdn_nockpt_align_long_prefix_8192", "gdn_nockpt_none_contended",
                          "gdn_nockpt_align_shared_prefix_dense", "gdn_nockpt_align_long_prefix_preempt_finished"}
    assert set(cases(DATA / "async")) == set(CASES)


@pytest.mark.parametrize(("case", "asynchronous"), RUNS)
def test_every_step_is_vllms(case, asynchronous):
    assert_every_step_is_vllms(run(case, step_by_step=True, asynchronous=asynchronous), DATA / case,
                               asynchronous=asynchronous)


@pytest.mark.parametrize(("case", "asynchronous"), RUNS)
def test_the_fast_forward_makes_the_same_decisions(case, asynchronous):
    assert_decisions_are_vllms(run(case, step_by_step=False, asynchronous=asynchronous), DATA / case,
                               asynchronous=asynchronous)
    assert vllms_metrics(DATA / case, asynchronous=asynchronous)["preemptions"] > 0


@pytest.mark.parametrize("case", ["gdn_nockpt_align_contended", "gdn_nockpt_align_long_prefix_8192"])
def test_hoppers_checkpoint_blocks_would_not_be_vllms(case, monkeypatch):
    """The cases tell Triton/FLA's GDN prefill from FlashInfer's: with a checkpoint block per prefill (what the
    layer exports on Hopper) the same pool schedules differently from vLLM's run on an A100."""
    monkeypatch.setattr(mamba_run, "_exports_checkpoints", lambda config, model: config.prefix_caching)
    steps, _ = differences(run(case, step_by_step=True), DATA / case)
    assert any(steps.values())
