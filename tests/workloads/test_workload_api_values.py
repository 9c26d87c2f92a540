"""Values the Python API once took silently as other values: a fraction truncated or rounded (``n=1.9`` ran
as 1), ``seed=None`` (a new workload on every call), a string that failed deep in a comparison. Each is now a
one-line error naming the argument, worded as a trace row's error is."""

import re

import numpy as np
import pandas as pd
import pytest

from workloads import Request, TraceError, Workload, generate, load_preset, load_trace, trace_stats
from workloads.frames import workload_to_frame
from workloads.presets import SAMPLES_DIR

LENGTHS, ARRIVALS = "fixed:prompt=200,output=100", "poisson:rate=2"
AZURE = SAMPLES_DIR / "AzureLLMInferenceTrace_conv.csv"


def exact(message: str) -> str:
    """A `pytest.raises` pattern matching ``message`` and nothing more."""
    return f"^{re.escape(message)}$"


@pytest.mark.parametrize("options, message", [
    ({"n": 1.9}, "n must be a whole number (got 1.9)"),
    ({"beam_width": 2.5}, "beam_width must be a whole number (got 2.5)"),
    ({"turns": 2.5}, "turns must be a whole number (got 2.5)"),
    ({"system_prompt_len": 100.9, "system_prompt_frac": 1.0}, "system_prompt_len must be a whole number (got 100.9)"),
    ({"system_prompt_len": 10, "system_prompt_frac": "0.5"}, "system_prompt_frac must be a number (got '0.5')"),
    ({"turns": 2, "turn_gap_s": "1"}, "turn_gap_s must be a number (got '1')"),
    ({"n": True}, "n must be a whole number (got True)"),
    ({"n": 0}, "n must be >= 1 (got 0)"),
])
def test_generate_refuses_what_it_would_truncate(options, message):
    with pytest.raises(TraceError, match=exact(f"generate: {message}")):
        generate(LENGTHS, ARRIVALS, 10, **options)


@pytest.mark.parametrize("count, message", [
    (10.5, "must be a whole number (got 10.5)"), ("100", "must be a whole number (got '100')"),
    (0, "must be >= 1 (got 0)"),
    # before: numpy's "Maximum allowed dimension exceeded", or a MemoryError traceback
    (10**20, "must be <= 1e+08 (got 100000000000000000000)"), (10**10, "must be <= 1e+08 (got 10000000000)"),
])
def test_generate_names_a_bad_request_count(count, message):
    with pytest.raises(TraceError, match=exact(f"generate: num_requests {message}")):
        generate(LENGTHS, ARRIVALS, count)


@pytest.mark.parametrize("options, message", [
    # before: "Python int too large to convert to C long" tracebacks, n = 2**63 - 1 written to a file its reader
    # refuses, a system prompt wrapped to a negative prompt, an infinite gap that left every conversation at
    # one turn, and think times that put the clock past where it resolves a step
    ({"n": 10**20}, "n must be <= 1e+06 (got 100000000000000000000)"),
    ({"n": 2**63 - 1}, "n must be <= 1e+06 (got 9223372036854775807)"),
    ({"beam_width": 10**20}, "beam_width must be <= 1e+06 (got 100000000000000000000)"),
    ({"system_prompt_len": 2**63 - 1, "system_prompt_frac": 0.5}, "system_prompt_len must be < 1e+09, the most "
     "prompt tokens a trace row may hold, to leave a token of the request's own (got 9223372036854775807)"),
    ({"turns": 3, "turn_gap_s": float("inf")}, "turn_gap_s must be >= 0 and <= 1e+09"),
    ({"turns": 3, "turn_gap_s": 1e30}, "turn_gap_s must be >= 0 and <= 1e+09"),
    ({"turns": 3, "think_time_s": 1e300}, "think_time_s must be >= 0 and <= 1e+09"),
])
def test_generate_refuses_options_no_trace_can_hold(options, message):
    with pytest.raises(TraceError, match=exact(f"generate: {message}")):
        generate(LENGTHS, ARRIVALS, 10, **options)


def test_the_largest_options_still_generate():
    w = generate(LENGTHS, ARRIVALS, 10, n=10**6)
    assert set(w.n.tolist()) == {10**6}
    # the largest system prompt leaves one token of the request's own: prompts of 10**9 tokens, as a trace row
    # may hold (10**9 was accepted and made prompts of 10**9 + 10 tokens, which no trace row may hold)
    w = generate("fixed:prompt=10,output=5", ARRIVALS, 10, system_prompt_len=10**9 - 1, system_prompt_frac=1.0)
    assert set(w.prompt_tokens.tolist()) == {10**9} and set(w.prefix_len.tolist()) == {10**9 - 1}
    w = generate(LENGTHS, ARRIVALS, 10, turns=2, think_time_s=1e9)
    assert np.nanmax(w.think_time_s) == 1e9


def test_whole_floats_and_numpy_integers_are_counts():
    w = generate(LENGTHS, ARRIVALS, np.int64(10), n=2.0, seed=np.int64(3))
    assert len(w) == 10 and set(w.n.tolist()) == {2}
    assert np.array_equal(w.arrival_time_s, generate(LENGTHS, ARRIVALS, 10, n=2, seed=3).arrival_time_s)


@pytest.mark.parametrize("seed", [None, 1.5, 1.0, "1", -1, True])
def test_a_seed_is_a_non_negative_integer(seed):
    """None is numpy's fresh entropy: a different workload on every call, against same seed, same bytes."""
    shown = repr(seed) if not isinstance(seed, float) or not seed.is_integer() else "1"
    with pytest.raises(TraceError, match=f"^generate: seed must be a non-negative integer, got {shown}$"):
        generate(LENGTHS, ARRIVALS, 5, seed=seed)
    with pytest.raises(TraceError, match=f"^preset sharegpt-demo: seed must be a non-negative integer, got {shown}$"):
        load_preset("sharegpt-demo", seed=seed)


@pytest.mark.parametrize("name", ["sharegpt-paper", "azure-conv"])
def test_load_preset_checks_its_count_and_rate(name):
    with pytest.raises(TraceError, match=rf"^preset {name}: num_requests must be a whole number \(got 100.5\)$"):
        load_preset(name, num_requests=100.5)
    with pytest.raises(TraceError, match=rf"^preset {name}: rate must be a number \(got '2'\)$"):
        load_preset(name, num_requests=10, rate="2")
    assert len(load_preset(name, num_requests=np.int64(10), rate=np.float64(2.0))) == 10
    # before: "cannot convert float infinity to integer" (a traceback from the CLI) and "... NaN to integer"
    for rate in (float("inf"), float("nan"), 0.0):
        with pytest.raises(TraceError, match=exact(f"preset {name}: rate must be a positive finite number "
                                                   f"(got {rate:g})")):
            load_preset(name, num_requests=10, rate=rate)
    with pytest.raises(TraceError, match=exact(f"preset {name}: num_requests must be <= 1e+08 (got 10000000000)")):
        load_preset(name, num_requests=10**10)


def test_a_paper_presets_hour_past_the_request_limit_asks_for_a_count():
    """An hour at the rate is the default count: at 10^6 req/s 3.6e9 requests, 27 GB that numpy failed to
    allocate (a traceback); at 1e30 "Maximum allowed dimension exceeded"."""
    with pytest.raises(TraceError, match=exact("preset sharegpt-paper: an hour at rate 1e+06 is 3.6e+09 requests, "
                                               "more than 1e+08; give --num-requests")):
        load_preset("sharegpt-paper", rate=1e6)
    assert len(load_preset("sharegpt-paper", rate=1e6, num_requests=50)) == 50
    assert len(load_preset("sharegpt-paper", rate=10)) == 36_000


@pytest.mark.parametrize("count, message", [
    (0, r"must be >= 1 \(got 0\)"), (-5, r"must be >= 1 \(got -5\)"),
    (10.5, r"must be a whole number \(got 10.5\)"),
])
def test_load_trace_checks_its_count(count, message):
    with pytest.raises(TraceError, match=f"AzureLLMInferenceTrace_conv.csv: num_requests {message}$"):
        load_trace(AZURE, num_requests=count)
    with pytest.raises(TraceError, match="seed must be a non-negative integer, got None"):
        load_trace(AZURE, seed=None)


def two(**columns):
    base = {"arrival_time_s": [0.0, 1.0], "prompt_tokens": [100, 200], "output_tokens": [10, 20]}
    return Workload(**(base | columns), name="w")


@pytest.mark.parametrize("columns, message", [
    ({"prompt_tokens": [100.9, 200.5]}, "request 0: prompt_tokens: must be a whole number (got 100.9)"),
    ({"output_tokens": [20, 0.5]}, "request 1: output_tokens: must be a whole number (got 0.5)"),
    ({"prompt_tokens": np.array([np.nan, 200.0])}, "request 0: prompt_tokens: must be a whole number (got nan)"),
    ({"n": [True, True]}, "request 0: n: must be a whole number (got True)"),
    # past int64 the cast wrapped to a negative count, then reported as below 1
    ({"prompt_tokens": np.array([100, 2 ** 64 - 1], np.uint64)}, "request 1: prompt_tokens: must be below 2**63 (got 18446744073709551615)"),
    ({"prompt_tokens": np.array([1e19, 100.0])}, "request 0: prompt_tokens: must be below 2**63 (got 1e+19)"),
    ({"max_tokens": ["50", "60"]}, "request 0: max_tokens: must be a whole number (got '50')"),
    ({"ids": [0.5, 1.5]}, "request 0: ids: must be a whole number (got 0.5)"),
])
def test_workload_columns_refuse_what_the_cast_would_change(columns, message):
    with pytest.raises(ValueError, match=exact(f"workload 'w': {message}")):
        two(**columns)


def test_workload_columns_take_whole_floats_and_objects():
    w = two(prompt_tokens=[100.0, 200.0], output_tokens=np.array([10, 20], dtype=object))
    assert w.prompt_tokens.dtype == np.int64 and w.prompt_tokens.tolist() == [100, 200]
    assert w.output_tokens.tolist() == [10, 20]


def test_head_takes_a_count_and_slices_give_workloads():
    w = generate(LENGTHS, ARRIVALS, 10)
    with pytest.raises(TraceError, match=r"^Workload.head: count must be >= 0 \(got -3\)$"):
        w.head(-3)
    with pytest.raises(TraceError, match=r"^Workload.head: count must be a whole number \(got 2.5\)$"):
        w.head(2.5)
    assert len(w.head(0)) == 0 and len(w.head(np.int64(3))) == 3 and len(w.head(50)) == 10
    part = w[2:5]
    assert isinstance(part, Workload) and part.ids.tolist() == [2, 3, 4]
    assert list(part) == list(w)[2:5] and w[::3].ids.tolist() == [0, 3, 6, 9] and len(w[8:20]) == 2
    with pytest.raises(TraceError, match=r"^Workload slice: step must be >= 1 \(got -1\)$"):
        w[::-1]
    with pytest.raises(TypeError, match="^workload indices must be integers or slices, not float$"):
        w[1.0]
    assert w[np.int64(2)] == w[2] and w[-1].id == 9


def test_trace_stats_of_nothing_and_of_a_frame_is_one_error():
    w = generate(LENGTHS, ARRIVALS, 3)
    with pytest.raises(ValueError, match="^trace_stats: workload 'synthetic' has no requests$"):
        trace_stats(w.head(0))
    with pytest.raises(TypeError, match=r"^trace_stats: workload must be a workloads.Workload, got DataFrame \(a "
                                        r"frame: workloads.workload_from_frame\(df\)"):
        trace_stats(workload_to_frame(w))
    assert isinstance(workload_to_frame(w), pd.DataFrame) and trace_stats(w)["rows"] == 3


@pytest.mark.parametrize("fields, message", [
    ({"prompt_tokens": 100.5}, "prompt_tokens: must be a whole number (got 100.5)"),
    ({"max_tokens": 20.5}, "max_tokens: must be a whole number (got 20.5)"),
    ({"n": True}, "n: must be a whole number (got True)"),
    ({"prefix_len": 50}, "prefix_len: given without prefix_group"),
])
def test_a_request_is_held_to_what_a_trace_row_is(fields, message):
    with pytest.raises(ValueError, match=exact(f"request 3: {message}")):
        Request(**({"id": 3, "arrival_time_s": 0.0, "prompt_tokens": 100, "output_tokens": 10} | fields))
    whole = Request(3, 0.0, 100.0, 10, prefix_group=0, prefix_len=50)
    assert type(whole.prompt_tokens) is int and whole.known_prefix_tokens == 50
