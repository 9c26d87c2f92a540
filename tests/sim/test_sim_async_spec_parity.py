"""``--async-scheduling`` with ``--speculative-config`` against vLLM 0.33's own ``AsyncScheduler`` with drafts, case
by case.

The references in ``tests/sim/data/vllm_oracle/async_spec`` were written by ``tools/vllm_oracle/spec_cases.py
--async-scheduling``: vLLM 0.33.0's ``AsyncScheduler`` built for an EAGLE or MTP drafter (or ngram), driven as
``EngineCore.step_with_batch_queue`` drives it (step t + 1 scheduled before step t's output is processed; the
scheduler sees ``-1`` placeholders, never draft ids), each verification accepting the drafts kvsim's seeded draw
accepts (`sim.kernel.spec_decode`). Every step's running and waiting requests, prefill tokens and blocks in use
(``--step-by-step``), every metric of ``compare.py`` (steps counted to the run's end, as in
``test_sim_async_scheduling.py``) and vLLM's spec decoding counters must be equal, stepping and fast-forwarding;
and each rule kvsim ports for it must matter: without it some case differs.
"""

import json

import pytest

from sim.kernel import async_outputs, memory, scheduler, spec_decode
from sim.kernel.runner import run_config
from tests.sim.mamba_oracle import mamba
from tests.sim.vllm_oracle import DATA, cases, compare

ASYNC_SPEC = DATA / "async_spec"
CASES = cases(ASYNC_SPEC)
COUNTERS = {"num_drafts": "", "num_draft_tokens": "", "num_accepted_tokens": ""}


def run(case: str, *, step_by_step: bool = False):
    """kvsim's run of ``case`` at its vLLM settings (`compare.kvsim_config`: async scheduling and the drafter)."""
    settings = json.loads((ASYNC_SPEC / case / "settings.json").read_text())
    assert settings["async_scheduling"]
    return run_config(compare.kvsim_config(settings, ASYNC_SPEC / case / "trace.csv", step_by_step=step_by_step))


def metric_differences(result, case: str) -> dict[str, str]:
    """`compare.differences` of a run from vLLM's reference run of ``case``."""
    ours = compare.run_metrics(result, compare.total_steps(result, asynchronous=True))
    return compare.differences(ours, compare.oracle_metrics(ASYNC_SPEC / case))


def differences(case: str) -> dict[str, str]:
    """Everything a step-by-step run of ``case`` differs from vLLM's in: step column, metric or counter -> ''
    where equal."""
    slow = run(case, step_by_step=True)
    return (mamba.step_differences(slow, ASYNC_SPEC / case) | metric_differences(slow, case)
            | mamba.spec_differences(slow, ASYNC_SPEC / case))


def test_the_references_cover_drafters_contention_caching_and_limits():
    """EAGLE, MTP and ngram, 1 and 3 drafts; preemptions (FCFS and priority), a small budget and long-prefill
    threshold, shared prefixes cached (whole prompts: a prompt's last block hashed with its first output token),
    max_model_len capped; closed loops, sessions and vLLM's offloading connector."""
    assert set(CASES) >= {
        "eagle_contended_k1", "eagle_contended_k3", "mtp_contended_k1", "mtp_contended_k3", "eagle_offline_burst_k3",
        "eagle_reserve_full_isl_off_k3", "eagle_long_prefill_threshold_k3", "eagle_block_size_32_k3",
        "eagle_small_budget_threshold_k3", "mtp_small_budget_threshold_k1", "eagle_shared_prefix_cached_k3",
        "eagle_shared_prefix_cached_k3_high", "mtp_shared_prefix_cached_k3", "eagle_whole_prompts_cached_k1",
        "eagle_max_model_len_capped_k3", "mtp_max_model_len_capped_k1", "eagle_priority_contended_k1",
        "eagle_priority_contended_k3", "mtp_priority_contended_k3", "eagle_priority_k3", "mtp_priority_k3",
        "ngram_contended_k3", "ngram_max_model_len_capped_k3", "ngram_shared_prefix_cached_k3",
        # closed loops and sessions (a turn's prompt holds the turn before's output), a host tier
        "eagle_closed_loop_k3", "mtp_closed_loop_priority_k1", "ngram_closed_loop_k3", "eagle_sessions_k3",
        "ngram_sessions_k3", "mtp_sessions_released_k3", "eagle_sessions_fuzz44_0271_k3",
        "ngram_sessions_fuzz46_0008_k20", "ngram_offload_shared_prefix_k3", "ngram_offload_whole_prompts_k2",
        "ngram_offload_arc_sessions_k2", "ngram_offload_sessions_k3", "eagle_offload_shared_prefix_k3",
        "mtp_offload_whole_prompts_k2", "eagle_offload_arc_sessions_k2",
        # generated blocks offloaded too
        "ngram_offload_generated_blocks_k3", "eagle_offload_generated_blocks_k3", "mtp_offload_finished_drafts_k2",
        "ngram_offload_generated_fuzz62_0134_k20", "eagle_hash_units_k3", "mtp_offload_hash_units_k2",
        # ngram drafts on a sliding-window model
        "ngram_hybrid_contended_k3", "ngram_hybrid_sessions_k2", "ngram_hybrid_drafts_preempted_k20",
        "eagle_hybrid_contended_k3", "eagle_hybrid_sessions_k2", "eagle_offload_recompute_tail_fuzz75_0116_k20"}


@pytest.mark.parametrize("case", CASES)
def test_every_step_is_async_vllms(case):
    """Running, waiting, prefill tokens and used blocks at every engine step, every metric and the draft counters
    (verifications dropped with a finished request's output not counted, stale ones counted) equal vLLM's."""
    slow = run(case, step_by_step=True)
    assert mamba.step_differences(slow, ASYNC_SPEC / case) == dict.fromkeys(mamba.step_columns(ASYNC_SPEC / case), "")
    assert metric_differences(slow, case) == dict.fromkeys(compare.METRICS, "")
    assert mamba.spec_differences(slow, ASYNC_SPEC / case) == COUNTERS


@pytest.mark.parametrize("case", CASES)
def test_the_fast_forward_makes_async_vllms_decisions(case):
    """kvsim's default run (drafts step every decoder singly) gives vLLM's metrics and counters too."""
    fast = run(case)
    assert metric_differences(fast, case) == dict.fromkeys(compare.METRICS, "")
    assert mamba.spec_differences(fast, ASYNC_SPEC / case) == COUNTERS


def _sync_cap(self, group, step, room):
    return max(0, min(self.drafts.get(group.index, 0), room, self.max_model_len - (group.prompt + step - group.base) - 1))


RULES = [  # (what is dropped, the function replaced, the case that then differs)
    ("allocate_slots counts in-flight rejected drafts as computed",
     (spec_decode.SpecDecode, "held", lambda self, drafts, group=None: drafts + self.lookahead), "eagle_contended_k3"),
    ("max_model_len caps the drafts past in-flight rejected ones",
     (spec_decode.SpecDecode, "drafts_for", _sync_cap), "eagle_max_model_len_capped_k3"),
    ("a request with no position left below max_model_len is skipped",
     (spec_decode.SpecDecode, "reaches_model_len", lambda self, group, step: False), "mtp_max_model_len_capped_k1"),
    ("a request finished only by accepted drafts in flight is scheduled once more",
     (scheduler.Scheduler, "verify_finished", lambda self, group, budget: 0), "mtp_small_budget_threshold_k1"),
    ("a victim's accepted drafts in flight are not hashed",
     (spec_decode.SpecDecode, "in_flight_accepted", lambda self, group: 0), "eagle_block_size_32_k3"),
    ("a block's lookahead hash needs the token after it",
     (spec_decode.SpecDecode, "hash_lookahead", lambda self: 0), "eagle_whole_prompts_cached_k1"),
    ("a finished request's accepted drafts past its end are not cached",
     (async_outputs, "final_lag", lambda group, lag, told: lag), "eagle_offline_burst_k3"),
    ("with a host tier, a finished request scheduled once more frees its blocks a step late",
     (async_outputs.InFlight, "frees_late", lambda self, group: False), "ngram_offload_sessions_k3"),
    ("the host tier hears of such a request's finish when its output is processed",
     (memory.KVMemory, "tell_tier_finished", lambda self, group: None), "ngram_offload_shared_prefix_k3"),
    ("with generated blocks offloaded, a block is stored once the token it ends at is known",
     (async_outputs.InFlight, "hashed_blocks", lambda self: {}), "eagle_offload_generated_blocks_k3"),
    ("and the drafts its verification in flight accepted are not hashed either",
     (spec_decode.SpecDecode, "in_flight_accepted", lambda self, group: 0), "ngram_offload_generated_fuzz62_0134_k20"),
    ("with a drafter's lookahead hashes, a block reaching a prefill's last known token is offered once hashed",
     (scheduler.Scheduler, "hashed_for_stores", lambda self, plan, hashed: hashed),
     "eagle_offload_shared_prefix_k3"),
]


@pytest.mark.parametrize("rule, patch, case", RULES, ids=[r[0] for r in RULES])
def test_each_rule_matters(rule, patch, case, monkeypatch):
    """Dropping one ported rule (the function replaced by the synchronous scheduler's behaviour) makes a case
    differ from vLLM's: every rule is needed."""
    assert not any(differences(case).values())
    monkeypatch.setattr(*patch)
    assert any(differences(case).values()), rule
