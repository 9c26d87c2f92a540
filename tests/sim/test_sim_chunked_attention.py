"""Chunked-local attention (Llama 4's) in a run: the clock's chunked layers read the keys of each token's own
chunk (a sawtooth that drops back to one key at every chunk start; the decode set's sum of it is checked beside the
window's, `tests/sim/test_sim_window_clock.py`), the decode fast-forward ends a run where a sequence starts a chunk
and stays equal to stepping, vLLM's hybrid manager frees the earlier chunks' blocks, and
runs without it where vLLM does (EAGLE or MTP drafts)."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from allocators import catalog
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import StepCostModel
from sim.kernel.replica import hybrid_kv_groups
from sim.kernel.runner import run_simulation
from sim.kernel.window_context import chunked_sum
from tests.sim.summaries import assert_fast_forward_equals_stepping, mixed_prompts
from workloads import Workload


@given(st.integers(1, 300), st.integers(0, 300), st.integers(1, 200))
def test_chunked_sum_is_the_sum_of_each_querys_keys(first, span, chunk):
    last = first + span
    assert chunked_sum(first, last, chunk) == sum((q - 1) % chunk + 1 for q in range(first, last + 1))


def chunked_model(chunk: int, layers: int | None = None):
    """Llama-3-8B's shape with chunked-local attention on ``layers`` of its 32 layers (None: every layer)."""
    return replace(catalog.MODELS["llama-3-8b"], name=f"test-chunked-{chunk}-{layers or 'all'}",
                   attention_chunk_size=chunk, chunked_attention_layers=layers)


def test_chunked_layers_read_only_their_chunk():
    """Llama 4 Scout: 36 of 48 layers read a token's chunk only, so a step's clipped context counts for 3/4 of the
    layers' reads."""
    gpu = catalog.get_gpu("h100-80gb")
    scout = StepCostModel(model=catalog.get_model("llama-4-scout-17b-16e"), gpu=gpu)
    assert scout.window_frac == 0.75
    assert scout.step_time(0, 1, 20_000, window_context=20_000 - 16_384) < scout.step_time(0, 1, 20_000)


@pytest.fixture
def chunked(monkeypatch):
    """``test-chunked``: 16 of 32 layers in chunks of 256 tokens (two KV cache groups), so prompts of 100-400
    tokens start in one chunk or two and decoders cross chunk starts mid-run (blocks of 16 make 16 a chunk)."""
    model = chunked_model(256, 16)
    monkeypatch.setitem(catalog.MODELS, model.name, model)
    return model.name


@pytest.mark.parametrize("options", [{}, {"kv_tokens": 6000}, {"max_num_batched_tokens": 256},
                                     {"async_scheduling": True}, {"prefix_caching": False}])
def test_fast_forward_equals_step_by_step_with_chunks(chunked, options):
    """Runs end where a decoder starts a chunk (the clock) or frees one (the pool); with preemptions (a small
    pool), chunked prefill, async scheduling and prefix caching off too."""
    config = SimConfig(model=chunked, gpu="h100-80gb", **({"kv_tokens": 40_000} | options))
    assert_fast_forward_equals_stepping(config, mixed_prompts())


def test_chunks_free_memory_and_time_on_long_decodes(chunked):
    """Long requests on the chunked model against the same model with full attention everywhere: its chunked
    group holds a chunk's blocks (the pool's peak use is lower) and its chunked layers read a chunk (decode steps
    are faster)."""
    w = Workload(arrival_time_s=np.zeros(8), prompt_tokens=np.full(8, 3000), output_tokens=np.full(8, 200),
                 name="long")
    ours = run_simulation(SimConfig(model=chunked, gpu="h100-80gb", kv_tokens=40_000), w)
    full = run_simulation(SimConfig(model="llama-3-8b", gpu="h100-80gb", kv_tokens=40_000), w)
    assert ours.summary["tpot_p50_s"] < full.summary["tpot_p50_s"]
    # half the layers keep a chunk (at most 256 tokens) of requests of 3,000-3,200: a little over half the blocks'
    # bytes (ours hold 16 layers, the full model's 32)
    assert ours.steps["used_blocks"].max() * 16 / 32 < 0.6 * full.steps["used_blocks"].max()


def test_eagle_drafts_run_llama_4_without_the_hybrid_manager():
    """vLLM turns its hybrid manager off for chunked-local attention with EAGLE (its chunked layers then keep every
    token, as full attention); ngram drafts keep it."""
    scout = catalog.get_model("llama-4-scout-17b-16e")
    eagle = SimConfig(model=scout.name, speculative_config='{"method": "eagle", "model": "drafter", '
                                                          '"num_speculative_tokens": 3}', spec_acceptance_rate=0.5)
    ngram = SimConfig(model=scout.name, speculative_config='{"method": "ngram", "num_speculative_tokens": 3}',
                      spec_acceptance_rate=0.5)
    assert hybrid_kv_groups(eagle, scout) == ()
    assert [g.attention for g in hybrid_kv_groups(ngram, scout)] == ["chunked_local", "full"]


def test_allocators_other_than_paged_say_they_keep_the_chunked_layers_whole():
    """vattention keeps every token in every layer: the summary says the chunked layers are kept whole; the
    contiguous slabs give them a ring of the chunk's size and say nothing."""
    w = Workload(arrival_time_s=np.zeros(4), prompt_tokens=np.full(4, 300), output_tokens=np.full(4, 20), name="w")
    summary = run_simulation(SimConfig(model="llama-4-scout-17b-16e", allocator="vattention", kv_tokens=40_000),
                             w).summary
    assert any("chunked-local attention" in note for note in summary["memory_omits"])
    assert "memory_omits" not in run_simulation(SimConfig(model="llama-4-scout-17b-16e", allocator="contiguous-max",
                                                          kv_tokens=40_000), w).summary
