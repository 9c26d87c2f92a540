"""A vLLM benchmark_serving result is replayed at the times its requests were sent: ``start_times`` where the
file has them (vLLM 0.33's ``vllm bench serve`` writes them), else ``request_rate``, which a run held back by
``--max-concurrency`` or a ramp-up did not follow. Such a run read at ``request_rate`` (``inf``: all at 0)
queued every request in the simulated server, which the fit took for slow steps, without a word."""

import json

import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.measured import read_measured

ITLS = [[0.02] * 9, [0.02] * 19, [0.02] * 14, [0.02] * 11]


def _bench(tmp_path, **changes):
    data = {"request_rate": "inf", "input_lens": [100, 200, 150, 120], "output_lens": [10, 20, 15, 12],
            "ttfts": [0.05, 0.06, 0.05, 0.05], "itls": ITLS}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data | changes))
    return path


def test_start_times_are_the_arrivals(tmp_path):
    """perf_counter() readings, rebased to the first; a concurrency limit is already in them (sent after the
    wait for a slot)."""
    path = _bench(tmp_path, max_concurrency=2, start_times=[5000.0, 5000.0, 5000.25, 5000.5])
    assert read_measured(path).frame["arrival_time_s"].tolist() == [0.0, 0.0, 0.25, 0.5]


def test_a_failed_request_keeps_no_row_and_the_others_keep_their_times(tmp_path):
    path = _bench(tmp_path, start_times=[10.0, 10.5, 11.0, 11.5], errors=["", "timeout", "", ""],
                  output_lens=[10, 0, 15, 12], itls=[ITLS[0], [], ITLS[2], ITLS[3]])
    with pytest.warns(UserWarning, match="1 failed"):
        assert read_measured(path).frame["arrival_time_s"].tolist() == [0.0, 1.0, 1.5]


@pytest.mark.parametrize(("changes", "field", "shown"), [
    ({"max_concurrency": 2}, "max_concurrency", "2"),
    ({"max_concurrency": 2, "request_rate": 4.0}, "max_concurrency", "2"),
    ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 1, "ramp_up_end_rps": 8}, "ramp_up_strategy", "'linear'"),
])
def test_a_held_back_run_without_start_times_is_refused(tmp_path, changes, field, shown):
    path = _bench(tmp_path, **changes)
    result = CliRunner().invoke(main, ["calibrate", "--gpu", "a100-80gb", "--from-trace", str(path)])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"Error: {path}: top level: field '{field}' is {shown}: its requests were not sent at request_rate, and the "
        "file has no 'start_times' to say when they were (vLLM 0.33's vllm bench serve --save-result "
        "--save-detailed writes them); give a per-request CSV with each request's arrival_time_s instead"]


@pytest.mark.parametrize("limit", [None, 0, 4, 100])
def test_no_limit_or_one_no_request_waited_for_reads_at_request_rate(tmp_path, limit):
    path = _bench(tmp_path, max_concurrency=limit, request_rate=2.0)
    assert read_measured(path).frame["arrival_time_s"].tolist() == [0.0, 0.5, 1.0, 1.5]


@pytest.mark.parametrize(("starts", "message"), [
    ([1.0, 2.0], "field 'start_times' must be a list with one entry per request"),
    ("1 2 3 4", "field 'start_times' must be a list with one entry per request"),
    ([1.0, 2.0, "x", 3.0], "request 3: field 'start_times': bad value 'x' (missing or not a number)"),
    ([1.0, 2.0, True, 3.0], "request 3: field 'start_times': bad value True (missing or not a number)"),
])
def test_bad_start_times_name_the_field(tmp_path, starts, message):
    from workloads.errors import TraceError

    with pytest.raises(TraceError) as info:
        read_measured(_bench(tmp_path, start_times=starts))
    assert message in str(info.value)
