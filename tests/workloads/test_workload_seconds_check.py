"""A kvsim trace whose ``arrival_time_s`` holds milliseconds read as a trace 1,000 times slower without a word:
now a warning says so when the numbers make it likely (`workloads.readers.seconds_check`), and the run's
summary states the offered rate (``offered_rate_req_s``) beside the throughput, whatever the rule decides."""

import json
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from sim.cli import main
from workloads import load_trace
from workloads.errors import TraceWarning
from workloads.readers.seconds_check import MAX_MEAN_GAP_S, MIN_TIMED_ROWS

HEADER = "arrival_time_s,prompt_tokens,output_tokens"


def trace(tmp_path, times, name="t.csv"):
    """A kvsim trace of 8-token prompts and 2-token outputs at ``times``."""
    path = tmp_path / name
    path.write_text(HEADER + "\n" + "".join(f"{t},8,2\n" for t in times))
    return path


def read_quietly(path, **options):
    """The workload and the `TraceWarning` texts its reading gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        workload = load_trace(path, **options)
    return workload, [str(w.message) for w in caught if issubclass(w.category, TraceWarning)]


def milliseconds(n: int = 120, rate: float = 4.0) -> list[int]:
    """``n`` arrivals at ``rate`` req/s, written in whole milliseconds."""
    return [round(i * 1000 / rate) for i in range(n)]


def test_milliseconds_in_arrival_time_s_are_warned_of_and_read_unchanged(tmp_path):
    workload, said = read_quietly(trace(tmp_path, milliseconds()))
    assert workload.arrival_time_s[-1] == 119 * 250  # not converted: the unit is not kvsim's to guess
    assert len(said) == 1
    assert "t.csv: arrival_time_s: 120 requests over 29,750 s, one every 250 s on average" in said[0]
    assert "(4.03 req/s)" in said[0] and "divide the column by 1000" in said[0]


@pytest.mark.parametrize("times", [
    [i * 0.25 for i in range(200)],  # seconds at 4 req/s: the usual trace
    [i * 90.5 for i in range(200)],  # slow, but fractional: a clock's seconds, not milliseconds
    [i * 250 for i in range(MIN_TIMED_ROWS - 1)],  # too few requests to call it a trace
    [i * int(MAX_MEAN_GAP_S) for i in range(200)],  # one a minute exactly: not over the limit
])
def test_traces_the_rule_leaves_alone(tmp_path, times):
    assert read_quietly(trace(tmp_path, times))[1] == []


def test_no_warning_where_the_times_are_replaced_or_rescaled(tmp_path):
    """--arrivals replaces the file's times, trace:rate=R rescales them, empirical lengths read none: their unit
    does not matter there."""
    path = trace(tmp_path, milliseconds())
    assert read_quietly(path, arrivals="poisson:rate=2")[1] == []
    assert read_quietly(path, arrivals="trace:rate=2")[1] == []
    from workloads import generate

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        generate(f"empirical:trace={path}", "poisson:rate=1", 10)
    assert not [w for w in caught if issubclass(w.category, TraceWarning)]


def test_the_cli_warns_and_the_summary_states_the_offered_rate(tmp_path):
    path = trace(tmp_path, milliseconds(), name="ms.csv")
    result = CliRunner().invoke(main, ["run", str(path), "--kv-tokens", "4096", "--step-time", "0.01", "--json"])
    assert result.exit_code == 0, result.output
    assert "Warning: " in result.stderr and "ms.csv: arrival_time_s: 120 requests" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["arrival_span_s"] == 29_750.0
    assert summary["offered_rate_req_s"] == pytest.approx(120 / 29_750)
    seconds = trace(tmp_path, np.arange(120) * 0.25, name="s.csv")
    result = CliRunner().invoke(main, ["run", str(seconds), "--kv-tokens", "4096", "--step-time", "0.01", "--json"])
    assert "Warning" not in result.stderr
    assert json.loads(result.stdout)["offered_rate_req_s"] == pytest.approx(120 / 29.75)


def test_trace_stats_reads_the_same_rate_as_the_summary(tmp_path):
    path = trace(tmp_path, milliseconds())
    result = CliRunner().invoke(main, ["trace", "stats", str(path), "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    assert (stats["duration_s"], stats["rate_rps"]) == (29_750.0, pytest.approx(120 / 29_750))
