"""Rows ``--skip-bad-rows`` dropped are counted and reported by every command that reads the trace, in its
text output as in its JSON (audit: `kvsim compare` said so only with --json, `kvsim slo` nowhere)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.commands.sweep import skipped_rows_lines, skipped_rows_text

# five data lines: two good, one text prompt, one with an extra field, one with output_tokens -1
MIXED_BAD = ("arrival_time_s,prompt_tokens,output_tokens\n0,100,50\n1,abc,50\n2,100,50,3\n3,100,-1\n"
             "4,100,50\n")
REASONS = ("1 x line: wrong number of fields; 1 x output_tokens: must be >= 1; "
           "1 x prompt_tokens: missing or not a number")


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "mixed_bad.csv"
    path.write_text(MIXED_BAD)
    return path


def _invoke(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_run_reports_the_rows_in_the_notation_the_others_reuse(trace):
    # the reference: `kvsim run`'s summary table
    result = _invoke(["run", trace, "--skip-bad-rows"])
    assert result.exit_code == 0, result.output
    lines = {line.split(maxsplit=1)[0]: line.split(maxsplit=1)[1] for line in result.stdout.splitlines()}
    assert lines["skipped_rows"] == "3" and lines["skipped_reasons"] == REASONS


def test_compare_text_says_how_many_rows_were_skipped_and_why(trace):
    result = _invoke(["compare", trace, "--skip-bad-rows", "--allocator", "paged,radix"])
    assert result.exit_code == 0, result.output
    assert f"skipped rows of {trace}: 3 ({REASONS})" in result.stdout.splitlines()
    summaries = json.loads(_invoke(["compare", trace, "--skip-bad-rows", "--allocator", "paged,radix",
                                    "--json"]).stdout)
    assert [s["skipped_rows"] for s in summaries] == [3, 3]


def test_compare_without_skip_bad_rows_adds_no_line(tmp_path):
    clean = tmp_path / "ok.csv"
    clean.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,100,50\n")
    result = _invoke(["compare", clean, "--allocator", "paged"])
    assert result.exit_code == 0, result.output
    assert "skipped rows" not in result.stdout


SLO = ["slo", "--skip-bad-rows", "--allocator", "paged", "--workers", "1", "--quiet", "--ttft-p99", "1",
       "--rate-max", "4"]


def test_slo_reports_skipped_rows_in_text_json_and_out_table(trace, tmp_path):
    out = tmp_path / "slo.csv"
    text = _invoke([*SLO, "--trace", trace, "--out", out])
    assert text.exit_code == 0, text.output
    assert f"skipped rows of {trace}: 3 ({REASONS})" in text.stdout.splitlines()
    table = pd.read_csv(out)
    assert table["skipped_rows"].tolist() == [3]
    assert sum(json.loads(table["skipped_reasons"][0]).values()) == 3
    records = json.loads(_invoke([*SLO, "--trace", trace, "--json"]).stdout)
    assert records[0]["skipped_rows"] == 3
    assert json.loads(records[0]["skipped_reasons"])["prompt_tokens: missing or not a number"] == 1


def test_sweep_text_reports_skipped_rows_once_per_trace(trace, tmp_path):
    out = tmp_path / "sw.csv"
    args = ["sweep", "--trace", trace, "--skip-bad-rows", "--allocator", "paged,radix", "--workers", "1",
            "--quiet", "--out", out]
    for _ in range(2):  # a rerun (every point already done) still says so, from the stored table
        result = _invoke(args)
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines()[1:] == [f"skipped rows of {trace}: 3 ({REASONS})"]


def test_plan_text_reports_skipped_rows(trace):
    result = _invoke(["plan", "--trace", trace, "--skip-bad-rows", "--workers", "1", "--quiet", "--ttft-p99",
                      "1", "--max-replicas", "2"])
    assert result.exit_code == 0, result.output
    assert f"skipped rows of {trace}: 3 ({REASONS})" in result.stdout.splitlines()


def test_skipped_rows_lines_reads_table_values_as_a_store_gives_them():
    rows = [
        {"trace": "a.csv", "skip_bad_rows": np.bool_(True), "skipped_rows": np.int64(2),
         "skipped_reasons": json.dumps({"x: bad": 2})},
        {"trace": "a.csv", "skip_bad_rows": True, "skipped_rows": 2, "skipped_reasons": {"x: bad": 2}},
        {"trace": "b.csv", "skip_bad_rows": True, "skipped_rows": pd.NA},  # a failed point: no summary
        {"trace": "c.csv", "skip_bad_rows": True, "skipped_rows": float("nan")},
        {"trace": "d.csv", "skip_bad_rows": "True", "skipped_rows": 0, "skipped_reasons": "{}"},
        {"trace": "e.csv", "skip_bad_rows": False, "skipped_rows": 0, "skipped_reasons": "{}"},
    ]
    assert skipped_rows_lines(rows) == ["skipped rows of a.csv: 2 (2 x x: bad)", "skipped rows of d.csv: 0"]
    assert skipped_rows_text(1, None) == "1"
    assert skipped_rows_text(1, "not json") == "1 (not json)"
