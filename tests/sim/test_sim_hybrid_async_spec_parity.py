"""``--async-scheduling`` with ``--speculative-config`` on hybrid recurrent-state models against vLLM 0.33's own
``AsyncScheduler`` with drafts, case by case.

The references are the synchronous speculative cases' async runs, in each data folder's ``async`` subfolder
(``tools/vllm_oracle/mamba_driver.py --out tests/sim/data/vllm_oracle_mamba_spec --async-scheduling`` and
``gdn_driver.py --spec``, ``--mtp``, ``--mtp-align`` with ``--async-scheduling``): vLLM's ``AsyncScheduler`` given
the hybrid pool (Nemotron-H-8B's six Mamba-2 groups with ngram drafts; Qwen3-Next's three gated DeltaNet groups with
ngram drafts or its MTP drafter), prefix caching off (``mamba_cache_mode='none'``: 1 + k state blocks a request) and
on (``'align'``: the running state and k speculative blocks moved along the Mamba table), driven as
``EngineCore.step_with_batch_queue`` drives it (`async_gap.run_async`), each verification accepting the drafts
kvsim's seeded draw accepts. Every engine step's running and waiting requests, prefill tokens and blocks in use
(``--step-by-step``, audited after every step), every metric of ``compare.py`` and vLLM's spec decoding counters
must be equal, stepping and fast-forwarding; and each rule kvsim ports for it must matter: without it some case
differs.
"""

import json

import pandas as pd
import pytest

from allocators.base import NO_COPIES
from allocators.hybrid import HybridPagedAllocator
from sim.kernel import spec_decode
from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from sim.kernel.sequence_group import RUNNING
from tests.sim.mamba_oracle import (
    assert_decisions_are_vllms,
    assert_every_step_is_vllms,
    assert_spec_counters_are_vllms,
    differences,
    mamba,
)
from tests.sim.mamba_oracle import run as run_case
from tests.sim.vllm_oracle import ROOT, cases
from workloads import workload_from_frame

DATA = ROOT / "tests" / "sim" / "data"
QWEN3_NEXT = dict(model="qwen3-next-80b-a3b", gpu="h200", tensor_parallel=2)
FOLDERS = {"vllm_oracle_mamba_spec": {}, "vllm_oracle_gdn_spec": QWEN3_NEXT, "vllm_oracle_gdn_mtp": QWEN3_NEXT,
           "vllm_oracle_gdn_mtp_align": QWEN3_NEXT}
"""Data folder -> kvsim's model for its cases (Nemotron-H-8B by default)."""
RUNS = [(folder, case) for folder in FOLDERS for case in cases(DATA / folder / "async")]


def run(folder: str, case: str, *, step_by_step: bool):
    return run_case(DATA / folder / case, step_by_step=step_by_step, asynchronous=True,
                    debug_invariants=int(step_by_step), **FOLDERS[folder])


def test_the_references_cover_both_modes_both_drafters_and_preemptions():
    """Mamba-2 with ngram drafts and GDN with ngram or MTP drafts, prefix caching off and on; contended pools
    (every case preempts), small budgets with a long-prefill threshold, shared prefixes, retention intervals."""
    assert set(RUNS) == {
        ("vllm_oracle_mamba_spec", c) for c in (
            "mamba_none_contended_spec_2", "mamba_none_offline_burst_spec_3", "mamba_none_small_budget_spec_4",
            "mamba_align_contended_spec_2", "mamba_align_shared_prefix_spec_2", "mamba_align_small_budget_spec_4",
            "mamba_align_padded_admission_spec_3")} | {
        ("vllm_oracle_gdn_spec", c) for c in (
            "gdn_none_contended_spec_2", "gdn_align_contended_spec_2", "gdn_align_shared_prefix_spec_3",
            "gdn_align_padded_admission_spec_3", "gdn_align_long_prefix_spec_5_retention_576")} | {
        ("vllm_oracle_gdn_mtp", c) for c in (
            "gdn_none_contended_mtp_2", "gdn_none_small_budget_mtp_3", "gdn_none_shared_prefix_mtp_2")} | {
        ("vllm_oracle_gdn_mtp_align", c) for c in (
            "gdn_align_contended_mtp_2", "gdn_align_small_budget_mtp_3", "gdn_align_shared_prefix_mtp_3",
            "gdn_align_shared_prefix_retention_1152_mtp_2", "gdn_align_contended_dense_mtp_3",
            "gdn_align_block_prefix_mtp_2")}
    for folder, case in RUNS:
        preempts = mamba.compare.oracle_metrics(DATA / folder / "async" / case)["preemptions"] > 0
        assert preempts == (case != "gdn_align_long_prefix_spec_5_retention_576"), case


@pytest.mark.parametrize(("folder", "case"), RUNS)
def test_every_step_is_async_vllms(folder, case):
    slow = run(folder, case, step_by_step=True)
    assert_every_step_is_vllms(slow, DATA / folder / case, asynchronous=True)
    assert_spec_counters_are_vllms(slow, DATA / folder / case, asynchronous=True)


@pytest.mark.parametrize(("folder", "case"), RUNS)
def test_the_fast_forward_makes_async_vllms_decisions(folder, case):
    fast = run(folder, case, step_by_step=False)
    assert_decisions_are_vllms(fast, DATA / folder / case, asynchronous=True)
    assert_spec_counters_are_vllms(fast, DATA / folder / case, asynchronous=True)


def _running_only(self, sched):
    return {seq_id: accepted for index, accepted in self.accepted_before.items()
            if (group := sched.live.get(index)) is not None and group.state == RUNNING for seq_id in group.seq_ids}


_grow_with_drafts = HybridPagedAllocator.grow_with_drafts


def _no_drafts_alone(self, seq_id, num_tokens, drafts, *, chunk=False):
    return NO_COPIES if num_tokens == 0 else _grow_with_drafts(self, seq_id, num_tokens, drafts, chunk=chunk)


RULES = [  # (what is dropped, the function replaced, the case that then differs)
    ("a verification's accepted drafts count as processed once its output is",
     (spec_decode.SpecDecode, "landed", lambda self, sched: {}), ("vllm_oracle_mamba_spec",
                                                                  "mamba_align_small_budget_spec_4")),
    ("a held finished request's too", (spec_decode.SpecDecode, "landed", _running_only),
     ("vllm_oracle_gdn_spec", "gdn_align_shared_prefix_spec_3")),
    ("a finished request scheduled once more frees and places its states for its drafts",
     (HybridPagedAllocator, "grow_with_drafts", _no_drafts_alone), ("vllm_oracle_gdn_spec",
                                                                    "gdn_align_contended_spec_2")),
]


@pytest.mark.parametrize("rule, patch, run_of", RULES, ids=[r[0] for r in RULES])
def test_each_rule_matters(rule, patch, run_of, monkeypatch):
    """Dropping one ported rule makes a case differ from vLLM's: every rule is needed."""
    folder, case = run_of

    def differs() -> bool:
        steps, metrics = differences(run(folder, case, step_by_step=True), DATA / folder / case, asynchronous=True)
        return any(steps.values()) or any(metrics.values())

    assert not differs()
    monkeypatch.setattr(*patch)
    assert differs(), rule


def _drafting(model: str, method: str = "ngram", **settings) -> SimConfig:
    return SimConfig(model=model, async_scheduling=True, step_time=1.0, spec_acceptance_rate=0.5,
                     speculative_config=json.dumps({"method": method, "num_speculative_tokens": 2}), **settings)


FRAME = pd.DataFrame(dict(arrival_time_s=[0.0, 0.0], prompt_tokens=[64, 900], output_tokens=[8, 20]))


@pytest.mark.parametrize("config", [_drafting("nemotron-h-8b", prefix_caching=False), _drafting("nemotron-h-8b"),
                                    _drafting("qwen3-next-80b-a3b", "mtp", gpu="h200", tensor_parallel=2)],
                         ids=["mamba2-none", "mamba2-align", "gdn-mtp-align"])
def test_drafts_on_a_recurrent_state_model_run_under_async_scheduling(config):
    """No longer refused where checked (above): every request finishes, its drafts verified."""
    result = run_simulation(config, workload_from_frame(FRAME))
    assert not result.requests["rejected"].any() and result.summary["spec_decoding"]["num_drafts"] > 0


def test_what_is_refused_synchronously_stays_refused_under_async_scheduling():
    """Drafts on Jamba's Mamba-1 layers are refused with or without async scheduling, with the same reason."""
    with pytest.raises(ValueError, match="Mamba-1"):
        run_simulation(_drafting("jamba-1.5-mini", tensor_parallel=2, gpu="h100-80gb"), workload_from_frame(FRAME))
