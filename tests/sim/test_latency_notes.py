"""A latency figure says when it cannot mean what its name says: a p99 of 3 requests is the slowest of them, an
empty TPOT has a reason, and a run that rejected requests says its latencies are over the rest only."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.latency_notes import latency_notes, min_requests
from sim.kernel.runner import run_simulation
from workloads import Workload


def _workload(n: int, output: int = 20) -> Workload:
    return Workload(arrival_time_s=np.arange(n, dtype=float), prompt_tokens=np.full(n, 100),
                    output_tokens=np.full(n, output))


@pytest.mark.parametrize(("quantile", "need"), [(0.99, 100), (0.5, 2)])
def test_a_percentile_needs_one_request_in_its_tail(quantile, need):
    assert min_requests(quantile) == need


def test_a_p99_of_three_requests_is_flagged_and_its_median_is_not():
    summary = run_simulation(SimConfig(step_time=0.01), _workload(3)).summary
    notes = summary["latency_notes"]
    assert list(notes) == ["ttft_p99_s"]
    assert "of only 3 requests" in notes["ttft_p99_s"] and "100" in notes["ttft_p99_s"]
    assert summary["ttft_p99_s"] is not None  # the figure stays; the note says what it is


def test_a_run_of_a_hundred_requests_has_no_notes():
    assert "latency_notes" not in run_simulation(SimConfig(step_time=0.01), _workload(100)).summary


def test_an_empty_figure_says_why():
    one_token = run_simulation(SimConfig(step_time=0.01), _workload(150, output=1)).summary
    assert one_token["tpot_p50_s"] is None
    assert list(one_token["latency_notes"]) == ["tpot_p50_s"]
    assert "second output token" in one_token["latency_notes"]["tpot_p50_s"]
    notes = latency_notes(dict.fromkeys(("normalized_latency_s_per_tok", "ttft_p50_s", "ttft_p99_s",
                                         "tpot_p50_s", "e2e_p50_s"), 0))
    assert set(notes.values()) == {"empty: no request completed"} and len(notes) == 5


def test_run_and_compare_print_the_notes_and_the_exclusion(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,100,20\n1,5000,10\n2,100,20\n")
    result = CliRunner().invoke(main, ["run", str(trace), "--max-model-len", "4096", "--step-time", "0.01",
                                       "--json"])
    assert result.exit_code == 0, result.output
    assert "ttft_p99_s" in json.loads(result.stdout)["latency_notes"]
    notes = [line for line in result.stderr.splitlines() if line.startswith("Note: paged: ")]
    assert any("over the 2 completed requests only" in line and "the 1 rejected" in line for line in notes)
    assert any(line.startswith("Note: paged: ttft_p99_s: a 99th percentile of only 2 requests") for line in notes)
    compared = CliRunner().invoke(main, ["compare", str(trace), "--allocator", "paged,contiguous-max",
                                         "--max-model-len", "4096", "--step-time", "0.01"])
    assert compared.exit_code == 0, compared.output
    for name in ("paged", "contiguous-max"):
        assert f"Note: {name}: ttft_p99_s: a 99th percentile of only 2 requests" in compared.stderr
        assert f"Note: {name}: the latency figures" in compared.stderr


def test_one_line_per_reason_not_per_figure(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,5000,10\n")
    result = CliRunner().invoke(main, ["run", str(trace), "--max-model-len", "4096", "--step-time", "0.01"])
    assert result.exit_code == 0, result.output
    empty = [line for line in result.stderr.splitlines() if "empty: no request completed" in line]
    assert empty == ["Note: paged: normalized_latency_s_per_tok, ttft_p50_s, ttft_p99_s, tpot_p50_s, e2e_p50_s: "
                     "empty: no request completed"]
    assert "over the" not in result.stderr  # nothing completed: the notes say the figures are empty
