"""A column mapping reads the file as kvsim's canonical format (seconds), not as whichever format detection
would pick from the mapped names; a timestamp-like column left unread is named in a warning; a missing
required field is named in the error."""

import json

import pytest
from click.testing import CliRunner

from sim.cli import main
from workloads import load_trace
from workloads.errors import TraceWarning

# 31 requests at 3 req/s, timestamps in seconds: the layout the issue's user had.
TEXT = "timestamp,input_len,output_len\n" + "".join(f"{i / 3:.6f},{100 + i},{10 + i}\n" for i in range(31))
SIZES = "prompt_tokens=input_len,output_tokens=output_len"


@pytest.fixture
def seconds_trace(tmp_path):
    path = tmp_path / "mytrace.csv"
    path.write_text(TEXT)
    return str(path)


def stats(*args):
    return CliRunner().invoke(main, ["trace", "stats", *args])


def test_a_mapped_trace_keeps_its_seconds(seconds_trace):
    """Guards the 3 req/s trace that read as 3,011 req/s: with the timestamp mapped, the mapping's target is
    kvsim's format, in seconds, never Mooncake's milliseconds (which detection used to pick)."""
    result = stats(seconds_trace, "--columns", f"arrival_time_s=timestamp,{SIZES}", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["rate_rps"] == pytest.approx(3.1, rel=0.01) and summary["duration_s"] == pytest.approx(10.0)
    assert "kvsim format" in summary["source"] and "Warning" not in result.output


def test_the_issues_command_names_the_missing_field_and_the_unread_timestamp(seconds_trace):
    """The issue's exact command (sizes mapped, timestamp not): a one-line error naming the field
    arrival_time_s and how to map it, and a warning naming the timestamp-like column nothing reads."""
    result = stats(seconds_trace, "--columns", SIZES)
    assert result.exit_code == 2
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("Error: ") and "field 'arrival_time_s'" in error
    assert "--columns arrival_time_s=timestamp" in error and "unknown trace format" not in error
    assert "Traceback" not in result.output


def test_another_format_is_chosen_with_trace_format(seconds_trace):
    """--trace-format still decides the units: the same file as Mooncake is read in milliseconds."""
    result = stats(seconds_trace, "--trace-format", "mooncake", "--columns", SIZES, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rate_rps"] > 1000


def test_an_unread_timestamp_column_is_a_warning(seconds_trace):
    """A format without timestamps (vidur) draws Poisson arrivals; the file's own timestamps are named on
    stderr, once, so stdout stays the JSON it was asked for."""
    result = stats(seconds_trace, "--trace-format", "vidur", "--columns",
                   "prompt_tokens=input_len,output_tokens=output_len", "--json")
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)
    warning = [line for line in result.stderr.splitlines() if line.startswith("Warning: ")]
    assert len(warning) == 1 and "'timestamp'" in warning[0] and "poisson:rate=1" in warning[0]
    with pytest.warns(TraceWarning, match="'timestamp' look like timestamps"):
        load_trace(seconds_trace, format="vidur", columns="prompt_tokens=input_len,output_tokens=output_len")


def test_run_reads_a_mapped_trace_in_seconds(seconds_trace):
    """`kvsim run` uses the same reader: the mapped trace spans its 10 s, not 10 ms."""
    result = CliRunner().invoke(main, ["run", seconds_trace, "--columns", f"arrival_time_s=timestamp,{SIZES}",
                                       "--step-time", "0.001", "--kv-tokens", "8192", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["sim_time_s"] >= 10.0
