"""Regressions from the review of `workloads/`: workload-wide columns checked row by row, finite think times,
one-line errors from `kvsim trace stats` for unreadable files, and the shared spec checks."""

import re

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from sim.commands.trace import trace
from workloads import TraceError, generate, load_trace, write_trace
from workloads.errors import TraceWarning
from workloads.frames import workload_from_frame
from workloads.lengths import Zipf
from workloads.named import parse_arrivals, parse_lengths
from workloads.workload import ClosedLoop, Workload

HEADER = "arrival_time_s,prompt_tokens,output_tokens"


def canonical(tmp_path, extra: str, cells: list[str]):
    """A canonical CSV with one extra workload-wide column, one row per cell."""
    path = tmp_path / "t.csv"
    rows = [f"{i},10,5,{cell}" for i, cell in enumerate(cells)]
    path.write_text("\n".join([f"{HEADER},{extra}", *rows]) + "\n")
    return path


@pytest.mark.parametrize("extra, cells, message", [
    ("prefix_hash_tokens", ["1e300"], "line 2: field 'prefix_hash_tokens': must be <= 1e+09"),
    ("prefix_hash_tokens", ["16", "abc"], "line 3: field 'prefix_hash_tokens': not a number (got 'abc')"),
    ("prefix_hash_tokens", ["16", "", "32"], "line 4: field 'prefix_hash_tokens': must be the same on every row"),
    ("prefix_hash_tokens", ["0"], "line 2: field 'prefix_hash_tokens': must be >= 1"),
    ("closed_loop_users", ["2.5"], "line 2: field 'closed_loop_users': must be a whole number"),
    ("closed_loop_users", ["1e300"], "line 2: field 'closed_loop_users': must be <= 1e+09"),
    ("think_time_s", ["3"], "field 'think_time_s': given without closed_loop_users"),
])
def test_bad_workload_wide_values_name_the_line_and_field(tmp_path, extra, cells, message):
    # before: 1e300 hash tokens was an OverflowError traceback, 2.5 users became 2, text became the default
    with pytest.raises(TraceError) as caught:
        load_trace(canonical(tmp_path, extra, cells))
    assert message in str(caught.value)
    assert "skip_bad_rows" not in str(caught.value)  # skipping rows cannot mend a workload-wide value


def test_blank_cells_of_a_workload_wide_column_are_no_value(tmp_path):
    w = load_trace(canonical(tmp_path, "prefix_hash_tokens", ["16", "", "16"]))
    assert w.prefix_hash_tokens == 16 and len(w) == 3
    assert load_trace(canonical(tmp_path, "prefix_hash_tokens", ["", ""])).prefix_hash_tokens == 512


def test_infinite_think_time_is_rejected_everywhere(tmp_path):
    # before: accepted, and a run's clock ended at infinity with NaN fractions and invalid JSON
    with pytest.raises(ValueError, match="finite think_time_s"):
        ClosedLoop(2, float("inf"))
    with pytest.raises(TraceError, match="finite think_time_s"):
        generate("fixed:prompt=10,output=5", "closed:users=2,think_s=inf", 5)
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER},closed_loop_users,think_time_s\n0,10,5,2,inf\n")
    with pytest.raises(TraceError, match="line 2: field 'think_time_s': must be finite and >= 0"):
        load_trace(path)


def test_a_closed_loop_think_time_past_the_clock_is_rejected(tmp_path):
    # before: 1e30 s was accepted, a run whose clock stopped resolving its steps
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER},closed_loop_users,think_time_s\n0,10,5,2,1e9\n1,10,5,2,1e30\n")
    with pytest.raises(TraceError, match=r"line 3: field 'think_time_s': must be <= 1e\+09 s \(about 32 years\)"):
        load_trace(path)


def test_a_workload_built_in_python_gets_the_readers_clock_bounds():
    """A think time or an arrival of 1e30 s, which a trace row may not hold, was accepted from Python: a run
    whose clock no longer resolved a step. Arrivals count from the first, as a trace's rebased times do."""
    with pytest.raises(ValueError, match=re.escape("closed loop: think_time_s must be <= 1e+09 s (about 32 years) "
                                                   "(got 1e+30)")):
        ClosedLoop(2, 1e30)
    with pytest.raises(ValueError, match=re.escape("closed loop: users must be <= 1e+09 (got 1000000000000)")):
        ClosedLoop(10**12)
    assert ClosedLoop(2, 1e9).think_time_s == 1e9
    with pytest.raises(ValueError, match=re.escape("workload 'w': request 2: arrival_time_s: more than 1e+09 s "
                                                   "(about 32 years) after the first arrival (got 1e+30)")):
        Workload(arrival_time_s=[0.0, 1.0, 1e30], prompt_tokens=[10] * 3, output_tokens=[5] * 3, name="w")
    epoch = Workload(arrival_time_s=[1.7e9, 2.7e9], prompt_tokens=[10] * 2, output_tokens=[5] * 2)
    assert len(epoch) == 2


def test_closed_loop_round_trips_through_every_container(tmp_path):
    w = generate("fixed:prompt=10,output=5", "closed:users=3,think_s=0.5", 4)
    for suffix in (".csv", ".jsonl", ".parquet"):
        back = load_trace(write_trace(w, tmp_path / f"w{suffix}"))
        assert back.closed_loop == ClosedLoop(3, 0.5)


def test_from_frame_checks_workload_wide_columns_and_names_unknown_ones():
    frame = pd.DataFrame({"arrival_time_s": [0.0, 1.0], "prompt_tokens": [10, 10], "output_tokens": [5, 5],
                          "closed_loop_users": [2, 3], "note": ["a", "b"]})
    with pytest.raises(TraceError, match="row 2: field 'closed_loop_users': must be the same on every row"), \
            pytest.warns(TraceWarning, match="'note' are not kvsim fields"):
        workload_from_frame(frame)
    with pytest.warns(TraceWarning, match="'note' are not kvsim fields"):
        w = workload_from_frame(frame.assign(closed_loop_users=[2, 2]))
    assert w.closed_loop == ClosedLoop(2) and len(w) == 2


def test_trace_stats_turns_an_os_error_into_one_line(monkeypatch, tmp_path):
    def unreadable(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "t.csv"))

    monkeypatch.setattr("workloads.load_trace", unreadable)
    result = CliRunner().invoke(trace, ["stats", str(tmp_path / "t.csv")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "Permission denied" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("spec, message", [
    ("zipf:prompt_s=nan,prompt_max=5,output_s=1,output_max=5", "prompt_s must be a positive number, got nan"),
    ("fixed:prompt=0,output=5", "prompt must be a positive number, got 0"),
])
def test_length_specs_share_the_positive_number_check(spec, message):
    with pytest.raises(TraceError, match=message):
        parse_lengths(spec)


@pytest.mark.parametrize("spec, message", [
    ("gamma:rate=1,cv=inf", "cv must be a positive number, got inf"),
    ("constant:rate=-1", "rate must be a positive number, got -1.0"),
])
def test_arrival_specs_share_the_positive_number_check(spec, message):
    with pytest.raises(TraceError, match=message):
        generate("fixed:prompt=10,output=5", spec, 3)


@pytest.mark.parametrize("spec, message", [
    # before: numpy's "ufunc 'isfinite' not supported", "high is out of bounds for int64", an OverflowError
    # traceback, or counts that wrapped negative ("prompt_tokens: must be >= 1")
    ("fixed:prompt=100000000000000000000,output=5", "prompt must be <= 1e+09 tokens, got 100000000000000000000"),
    ("fixed:prompt=1000000001,output=5", "prompt must be <= 1e+09 tokens, got 1000000001"),
    ("fixed:prompt=10,output=5,max_total=100000000000000000000",
     "max_total must be >= 2 and <= 1e+09, got 100000000000000000000"),
    ("uniform:prompt_min=1,prompt_max=100000000000000000000,output_min=1,output_max=5",
     "prompt_max must be <= 1e+09 tokens, got 100000000000000000000"),
    ("lognormal:prompt_mean=1e30,prompt_cv=1,output_mean=10,output_cv=1", "prompt_mean must be <= 1e+09 tokens, got 1e+30"),
    ("lognormal:prompt_mean=10,prompt_cv=1,output_mean=10,output_cv=1e300",
     "output_cv must be within [1e-100, 1e+100], got 1e+300"),
    ("zipf:prompt_s=1,prompt_max=100000000000000000000,output_s=1,output_max=5", "prompt_max and output_max must be <= 10^7"),
])
def test_length_specs_refuse_counts_no_trace_can_hold(spec, message):
    with pytest.raises(TraceError, match=re.escape(f"bad lengths spec {spec!r}: {message}")):
        parse_lengths(spec)


def test_the_largest_token_counts_generate_and_read_back(tmp_path):
    """A lognormal of mean 10^9 draws past 10^9 tokens: those are cut to 10^9, as draws below 1 are raised to 1,
    so the trace written reads back (a row past 10^9 is refused as corrupt)."""
    w = generate("lognormal:prompt_mean=1e9,prompt_cv=3,output_mean=10,output_cv=1", "poisson:rate=2", 200)
    assert w.prompt_tokens.max() == 10**9 and w.prompt_tokens.min() >= 1
    assert np.array_equal(load_trace(write_trace(w, tmp_path / "w.csv")).prompt_tokens, w.prompt_tokens)
    assert (generate("fixed:prompt=1000000000,output=1", "poisson:rate=2", 3).prompt_tokens == 10**9).all()


@pytest.mark.parametrize("spec, message", [
    # before: an OverflowError or a ZeroDivisionError traceback from 1 / cv**2
    ("gamma:rate=2,cv=1e200", "cv must be within [1e-100, 1e+100], got 1e+200"),
    ("gamma:rate=2,cv=1e-200", "cv must be within [1e-100, 1e+100], got 1e-200"),
    ("closed:users=2,think_s=1e30", "think_s must be <= 1e+09 s, got 1e+30"),
])
def test_arrival_specs_refuse_values_out_of_float_or_clock_range(spec, message):
    with pytest.raises(TraceError, match=re.escape(f"bad arrivals spec {spec!r}: {message}")):
        parse_arrivals(spec)


@pytest.mark.parametrize("spec, process, last", [
    # before: "arrival_time_s must be finite and sorted" (1/rate infinite), or, short of that, a run whose clock
    # rounded every step (at a rate of 1e-16 req/s the latencies came out a third of those at 1e-6)
    ("poisson:rate=1e-20", "Poisson(rate=1e-20)", "2.33e+21 s"),
    ("poisson:rate=5e-324", "Poisson(rate=5e-324)", "no finite time"),
    ("constant:rate=1e-320", "Constant(rate=1e-320)", "no finite time"),
    ("gamma:rate=1e-300,cv=1e99", "Gamma(rate=1e-300, cv=1e+99)", "no finite time"),
    ("trace:rate=1e-300,path=azure-conv", "TraceTimes(rate=1e-300)", "2e+301 s"),
])
def test_arrivals_past_the_clocks_range_are_one_error_naming_the_process(spec, process, last):
    with pytest.raises(TraceError, match=re.escape(
            f"arrivals {process}: the last of 20 requests arrives at {last}, past the 1e+09 s (about 32 years)")):
        generate("fixed:prompt=10,output=5", spec, 20)


@pytest.mark.parametrize("spec", ["poisson:rate=1e-6", "poisson:rate=1e30", "gamma:rate=2,cv=1e30",
                                  "gamma:rate=2,cv=1e-30", "constant:rate=1e300", "closed:users=2,think_s=1e9"])
def test_extreme_but_representable_arrivals_still_generate(spec):
    w = generate("fixed:prompt=10,output=5", spec, 20)
    assert len(w) == 20 and w.arrival_time_s[-1] <= 1e9


@pytest.mark.parametrize("s", [0.01, 1.0, 60.0])
def test_zipf_draws_stay_on_their_support(s):
    prompt, output = Zipf(s, 7, s, 1, max_total=None).sample(np.random.default_rng(3), 20_000)
    assert prompt.min() >= 1 and prompt.max() <= 7 and (output == 1).all()
