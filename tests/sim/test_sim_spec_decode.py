"""``--speculative-config`` (vLLM's ngram speculative decoding) against vLLM 0.33's own scheduler, case by case.

The references in ``tests/sim/data/vllm_oracle/spec`` were written by ``tools/vllm_oracle/spec_cases.py``: vLLM
0.33.0's ``Scheduler`` with ``SpeculativeConfig(method="ngram", num_speculative_tokens=k)``, fed ``k`` drafts after
every step that samples (``update_draft_token_ids``) and verification outputs of ``accepted + 1`` tokens, the
accepted counts drawn as kvsim draws them (`sim.kernel.spec_decode`). Every metric must be equal, as in
``test_sim_vllm_parity.py``, and so must vLLM's spec decoding counters.
"""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_config, run_simulation
from sim.kernel.spec_decode import SpecDecode, parse_speculative_config
from tests.sim.vllm_oracle import DATA, cases, compare
from workloads import workload_from_frame

SPEC = DATA / "spec"
CASES = cases(SPEC)
NGRAM = json.dumps({"method": "ngram", "num_speculative_tokens": 3})


def test_the_spec_references_cover_contention_caching_and_limits():
    """Preemption (FCFS and priority), prefix hits, max_num_seqs, a small budget that cuts drafts, max_model_len,
    drafts spanning more than a block (20 of them: finishing requests drop the accepted ones past their end)."""
    assert set(CASES) >= {"ample", "contended", "max_num_seqs", "shared_prefix_cached", "small_budget_threshold",
                          "max_model_len_capped", "priority_contended", "long_prefill_threshold", "offline_burst",
                          "reserve_full_isl_off", "shared_prefix_uncached", "block_size_32", "contended_20_drafts",
                          "threshold_below_drafts",
                          # vLLM's offloading connector: loads admitted beyond the prefills in flight's reservations
                          "offload_padded_loads", "offload_loaded_final_chunk",
                          # a trace's own prefix hashes (hash_ids)
                          "hash_units",
                          # a sliding-window model (a window group beside the full one)
                          "hybrid_contended", "hybrid_shared_prefix", "hybrid_sessions",
                          "hybrid_long_prefill_threshold", "hybrid_retention_interval_256",
                          "hybrid_parallel_sampling", "hybrid_contended_20_drafts", "hybrid_drafts_preempted",
                          "hybrid_accepted_drafts_fuzz71_2639"}


@pytest.mark.parametrize("case", CASES)
def test_kvsim_makes_vllms_spec_decoding_decisions(case):
    """Total steps, running requests, preemptions, prefill tokens and every request's first-token and finish step,
    preemptions and cached tokens equal vLLM's exactly, and so do vLLM's counters of drafts, draft tokens and
    accepted tokens (placeholder drafts of padded admissions included, as vLLM counts them)."""
    ours, theirs = compare.kvsim_metrics(SPEC / case), compare.oracle_metrics(SPEC / case)
    assert compare.differences(ours, theirs) == dict.fromkeys(compare.METRICS, "")
    settings = json.loads((SPEC / case / "settings.json").read_text())
    spec = run_config(compare.kvsim_config(settings, SPEC / case / "trace.csv")).summary["spec_decoding"]
    counters = json.loads((SPEC / case / "spec.json").read_text())
    assert {key: spec[key] for key in counters} == counters
    assert spec["mean_acceptance_length"] == 1 + counters["num_accepted_tokens"] / counters["num_drafts"]


@pytest.mark.parametrize("case", ["contended", "shared_prefix_cached", "contended_20_drafts"])
def test_fast_forward_equals_step_by_step(case):
    """With drafts every decoder is stepped one step at a time (decode steps are not identical), so the default
    and ``--step-by-step`` take the same steps."""
    fast = compare.kvsim_metrics(SPEC / case)
    slow = compare.kvsim_metrics(SPEC / case, step_by_step=True)
    for metric in compare.METRICS:
        assert np.array_equal(fast[metric], slow[metric]), metric


@pytest.mark.parametrize("model, kv_tokens", [("llama-3-8b", 4000), ("gpt-oss-20b", 2500)])
@pytest.mark.parametrize("rate", [0.0, 0.3, 1.0])
def test_draft_slots_pass_the_allocator_audit(rate, model, kv_tokens):
    """A verification step holds blocks for its draft slots past the sequence's tokens (``grow_with_drafts``);
    ``--debug-invariants`` audits them after every step (empty, the sequence's own, never cached) under
    contention: preemptions, prefix hits and a 256-token budget; on a sliding-window model in every group."""
    from workloads.named import generate

    w = generate("lognormal:prompt_mean=300,prompt_cv=1,output_mean=100,output_cv=1,max_total=2000",
                 "poisson:rate=20", 40, seed=3)
    config = SimConfig(model=model, gpu="a100-40gb", kv_tokens=kv_tokens, max_num_batched_tokens=256,
                       speculative_config=NGRAM, spec_acceptance_rate=rate, debug_invariants=1)
    result = run_simulation(config, w)
    assert result.summary["preemptions"] > 0 and result.requests["finished_s"].notna().all()


def _run(frame: pd.DataFrame, **options):
    config = SimConfig(kv_tokens=4000 * 16, step_time=1.0, memory_snapshots=0, **options)
    return run_simulation(config, workload_from_frame(frame))


FRAME = pd.DataFrame({"arrival_time_s": [0.0, 0.0, 1.0], "prompt_tokens": [100, 200, 50],
                      "output_tokens": [40, 30, 60]})


def test_off_by_default_and_acceptance_bounds_the_speedup():
    """Without --speculative-config nothing changes (no spec_decoding key); with it, a rate of 0 accepts nothing
    (one token a step, the same finish steps as without drafts), a rate of 1 every draft (k + 1 tokens a step)."""
    plain = _run(FRAME)
    assert "spec_decoding" not in plain.summary
    none = _run(FRAME, speculative_config=NGRAM, spec_acceptance_rate=0.0)
    assert none.summary["spec_decoding"]["num_accepted_tokens"] == 0
    assert none.summary["spec_decoding"]["mean_acceptance_length"] == 1
    assert np.array_equal(none.requests["finished_s"], plain.requests["finished_s"])
    every = _run(FRAME, speculative_config=NGRAM, spec_acceptance_rate=1.0)
    spec = every.summary["spec_decoding"]
    assert spec["num_accepted_tokens"] == spec["num_draft_tokens"] and spec["mean_acceptance_length"] == 4
    # a prefill step, then ceil((output - 1) / 4) verification steps of 4 tokens each
    expected = FRAME["arrival_time_s"] + 1 + np.ceil((FRAME["output_tokens"] - 1) / 4)
    assert np.array_equal(every.requests["finished_s"].to_numpy(), expected.to_numpy())


def test_runs_are_reproducible_and_the_draws_follow_the_request():
    """Same inputs and seed, same figures; each request's draws come from its own Generator, seeded by the seed
    and its index, ``k`` uniforms a verification (so the driver reproduces them whatever the order)."""
    a = _run(FRAME, speculative_config=NGRAM, spec_acceptance_rate=0.5)
    b = _run(FRAME, speculative_config=NGRAM, spec_acceptance_rate=0.5)
    assert a.summary["spec_decoding"] == b.summary["spec_decoding"]
    assert a.requests["finished_s"].equals(b.requests["finished_s"])
    spec = SpecDecode(3, 0.5, seed=7, max_model_len=1000)
    group = type("G", (), {"index": 4})()
    draws = np.random.default_rng([7, 0x5EC, 4]).random((5, 3)) < 0.5
    for row, drafts in zip(draws, (3, 2, 3, 1, 3), strict=True):
        prefix = row[:drafts]
        assert spec.accept(group, drafts) == (drafts if prefix.all() else int(prefix.argmin()))


@pytest.mark.parametrize("text, message", [
    ("not json", "must be a JSON object"),
    ("[1]", "must be a JSON object"),
    ('{"method": "draft_model", "model": "m", "num_speculative_tokens": 3}', "method 'draft_model' is not modelled"),
    ('{"method": "dflash", "model": "m", "num_speculative_tokens": 1}', "method 'dflash' is not modelled"),
    ('{"method": "eagle", "num_speculative_tokens": 3}', "method 'eagle' needs \"model\""),
    ('{"method": "ngram"}', "num_speculative_tokens must be a positive integer"),
    ('{"method": "ngram", "num_speculative_tokens": 0}', "num_speculative_tokens must be a positive integer"),
    ('{"method": "ngram", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2}',
     "draft_tensor_parallel_size not modelled"),
])
def test_unmodelled_speculative_configs_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        parse_speculative_config(text)
    with pytest.raises(ValueError, match=message):
        SimConfig(speculative_config=text, spec_acceptance_rate=0.5)


def test_vllms_spellings_are_read():
    """vLLM's ``model: "ngram"`` names the method too; ngram's lookup window is accepted (it changes nothing
    here: kvsim's drafter always proposes)."""
    assert parse_speculative_config('{"model": "ngram", "num_speculative_tokens": 2}') == 2
    assert parse_speculative_config('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, '
                                    '"prompt_lookup_min": 2}') == 4


@pytest.mark.parametrize("options, message", [
    (dict(allocator="vattention"), "--allocator vattention"),
    (dict(preemption="swap"), "--preemption swap"),
    (dict(cpu_offload_gib=1.0), "--offload-write-policy write_back"),
    (dict(cpu_offload_gib=1.0, offload_write_policy="write_through"), "--offload-loads sync"),
    (dict(chunked_prefill=False), "--chunked-prefill False"),
    (dict(scheduling_policy="lpm"), "--scheduling-policy lpm"),
    (dict(spec_acceptance_rate=None), "needs --spec-acceptance-rate"),
    (dict(spec_acceptance_rate=1.5), "needs --spec-acceptance-rate"),
])
def test_unmodelled_combinations_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        SimConfig(**({"speculative_config": NGRAM, "spec_acceptance_rate": 0.5} | options))


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("prompt_only", [True, False])
def test_a_drafter_runs_with_vllms_offloading_connector(prompt_only, asynchronous):
    """A model-based drafter with the connector's host tier (``test_sim_spec_drafter.py``'s ``offload_*`` cases and
    the async ones of ``test_sim_async_spec_parity.py``): prompt blocks only or generated ones too."""
    eagle = json.dumps({"method": "eagle", "model": "m", "num_speculative_tokens": 2})
    config = SimConfig(speculative_config=eagle, spec_acceptance_rate=0.5, cpu_offload_gib=1.0,
                       offload_write_policy="write_through", offload_loads="async", offload_prompt_only=prompt_only,
                       async_scheduling=asynchronous)
    assert config.offload_prompt_only is prompt_only


def test_an_acceptance_rate_alone_is_refused():
    with pytest.raises(ValueError, match="--spec-acceptance-rate needs --speculative-config"):
        SimConfig(spec_acceptance_rate=0.5)


@pytest.mark.parametrize("column, value, options, message", [
    ("n", 2, dict(parallel_sampling="fork"), "rows sampled n > 1 times as one group"),
    ("beam_width", 2, {}, "beam search")])
def test_unmodelled_workloads_are_refused(column, value, options, message):
    frame = FRAME.assign(**{column: [1, value, 1]})
    with pytest.raises(ValueError, match=message):
        _run(frame, speculative_config=NGRAM, spec_acceptance_rate=0.5, **options)


def test_a_row_sampled_n_times_runs_with_drafts_as_its_children():
    """vLLM v1's front end fans the row out into ``n`` requests, each drafting and verifying on its own
    (``spec_cases.py``'s ``fanned_out``, exact against vLLM)."""
    result = _run(FRAME.assign(n=[1, 3, 1]), speculative_config=NGRAM, spec_acceptance_rate=0.5, prefix_caching=True)
    assert result.summary["completed"] == 3 and result.summary["parallel_sampling"] == "fan-out"
    assert result.summary["spec_decoding"]["num_drafts"] > 0


SESSION = dict(session_id=["a", "a", "b"], turn=[0, 1, 0])


RELEASED = dict(SESSION, think_time_s=[float("nan"), 0.5, float("nan")])


@pytest.mark.parametrize("extra", [RELEASED, SESSION])
def test_sessions_run_with_drafts_under_async_scheduling(extra):
    """Session turns, released or open-loop, run with drafts under async scheduling (exact against vLLM:
    ``spec_cases.py``'s ``*_sessions*`` async cases)."""
    result = _run(FRAME.assign(**extra), speculative_config=NGRAM, spec_acceptance_rate=0.5, async_scheduling=True,
                  prefix_caching=True)
    assert result.summary["completed"] == 3 and result.summary["spec_decoding"]["num_drafts"] > 0


def test_released_turns_run_with_drafts():
    """A turn sent after the turn before finished holds its output, accepted drafts included (``spec_cases.py``'s
    ``sessions_released`` and ``closed_loop``, exact against vLLM driven as a client that waits for replies)."""
    result = _run(FRAME.assign(**RELEASED), speculative_config=NGRAM, spec_acceptance_rate=0.5, prefix_caching=True)
    req = result.requests
    assert result.summary["completed"] == 3 and result.summary["spec_decoding"]["num_drafts"] > 0
    assert req.loc[1, "arrival_s"] == pytest.approx(req.loc[0, "finished_s"] + 0.5)


def test_open_loop_sessions_run_with_drafts():
    """A turn arriving at its own time holds the turn before's output, drafts accepted into it included
    (``spec_cases.py``'s ``sessions`` and ``offload_arc_sessions``, exact against vLLM)."""
    result = _run(FRAME.assign(**SESSION), speculative_config=NGRAM, spec_acceptance_rate=0.5, prefix_caching=True)
    assert result.summary["completed"] == 3 and result.summary["spec_decoding"]["num_drafts"] > 0


@pytest.mark.parametrize("method", ["ngram", "eagle"])
def test_drafts_run_on_a_sliding_window_model(method):
    """ngram and EAGLE drafts run on a sliding-window model (the ``hybrid_*`` references of ``spec`` and
    ``spec/eagle``); MTP needs a model with MTP layers."""
    config = json.dumps({"method": method, "model": "RedHatAI/gpt-oss-20b-speculator.eagle3",
                         "num_speculative_tokens": 3} if method == "eagle" else json.loads(NGRAM))
    summary = _run(FRAME, model="gpt-oss-20b", speculative_config=config, spec_acceptance_rate=0.5).summary
    assert summary["spec_decoding"]["num_drafts"] > 0 and summary["completed"] == 3


def test_a_victims_accepted_drafts_free_no_window_block(monkeypatch):
    """A victim preempted with accepted drafts it was not told yet: vLLM caches their blocks after the step but
    frees window blocks only in an ``allocate_slots`` (`HybridPagedAllocator.cache_held`). Told as growth, its
    window's oldest block reaches the free queue ahead of the rest and is evicted first: the case found by
    ``fuzz.py`` then differs (8 preemptions against 6). The window rule for a verification's own blocks is pinned
    in ``tests/allocators/test_allocator_hybrid.py``."""
    from allocators.hybrid import HybridPagedAllocator

    case = SPEC / "hybrid_accepted_drafts_fuzz71_2639"
    theirs = compare.oracle_metrics(case)
    assert not any(compare.differences(compare.kvsim_metrics(case), theirs).values())
    monkeypatch.setattr(HybridPagedAllocator, "cache_held", lambda self, seq_id, n: self.grow(seq_id, n))
    assert compare.differences(compare.kvsim_metrics(case), theirs)["preemptions"] == "8 vs 6"


def test_a_request_whose_drafts_never_fit_is_rejected():
    """Its last verification holds slots for k drafts past its last output token: a pool that holds the request
    alone but not those drafts rejects it with the reason."""
    frame = pd.DataFrame({"arrival_time_s": [0.0], "prompt_tokens": [40], "output_tokens": [8]})
    config = dict(kv_tokens=4 * 16, block_size=16, step_time=1.0, memory_snapshots=0)  # 3 usable blocks: 47 fits
    assert not run_simulation(SimConfig(**config), workload_from_frame(frame)).requests["rejected"].any()
    spec = run_simulation(SimConfig(**config, speculative_config=NGRAM, spec_acceptance_rate=0.5),
                          workload_from_frame(frame))
    assert spec.requests["rejected"].all()


def test_the_clock_counts_verified_drafts_as_tokens_of_the_step():
    """A roofline or fitted clock charges the drafts each verification feeds as query tokens: with every draft
    rejected the run takes the same steps but longer ones."""
    burst = workload_from_frame(FRAME.assign(arrival_time_s=0.0))
    plain = run_simulation(SimConfig(kv_tokens=4000 * 16, memory_snapshots=0), burst)
    drafts = run_simulation(SimConfig(kv_tokens=4000 * 16, memory_snapshots=0, speculative_config=NGRAM,
                                      spec_acceptance_rate=0.0), burst)
    assert drafts.steps["num_steps"].sum() == plain.steps["num_steps"].sum()
    assert drafts.steps["duration_s"].sum() > plain.steps["duration_s"].sum()


def test_dataclass_replace_keeps_the_check():
    with pytest.raises(ValueError, match="needs --spec-acceptance-rate"):
        dataclasses.replace(SimConfig(), speculative_config=NGRAM)
