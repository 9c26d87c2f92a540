"""kvsim on Jamba-1.5-Mini (seven Mamba-1 groups, then one attention group, blocks of 80 tokens) against vLLM 0.33's
own scheduler and KV cache manager given the same pool (``tools/vllm_oracle/mamba1_driver.py``), step for
step, synchronous and under vLLM's default async scheduling: with prefix caching on (``mamba_cache_mode='align'``) a
Mamba-1 layer exports no prefill checkpoint, so vLLM ends every prompt's chunk at its last cacheable boundary and
never reserves a checkpoint block; the comparison is `mamba_compare.py`'s, on ``jamba-1.5-mini``."""

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

DATA = ROOT / "tests" / "sim" / "data" / "vllm_oracle_mamba1"
CASES = cases(DATA)
RUNS = [(case, asynchronous) for case in CASES for asynchronous in (False, True)]


def run(case: str, *, step_by_step: bool, asynchronous: bool = False):
    return run_case(DATA / case, step_by_step=step_by_step, asynchronous=asynchronous, model="jamba-1.5-mini")


def test_the_cases_cover_both_modes_shared_prefixes_long_chunks_and_retention():
    assert set(CASES) == {"m1_align_contended", "m1_align_shared_prefix", "m1_align_long_prefix",
                          "m1_align_small_budget", "m1_align_long_prefix_8192",
                          "m1_align_shared_prefix_retention_160", "m1_none_contended",
                          "m1_align_shared_prefix_dense"}
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


@pytest.mark.parametrize("case", ["m1_align_contended", "m1_align_long_prefix_8192"])
def test_mamba2s_checkpoint_blocks_would_not_be_vllms(case, monkeypatch):
    """The cases tell Mamba-1 from Mamba-2: with a checkpoint block per prefill (what a Mamba-2 layer exports) the
    same pool schedules differently from vLLM's Mamba-1 run."""
    monkeypatch.setattr(mamba_run, "_exports_checkpoints", lambda config, model: config.prefix_caching)
    steps, _ = differences(run(case, step_by_step=True), DATA / case)
    assert any(steps.values())
