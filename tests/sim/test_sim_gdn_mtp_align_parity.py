"""kvsim on Qwen3-Next-80B-A3B (-tp 2 on an H200, 576-token blocks on the gated DeltaNet layers' 64-token checkpoint
grid) with its MTP drafter (``--speculative-config '{"method": "mtp", "num_speculative_tokens": K}'``) and prefix
caching on (``mamba_cache_mode='align'``) against vLLM 0.33's own scheduler built for an MTP drafter on the same
pool (``tools/vllm_oracle/gdn_driver.py --mtp-align``): every engine step's running and waiting requests, prefill
tokens and used blocks, `compare.py`'s metrics and vLLM's spec decoding counters, exactly; the fast-forward makes
the same decisions, audited at every step (``tests/sim/test_sim_gdn_mtp_parity.py`` runs them with prefix caching
off's references). Here: what the references cover, and each rule shown to matter.

What one MTP module changes there, each rule shown to matter below: the drafter's K lookahead slots in the
attention group at every allocation but no Mamba state column for them (``num_tokens_main_model``,
``v1/core/single_type_kv_cache_manager.py:1731-1736, 1810-1815``); a prefill chunk with those slots frees the states
the tokens computed before it no longer need (``remove_skipped_blocks``), as any chunk does; and each block hashed
with the token after it (``num_hash_lookahead_tokens`` 1, ``config/vllm.py:677-692``), which clears vLLM's
last-block and Mamba checkpoint drops (``v1/core/sched/scheduler.py:342-345``, ``v1/core/kv_cache_coordinator.py:
129-182``; the driver asserts they are off). (Synchronous only: the oracle drives no drafts through vLLM's async
engine loop.)"""

import dataclasses
import json

import pandas as pd
from click.testing import CliRunner

from sim.cli import main
from tests.sim.mamba_oracle import differences, mamba
from tests.sim.vllm_oracle import ROOT, cases

DATA = ROOT / "tests" / "sim" / "data" / "vllm_oracle_gdn_mtp_align"
CASES = cases(DATA)
QWEN3_NEXT = dict(model="qwen3-next-80b-a3b", gpu="h200", tensor_parallel=2)


def test_the_cases_cover_contention_shared_prefixes_retention_and_the_capacity_pool_with_preemptions_and_hits():
    assert set(CASES) == {"gdn_align_contended_mtp_2", "gdn_align_small_budget_mtp_3", "gdn_align_shared_prefix_mtp_3",
                          "gdn_align_shared_prefix_retention_1152_mtp_2", "gdn_align_contended_dense_mtp_3",
                          "gdn_align_block_prefix_mtp_2", "gdn_align_capacity_mtp_2"}
    for case in CASES:
        settings = json.loads((DATA / case / "settings.json").read_text())
        assert settings["method"] == "mtp" and settings["enable_prefix_caching"], case
        assert mamba.compare.oracle_metrics(DATA / case)["preemptions"] > 0, case
        assert pd.read_csv(DATA / case / "requests.csv")["cached_tokens"].sum() > 0, case


def _preemptions_and_prefill(case: str, **settings) -> tuple[str, str]:
    """kvsim's step-by-step run of ``case`` (its settings updated with ``settings``) against vLLM's: the
    preemption and prefill-token metrics' differences ('' where equal)."""
    from sim.kernel.runner import run_config

    path = DATA / case
    config = mamba.kvsim_config(json.loads((path / "settings.json").read_text()) | settings, path / "trace.csv",
                                step_by_step=True)
    metrics = differences(run_config(dataclasses.replace(config, **QWEN3_NEXT)), path)[1]
    return metrics["preemptions"], metrics["prefill_tokens"]


def test_without_the_lookahead_slots_not_in_the_mamba_groups_the_run_is_not_vllms(monkeypatch):
    """Mamba state columns for the drafter's lookahead slots too (vLLM allocates them for the target's tokens
    only): the contended case preempts 266 requests where vLLM preempts 27."""
    import sim.kernel.mamba_run as mamba_run

    monkeypatch.setattr(mamba_run, "run_lookahead_tokens", lambda config: 0)
    assert _preemptions_and_prefill("gdn_align_contended_mtp_2") == ("266 vs 27", "376276 vs 110256")


def test_a_chunk_freeing_states_as_a_verification_would_is_not_vllms(monkeypatch):
    """A prefill chunk with the drafter's lookahead slots freeing the states by all but its last token (a
    verification's rule) frees the running state it copies from: 23 preemptions where vLLM has 27."""
    from allocators.hybrid import HybridPagedAllocator

    grow = HybridPagedAllocator.grow_with_drafts
    monkeypatch.setattr(HybridPagedAllocator, "grow_with_drafts",
                        lambda self, seq_id, num_tokens, drafts, chunk=False: grow(self, seq_id, num_tokens, drafts))
    assert _preemptions_and_prefill("gdn_align_contended_mtp_2") == ("23 vs 27", "124443 vs 110256")


def test_without_lookahead_block_hashes_a_block_aligned_prefix_hits_a_block_more(monkeypatch):
    """System prompts of 2, 4 and 7 blocks: hashed with the token after it, a prefix's last block is each request's
    own (`sim.kernel.arrivals`' ``lookahead_hashes``); without, requests hit it, prefill 12,643 fewer tokens than
    vLLM and preempt 16 where vLLM preempts 17."""
    from sim.kernel.arrivals import ArrivalSource

    for_memory = ArrivalSource.for_memory.__func__
    monkeypatch.setattr(ArrivalSource, "for_memory", classmethod(
        lambda cls, workload, memory, *, start_s=0.0, lookahead_hashes=False: for_memory(cls, workload, memory,
                                                                                         start_s=start_s)))
    assert _preemptions_and_prefill("gdn_align_block_prefix_mtp_2") == ("16 vs 17", "255402 vs 268045")


def test_ngram_drafts_are_not_vllms_mtp_run():
    """The same drafts without the drafter (no lookahead slots, no lookahead hashes): 32 preemptions where vLLM's
    MTP run has 27."""
    assert _preemptions_and_prefill("gdn_align_contended_mtp_2", method="ngram") == ("32 vs 27", "112647 vs 110256")


def test_vllms_pool_holds_capacitys_requests_at_rest():
    """``kvsim capacity`` with the MTP drafter (k = 2) and prefix caching on, on the H200 at -tp 2: 6,996 blocks of
    576 tokens, 23 blocks a request of 7,000 + 1,000 tokens (14 attention blocks for its tokens and 2 lookahead
    slots, 1 + 2 state blocks in each of 3 Mamba groups), 304 at once; vLLM's scheduler given that pool and 320
    such requests at once (``gdn_align_capacity_mtp_2``) runs 304, never more, whenever every running request
    holds its 23 blocks and others wait."""
    result = CliRunner().invoke(main, ["capacity", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "-tp", "2",
                                       "--prompt-len", "7000", "--output-len", "1000", "--speculative-config",
                                       '{"method": "mtp", "num_speculative_tokens": 2}', "--json"])
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    settings = json.loads((DATA / "gdn_align_capacity_mtp_2" / "settings.json").read_text())
    assert r["enable_prefix_caching"] and r["kv_capacity_blocks"] == settings["num_blocks"] == 6996
    assert (r["block_size"], r["blocks_per_request"], r["max_concurrent_requests"]) == (576, 23, 304)
    theirs = pd.read_csv(DATA / "gdn_align_capacity_mtp_2" / "steps.csv.gz")
    at_rest = theirs[(theirs["used_blocks"] == 23 * theirs["running"]) & (theirs["waiting"] > 0)]
    assert at_rest["running"].max() == 304 and (at_rest["running"] == 304).sum() > 100
