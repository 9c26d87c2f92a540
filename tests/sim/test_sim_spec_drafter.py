"""``--speculative-config`` with a model-based drafter (EAGLE, EAGLE-3, MTP): lookahead slots on every
``allocate_slots``, the pool with the drafter's layer, and the drafter's GPU time (`sim.kernel.spec_decode`).

The references in ``tests/sim/data/vllm_oracle/spec/eagle`` were written by ``tools/vllm_oracle/spec_cases.py
--method eagle`` (vLLM 0.33.0's ``Scheduler`` built for an EAGLE drafter: its docstring says how, offline) and
``--pool`` (vLLM's ``get_kv_cache_configs`` with the drafter's layer beside Llama-2-7B's 32)."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from allocators.capacity import kv_capacity
from allocators.catalog import GIB, get_gpu, get_model
from allocators.paged import PagedAllocator
from sim.kernel.config import SimConfig
from sim.kernel.runner import run_config, run_simulation
from sim.kernel.spec_decode import SpecDecode, parse_speculative
from tests.sim.vllm_oracle import DATA, cases, compare
from workloads import workload_from_frame
from workloads.workload import Workload

ORACLE = DATA / "spec" / "eagle"
ORACLE_CASES = cases(ORACLE)

EAGLE = json.dumps({"method": "eagle", "model": "yuhuili/EAGLE-llama2-chat-7B", "num_speculative_tokens": 3})
NGRAM = json.dumps({"method": "ngram", "num_speculative_tokens": 3})


def _frame(prompt: int, output: int, count: int = 1) -> pd.DataFrame:
    return pd.DataFrame({"arrival_time_s": [0.0] * count, "prompt_tokens": [prompt] * count,
                         "output_tokens": [output] * count})


def _run(frame: pd.DataFrame, **kwargs):
    config = SimConfig(model="llama-2-7b", gpu="h100-80gb", **kwargs)
    return run_simulation(config, workload_from_frame(frame))


@pytest.mark.parametrize("method", ["eagle", "eagle3", "mtp"])
def test_drafter_methods_parse(method):
    text = json.dumps({"method": method, "model": "m", "num_speculative_tokens": 2})
    assert parse_speculative(text) == (method, 2)
    assert SpecDecode(2, 0.5, 0, 100, method=method).lookahead == 2  # VllmConfig.num_lookahead_tokens
    assert SpecDecode(2, 0.5, 0, 100).lookahead == 0  # ngram: none


def test_budget_must_exceed_the_lookahead():
    """vLLM's ``_set_max_num_scheduled_tokens``: max_num_batched_tokens <= num_lookahead_tokens is refused."""
    text = json.dumps({"method": "eagle", "model": "m", "num_speculative_tokens": 8})
    with pytest.raises(ValueError, match="must exceed the drafter's 8 lookahead slots"):
        SimConfig(speculative_config=text, spec_acceptance_rate=0.5, max_num_batched_tokens=8, max_num_seqs=8)
    SimConfig(speculative_config=text, spec_acceptance_rate=0.5, max_num_batched_tokens=9, max_num_seqs=8)


def test_ngram_keys_are_refused_with_a_drafter():
    text = json.dumps({"method": "eagle", "model": "m", "num_speculative_tokens": 2, "prompt_lookup_max": 3})
    with pytest.raises(ValueError, match="prompt_lookup_max is ngram's"):
        parse_speculative(text)


def test_lookahead_slots_cost_a_block_where_ngram_fits():
    """A 12-token prompt, one output token, 16-token blocks, one usable block (block 0 is the null block): ngram's
    last verification could hold 12 + 3 drafts = 15 slots, one block; EAGLE's (k 3) adds 3 lookahead slots, 18,
    a second block, so the request can never run and is rejected with the reason."""
    ngram = _run(_frame(12, 1), speculative_config=NGRAM, spec_acceptance_rate=0.5, kv_tokens=32)
    assert ngram.summary["completed"] == 1
    eagle = _run(_frame(12, 1), speculative_config=EAGLE, spec_acceptance_rate=0.5, kv_tokens=32)
    assert eagle.summary["completed"] == 0
    assert any("drafter lookahead slots" in why for why in eagle.summary["rejected_reasons"])


def test_lookahead_slots_are_capped_at_max_model_len():
    """``allocate_slots``' ``num_tokens_need_slot`` is capped at max_model_len: with max_model_len 16 the same
    request holds at most 16 slots, one block, and runs."""
    run = _run(_frame(12, 1), speculative_config=EAGLE, spec_acceptance_rate=0.5, kv_tokens=32, max_model_len=16)
    assert run.summary["completed"] == 1


def test_grow_with_drafts_holds_lookahead_up_to_max_model_len():
    alloc = PagedAllocator(64, block_size=16, max_model_len=40, placement="buddy")
    alloc.admit(0, 10, final_tokens=40, lookahead_slots=3)
    assert len(alloc.block_table(0)) == 1  # 13 slots
    alloc.grow_with_drafts(0, 20, 3)  # 30 tokens + 3: 3 blocks
    assert len(alloc.block_table(0)) == 3
    alloc.grow_with_drafts(0, 8, 5)  # 38 tokens + 5 capped at 40: 3 blocks
    assert len(alloc.block_table(0)) == 3


def test_the_drafter_costs_gpu_time_and_memory():
    """Same workload, same acceptance draws: EAGLE's run has fewer slots (its KV layer) and slower steps (its
    passes) than ngram's, and the same drafts accepted."""
    frame = _frame(200, 64, count=8)
    ngram = _run(frame, speculative_config=NGRAM, spec_acceptance_rate=0.7)
    eagle = _run(frame, speculative_config=EAGLE, spec_acceptance_rate=0.7)
    counters = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
    assert [eagle.summary["spec_decoding"][key] for key in counters] == [ngram.summary["spec_decoding"][key]
                                                                         for key in counters]
    assert {key: eagle.summary["spec_decoding"][key] for key in ("method", "num_lookahead_tokens",
                                                                 "drafter_layers")} == {
        "method": "eagle", "num_lookahead_tokens": 3, "drafter_layers": 1}
    assert ngram.summary["spec_decoding"]["num_lookahead_tokens"] == 0
    assert eagle.summary["kv_capacity_tokens"] < ngram.summary["kv_capacity_tokens"]
    assert eagle.summary["sim_time_s"] > ngram.summary["sim_time_s"]


def test_a_shared_prompt_ending_at_a_block_end_keeps_that_block_its_own():
    """vLLM's lookahead block hashes: a block is shared only with the token after it. Two requests of a group
    whose 32-token system prompt ends at a block's end: under ngram the second hits both blocks (32 tokens),
    under EAGLE only the first (16), as the token after the second block is each request's own; with a 40-token
    prompt the token after block 2 is still the group's, so EAGLE hits 32 too."""
    def second_hit(prefix_len: int, spec: str) -> int:
        frame = _frame(64, 4, count=2).assign(arrival_time_s=[0.0, 10.0], prefix_group=[0, 0],
                                             prefix_len=[prefix_len, prefix_len])
        run = _run(frame, speculative_config=spec, spec_acceptance_rate=0.5)
        return int(run.requests["cached_tokens"].iloc[1])

    assert (second_hit(32, NGRAM), second_hit(32, EAGLE)) == (32, 16)
    assert (second_hit(40, NGRAM), second_hit(40, EAGLE)) == (32, 32)


def test_a_trace_prefix_hash_shares_a_block_ending_a_unit_only_if_the_next_unit_is_shared():
    """A trace's hash ids under a drafter's lookahead block hashes (`Request.block_hashes`'s ``lookahead``): with
    32-token units (two blocks), a second request sharing the first request's first unit only hits both its
    blocks under ngram (32 tokens) and only the first under EAGLE (16), as the token after the second block starts
    a unit the two do not share; sharing two units, it hits four blocks under ngram and three under EAGLE (each
    prompt 80 tokens, three units, the last partial)."""
    def second_hit(second: list[int], spec: str) -> int:
        workload = Workload(arrival_time_s=np.array([0.0, 10.0]), prompt_tokens=np.array([80, 80]),
                            output_tokens=np.array([4, 4]), hash_offsets=np.array([0, 3, 6]),
                            hash_values=np.array([1, 2, 3, *second]), prefix_hash_tokens=32, name="units")
        config = SimConfig(model="llama-2-7b", gpu="h100-80gb", speculative_config=spec, spec_acceptance_rate=0.5)
        return int(run_simulation(config, workload).requests["cached_tokens"].iloc[1])

    assert (second_hit([1, 5, 6], NGRAM), second_hit([1, 5, 6], EAGLE)) == (32, 16)
    assert (second_hit([1, 2, 6], NGRAM), second_hit([1, 2, 6], EAGLE)) == (64, 48)


def test_mtp_needs_the_models_mtp_layers():
    text = json.dumps({"method": "mtp", "num_speculative_tokens": 1})
    with pytest.raises(ValueError, match="gives no num_nextn_predict_layers"):
        _run(_frame(16, 2), speculative_config=text, spec_acceptance_rate=0.5)


def test_the_eagle_references_cover_contention_and_limits():
    """Preemption, a small budget that cuts drafts, max_model_len (lookahead slots capped there), shared
    prefixes cached (``whole_prompts_cached``: prompts ending at a block's end, the lookahead hashes' case) and
    not, 20 drafts spanning more than a block."""
    assert set(ORACLE_CASES) >= {"ample", "contended", "small_budget_threshold", "max_model_len_capped",
                                 "offline_burst", "reserve_full_isl_off", "shared_prefix_uncached", "block_size_32",
                                 "contended_20_drafts", "shared_prefix_cached", "whole_prompts_cached",
                                 # vLLM's offloading connector: lookahead hashes, a block offered once hashed
                                 "offload_shared_prefix", "offload_whole_prompts", "offload_sessions",
                                 "offload_sessions_fuzz58_0027", "offload_generated_blocks", "offload_finished_drafts",
                                 "offload_recompute_tail_fuzz75_0116", "offload_prompt_only_fuzz89_1035",
                                 # a trace's own prefix hashes, hashed with the token after each block
                                 "hash_units", "hash_units_40", "offload_hash_units",
                                 # a sliding-window model: the drafter's layer in the full group
                                 "hybrid_contended", "hybrid_shared_prefix", "hybrid_sessions",
                                 "hybrid_drafts_preempted"}


@pytest.mark.parametrize("case", ORACLE_CASES)
def test_kvsim_makes_vllms_eagle_decisions(case):
    """Every metric of ``compare.py`` and vLLM's draft counters exact, and the blocks in use after every step
    equal: the lookahead slots each allocate_slots holds (the same cases run as ngram differ in them)."""
    settings = json.loads((ORACLE / case / "settings.json").read_text())
    assert settings["method"] == "eagle"
    config = compare.kvsim_config(settings, ORACLE / case / "trace.csv")
    config = dataclasses.replace(config, speculative_config=json.dumps(
        {"method": "eagle", "model": "drafter", "num_speculative_tokens": settings["num_speculative_tokens"]}))
    result = run_config(config)
    ours = compare.run_metrics(result, int(round(float(result.requests["finished_s"].max()))))
    assert compare.differences(ours, compare.oracle_metrics(ORACLE / case)) == dict.fromkeys(compare.METRICS, "")
    counters = json.loads((ORACLE / case / "spec.json").read_text())
    assert {key: result.summary["spec_decoding"][key] for key in counters} == counters
    theirs = pd.read_csv(ORACLE / case / "steps.csv.gz")["used_blocks"].to_numpy()
    assert np.array_equal(result.steps["used_blocks"].to_numpy(), theirs)


def test_the_pool_holds_the_drafters_layer_as_vllm_sizes_it():
    """vLLM puts the drafter's layer in the target's KV cache group (33 layers) and divides the memory by a block
    of all of them; kvsim's slots, in blocks, equal its ``num_blocks``, and the derived H100 pool's bytes are
    the ones given to vLLM."""
    llama, h100 = get_model("llama-2-7b"), get_gpu("h100-80gb")
    pool = json.loads((ORACLE / "pool.json").read_text())
    for name, entry in pool.items():
        if "window" in entry:  # a sliding-window model's (below)
            continue
        assert entry["group_layers"] == [entry["layers"] + entry["drafter_layers"]], name
        cap = kv_capacity(llama, kv_gib=entry["available_bytes"] / GIB, drafter_layers=entry["drafter_layers"])
        assert cap.kv_tokens // 16 == entry["num_blocks"], name
    for name, layers in (("llama2_7b_h100", 0), ("llama2_7b_h100_eagle", 1)):
        assert kv_capacity(llama, h100, drafter_layers=layers).kv_bytes == pool[name]["available_bytes"]
    assert (pool["llama2_7b_h100"]["num_blocks"], pool["llama2_7b_h100_eagle"]["num_blocks"]) == (7462, 7189)


@pytest.mark.parametrize("name, speculative_config", [("gpt_oss_20b_10gib", None),
                                                      ("gpt_oss_20b_10gib_eagle", EAGLE)])
def test_a_sliding_window_models_pool_holds_the_drafters_layer_as_vllm_groups_it(name, speculative_config):
    """gpt-oss-20b's 12 sliding and 12 full layers are two groups of 12; EAGLE's full-attention layer makes 13 full
    layers, and vLLM's planner, the larger count being under 1.5 times the smaller, groups them by 13 (the sliding
    group padded): 25,206 blocks in 10 GiB instead of 27,306, as `kvsim capacity` and `kvsim run` size it."""
    from click.testing import CliRunner

    from sim.cli import main

    entry = json.loads((ORACLE / "pool.json").read_text())[name]
    kv_gib = entry["available_bytes"] / GIB
    spec = ["--speculative-config", speculative_config] if speculative_config else []
    out = CliRunner().invoke(main, ["capacity", "--model", "gpt-oss-20b", "--gpu", "h100-80gb", "--kv-gib",
                                    str(kv_gib), *spec, "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["kv_capacity_blocks"] == entry["num_blocks"]
    frame = pd.DataFrame({"arrival_time_s": [0.0], "prompt_tokens": [100], "output_tokens": [4]})
    config = SimConfig(model="gpt-oss-20b", gpu="h100-80gb", kv_gib=kv_gib, speculative_config=speculative_config,
                       spec_acceptance_rate=0.5 if speculative_config else None)
    steps = run_simulation(config, workload_from_frame(frame)).steps
    assert steps["total_blocks"].iloc[0] == entry["num_blocks"] - 1  # the null block is not usable
