"""kvsim on Qwen3-Next-80B-A3B (-tp 2 on an H200, 544-token blocks) with its MTP drafter (``--speculative-config
'{"method": "mtp", "num_speculative_tokens": K}'``) and prefix caching off (``mamba_cache_mode='none'``: 1 + K
state blocks a Mamba group, the drafter's K lookahead slots in the attention group at every ``allocate_slots``)
against vLLM 0.33's own scheduler built for an MTP drafter on the same pool (``tools/vllm_oracle/gdn_driver.py
--mtp``): every engine step's running and waiting requests, prefill tokens and used blocks, `compare.py`'s
metrics and vLLM's spec decoding counters, exactly; the fast-forward makes the same decisions, audited at every
step. The same cases run with ngram drafts (no lookahead slots) differ from vLLM's in preemptions and blocks.
(Synchronous only: kvsim refuses drafts under async scheduling on a recurrent-state model.)"""

import dataclasses
import json

import pytest

from sim.kernel.config import SimConfig
from sim.kernel.replica import resolve_capacity
from tests.sim.mamba_oracle import (
    assert_decisions_are_vllms,
    assert_every_step_is_vllms,
    assert_spec_counters_are_vllms,
    differences,
    mamba,
)
from tests.sim.mamba_oracle import run as run_case
from tests.sim.vllm_oracle import ROOT, cases

DATA = ROOT / "tests" / "sim" / "data" / "vllm_oracle_gdn_mtp"
CASES = cases(DATA)
ALIGN = ROOT / "tests" / "sim" / "data" / "vllm_oracle_gdn_mtp_align"
REFERENCES = [DATA / case for case in CASES] + [ALIGN / case for case in cases(ALIGN)]
"""Prefix caching off, and on (``gdn_driver.py --mtp-align``: `tests/sim/test_sim_gdn_mtp_align_parity.py` says
what they cover and shows each rule matters)."""
QWEN3_NEXT = dict(model="qwen3-next-80b-a3b", gpu="h200", tensor_parallel=2)
DRAFTS = dict(spec_acceptance_rate=0.5)


def run(path, *, step_by_step: bool):
    return run_case(path, step_by_step=step_by_step, debug_invariants=1, **QWEN3_NEXT)


def test_the_cases_cover_contention_a_small_budget_and_shared_prefixes_with_preemptions():
    assert set(CASES) == {"gdn_none_contended_mtp_2", "gdn_none_small_budget_mtp_3", "gdn_none_shared_prefix_mtp_2"}
    for case in CASES:
        settings = json.loads((DATA / case / "settings.json").read_text())
        assert settings["method"] == "mtp" and not settings["enable_prefix_caching"], case
        assert mamba.compare.oracle_metrics(DATA / case)["preemptions"] > 0, case


@pytest.mark.parametrize("path", REFERENCES, ids=lambda path: path.name)
def test_every_step_is_vllms(path):
    slow = run(path, step_by_step=True)
    assert slow.summary["spec_decoding"]["method"] == "mtp"
    assert slow.summary["spec_decoding"]["drafter_layers"] == 1
    assert_every_step_is_vllms(slow, path)
    assert_spec_counters_are_vllms(slow, path)


@pytest.mark.parametrize("path", REFERENCES, ids=lambda path: path.name)
def test_the_fast_forward_makes_the_same_decisions(path):
    assert_decisions_are_vllms(run(path, step_by_step=False), path)


def test_ngram_drafts_without_the_lookahead_slots_are_not_vllms_mtp_run():
    """The references tell the drafter's lookahead slots apart: the contended case run as ngram preempts 27
    requests where vLLM's MTP run preempts 39."""
    from sim.kernel.runner import run_config

    case = DATA / "gdn_none_contended_mtp_2"
    settings = json.loads((case / "settings.json").read_text()) | {"method": "ngram"}
    config = mamba.kvsim_config(settings, case / "trace.csv", step_by_step=True)
    ngram = run_config(dataclasses.replace(config, **QWEN3_NEXT))
    steps, metrics = differences(ngram, case)
    assert metrics["preemptions"] == "27 vs 39" and steps["used_blocks"]


def test_what_is_not_modelled_is_refused_with_the_reason():
    """With prefix caching on a run with the MTP drafter is modelled where the gated DeltaNet layers export prefill
    checkpoints (Hopper: ``tests/sim/test_sim_gdn_mtp_align_parity.py``), refused before (an A100: Triton/FLA's
    prefill); refused too: vLLM's last-block and checkpoint drops without lookahead hashes
    (``disable_lookahead_block_hashes``), eagle on Qwen3-Next and mtp on a Mamba-2 model; `kvsim capacity` sizes
    the pool (`tests/cli/`)."""
    mtp = json.dumps({"method": "mtp", "num_speculative_tokens": 2})
    assert resolve_capacity(SimConfig(speculative_config=mtp, **DRAFTS, **QWEN3_NEXT)).drafter_layers == 1
    with pytest.raises(ValueError, match="on a GPU where they export no prefill checkpoint"):
        resolve_capacity(SimConfig(speculative_config=mtp, **DRAFTS, **QWEN3_NEXT | dict(gpu="a100-80gb",
                                                                                       tensor_parallel=4)))
    drops = json.dumps({"method": "mtp", "num_speculative_tokens": 2, "disable_lookahead_block_hashes": True})
    with pytest.raises(ValueError, match="disable_lookahead_block_hashes not modelled"):
        resolve_capacity(SimConfig(speculative_config=drops, **DRAFTS, **QWEN3_NEXT))
    eagle = json.dumps({"method": "eagle", "model": "d", "num_speculative_tokens": 2})
    with pytest.raises(ValueError, match="method 'eagle'"):
        resolve_capacity(SimConfig(speculative_config=eagle, prefix_caching=False, **DRAFTS, **QWEN3_NEXT))
    with pytest.raises(ValueError, match="method 'mtp' on nemotron-h-8b"):
        resolve_capacity(SimConfig(model="nemotron-h-8b", gpu="h100-80gb", speculative_config=mtp,
                                   prefix_caching=False, **DRAFTS))
    cap = resolve_capacity(SimConfig(speculative_config=mtp, prefix_caching=False, **DRAFTS, **QWEN3_NEXT))
    assert cap.drafter_layers == 1


def test_a_runs_pool_is_vllms_with_the_drafter_layer():
    """A run's pool from its derived capacity (token slots of 13 attention layers, `kv_capacity` with the drafter)
    is `kvsim capacity`'s and vLLM's planner's: 7,408 blocks of 544 tokens, groups of 13 layers
    (tests/allocators/data/gdn_pool.json's qwen3_next_h200_tp2_none_mtp_2)."""
    from allocators.catalog import get_model
    from sim.kernel.mamba_run import run_pool

    config = SimConfig(speculative_config=json.dumps({"method": "mtp", "num_speculative_tokens": 2}),
                       prefix_caching=False, **DRAFTS, **QWEN3_NEXT)
    pool = run_pool(config, get_model("qwen3-next-80b-a3b"), resolve_capacity(config).kv_tokens)
    assert (pool.block_size, pool.group_size, pool.attention_groups, pool.mamba_groups, pool.num_blocks) == \
        (544, 13, 1, 3, 7408)
