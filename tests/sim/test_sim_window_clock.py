"""The clock of a model with sliding windows: its window layers read (and attend to) at most the window's last
tokens, so a long-context step costs less than full attention over every layer (chunked-local layers: the keys
of a token's own chunk, `tests/sim/test_sim_chunked_attention.py`). Checked: the clipped sums
against brute force, the decode set's clipped context through joins, syncs, deferrals and departures, the
step time term by term, and the fast-forward (which ends a run where a sequence leaves the window) equal to
stepping one step at a time."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocators import catalog
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import StepCostModel
from sim.kernel.decode_set import DecodeSet
from sim.kernel.runner import run_simulation
from sim.kernel.window_context import attended, clipped_sum
from tests.sim.summaries import assert_fast_forward_equals_stepping, mixed_prompts
from tests.soak import examples
from workloads import Workload


@given(st.integers(1, 300), st.integers(0, 300), st.integers(1, 200))
def test_clipped_sum_is_the_sum_of_the_clipped_terms(first, span, window):
    last = first + span
    assert clipped_sum(first, last, window) == sum(min(q, window) for q in range(first, last + 1))


@pytest.mark.parametrize("chunked", [False, True])
@settings(max_examples=examples(200), deadline=None)
@given(st.integers(1, 64), st.lists(st.tuples(st.sampled_from("jlrdsa"), st.integers(0, 7), st.integers(1, 90)),
                                    max_size=60))
def test_the_clipped_context_follows_every_change(chunked, window, ops):
    """Against a model that keeps every sequence's synced tokens and sync step: ``sum min(c + 1, W)`` with
    ``c = tokens + step - g0`` (the fed token included), after joins, syncs, deferrals, departures, steps and
    accepted speculative drafts (`DecodeSet.advance`: pending tokens as if appended in earlier steps); with
    ``chunked`` (Llama 4's chunked-local attention, chunks of ``W``) ``sum (c mod W) + 1``, every sequence growing
    until the next step at which one starts a chunk."""
    decode = DecodeSet(lazy=True, window=window, chunked=chunked)
    truth: dict[int, list[int]] = {}  # seq id -> [tokens, g0]

    def at(s: int) -> int:
        return sum(attended(t + s - g0 + 1, window, chunked) for t, g0 in truth.values())

    step = 0
    for op, seq, value in ops:
        if op == "j" and seq not in truth:
            decode.join(seq, value, 3, step + 1)
            truth[seq] = [value, step + 1]
        elif op == "l" and seq in truth:
            decode.leave(seq)
            del truth[seq]
        elif op == "r" and seq in truth and truth[seq][1] <= step:  # a sync at this step, as the scheduler's
            added = step - truth[seq][1] + 1
            decode.resync(seq, added, 3, step + 1)
            truth[seq] = [truth[seq][0] + added, step + 1]
        elif op == "d" and seq in truth:
            decode.defer(seq)
            truth[seq][1] += 1
        elif op == "a" and seq in truth:
            decode.advance(seq, value % 21)
            truth[seq][1] -= value % 21
        elif op == "s":
            step += value % 5
        assert decode.window_context(step) == at(step)
        assert all(decode.window_of(seq, step) == attended(t + step - g0 + 1, window, chunked)
                   for seq, (t, g0) in truth.items())
        (clipped, inside), exit_step = decode.window_run(step)
        assert clipped == at(step)
        assert inside == sum(1 for t, g0 in truth.values() if chunked or t - g0 + step < window)  # still growing
        if exit_step is not None:  # linear up to the next exit
            assert exit_step > step
            assert at(exit_step - 1) == clipped + inside * (exit_step - 1 - step)


def window_model(window: int | None, layers: int | None = None):
    """Llama-3-8B's shape with a sliding window on ``layers`` of its 32 layers (None: every layer)."""
    return replace(catalog.MODELS["llama-3-8b"], name=f"test-window-{window}-{layers or 'all'}", sliding_window=window,
                   sliding_window_layers=layers)


def test_window_layers_read_only_the_window():
    """24 of 32 layers windowed at 1,024 tokens: a decode step over 8,000 context tokens reads
    8 / 32 x 8,000 + 24 / 32 x 1,024 tokens' KV and pairs as many keys; below the window nothing changes."""
    gpu = catalog.get_gpu("h100-80gb")
    full = StepCostModel(model=window_model(None), gpu=gpu)
    windowed = StepCostModel(model=window_model(1024, 24), gpu=gpu)
    assert windowed.window_frac == 0.75 and full.window_frac == 0.0
    effective = 8000 - 0.75 * (8000 - 1024)
    assert windowed.step_time(0, 1, 8000, window_context=1024) == pytest.approx(full.step_time(0, 1, effective))
    assert windowed.step_time(0, 1, 8000, window_context=1024) < full.step_time(0, 1, 8000)
    assert windowed.step_time(0, 4, 900, window_context=900) == full.step_time(0, 4, 900)
    assert windowed.step_time(0, 1, 8000) == full.step_time(0, 1, 8000)  # no clipped figure given: full


def test_a_decode_run_prices_the_clipped_context_in_closed_form():
    gpu = catalog.get_gpu("h100-80gb")
    cost = StepCostModel(model=window_model(512, 24), gpu=gpu)
    n, c0, k, window = 6, 2400, 40, (1500, 2)  # two sequences still inside the window, growing by one a step
    steps = [cost.step_time(0, n, c0 + n * j, window_context=1500 + 2 * j) for j in range(k)]
    total, weighted = cost.decode_run(n, c0, k, window)
    assert total == pytest.approx(sum(steps), rel=1e-12)
    assert weighted == pytest.approx(sum(j * t for j, t in enumerate(steps)), rel=1e-12)
    prefix = cost.decode_prefix(n, c0, window)
    assert prefix(17) == pytest.approx(sum(steps[:17]), rel=1e-12)


@pytest.fixture
def windowed(monkeypatch):
    """``test-window``: every layer windowed at 200 tokens (as Mistral-7B at 4,096), so prompts of 100-400
    tokens start inside and outside the window and decoders leave it mid-run."""
    model = window_model(200)
    monkeypatch.setitem(catalog.MODELS, model.name, model)
    return model.name



@pytest.mark.parametrize("options", [{}, {"kv_tokens": 6000}, {"max_num_batched_tokens": 256}])
def test_fast_forward_equals_step_by_step_with_windows(windowed, options):
    """Runs end where a decoder leaves the window; with preemptions (a small pool) and chunked prefill too."""
    config = SimConfig(model=windowed, gpu="h100-80gb", **({"kv_tokens": 40_000} | options))
    assert_fast_forward_equals_stepping(config, mixed_prompts())


def test_windows_make_long_decodes_faster(windowed):
    w = Workload(arrival_time_s=np.zeros(8), prompt_tokens=np.full(8, 3000), output_tokens=np.full(8, 200),
                 name="long")
    windowed_run = run_simulation(SimConfig(model=windowed, gpu="h100-80gb", kv_tokens=40_000), w)
    full_run = run_simulation(SimConfig(model="llama-3-8b", gpu="h100-80gb", kv_tokens=40_000), w)
    assert windowed_run.summary["tpot_p50_s"] < full_run.summary["tpot_p50_s"]
