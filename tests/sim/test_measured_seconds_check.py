"""A measured per-request table whose ``arrival_time_s`` looks like milliseconds is warned about, as the trace
readers warn (`workloads.readers.seconds_check`): read as seconds it replays a thousand times slower than its
run, the server idle between requests, and the fit scores coefficients against a load the run never had."""

import warnings

import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.measured import read_measured
from workloads.errors import TraceWarning

HEADER = "arrival_time_s,prompt_tokens,output_tokens,ttft_s,e2e_s"


def _table(tmp_path, scale: float, rows: int = 120, digits: int = 0) -> str:
    """``rows`` requests at 2 req/s, their arrivals in seconds x ``scale``, latencies in seconds."""
    path = tmp_path / "measured.csv"
    body = "".join(f"{round(i / 2 * scale, digits)},{100 + i},{10 + i % 7},0.05,0.4\n" for i in range(rows))
    path.write_text(f"{HEADER}\n{body}")
    return str(path)


def test_whole_milliseconds_warn_and_are_not_converted(tmp_path):
    path = _table(tmp_path, 1000.0)
    with pytest.warns(TraceWarning, match=r"arrival_time_s: 120 requests over 59,500 s, one every 500 s on average "
                                          r"\(0.00202 req/s\), all at whole seconds: .* divide the column by 1000 "
                                          r"\(and ttft_s and e2e_s, if they are milliseconds too\)"):
        run = read_measured(path)
    assert run.frame["arrival_time_s"].iloc[-1] == 59_500.0


def test_the_calibrate_command_says_it_on_one_warning_line(tmp_path):
    path = _table(tmp_path, 1000.0)
    result = CliRunner().invoke(main, ["calibrate", "--gpu", "a100-80gb", "--kv-tokens", "100000", "--max-evals",
                                       "2", "--time-limit", "20", "--out", str(tmp_path / "cal.json"),
                                       "--from-trace", path])
    assert result.exit_code == 0, result.output
    assert result.stderr.count(f"Warning: {path}: arrival_time_s: 120 requests over 59,500 s") == 1


@pytest.mark.parametrize(("scale", "rows", "digits"), [
    (1.0, 120, 3),       # seconds, as written by a clock
    (1000.0, 60, 0),     # too few requests to call it a trace
    (100.0, 120, 0),     # a gap of 50 s: slow, but not past one request a minute
    (1000.0, 120, 3),    # fractions: milliseconds are written as whole numbers
])
def test_no_warning_where_the_rule_does_not_apply(tmp_path, scale, rows, digits):
    path = _table(tmp_path, scale + (0.0013 if digits else 0.0), rows, digits)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_measured(path)
