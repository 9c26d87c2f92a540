"""A trace whose columns have other names is read through a column-mapping override, on the command line of
`kvsim trace stats` and `kvsim run` alike; bad rows can be skipped (and counted) in `kvsim run` too."""

import json

import pytest
from click.testing import CliRunner

from sim.cli import main
from workloads import TraceError, load_trace
from workloads.specs import parse_columns

TEXT = "t,inp,out\n0.0,100,10\n0.5,200,20\n1.0,300,-1\n"
MAPPING = "arrival_time_s=t,prompt_tokens=inp,output_tokens=out"


@pytest.fixture
def odd_trace(tmp_path):
    path = tmp_path / "odd.csv"
    path.write_text(TEXT)
    return str(path)


def test_parse_columns_gives_the_mapping_and_refuses_malformed_text():
    assert parse_columns(" prompt_tokens=inp , output_tokens=out ") == {"prompt_tokens": "inp", "output_tokens": "out"}
    for bad in ("", "prompt_tokens", "prompt_tokens=", "a=b,a=c"):
        with pytest.raises(TraceError, match="column mapping"):
            parse_columns(bad)


def test_load_trace_takes_the_mapping_as_a_string(odd_trace):
    w = load_trace(odd_trace, format="kvsim", columns=MAPPING, skip_bad_rows=True)
    assert list(w.prompt_tokens) == [100, 200] and w.skipped_rows == 1


def test_trace_stats_reads_renamed_columns(odd_trace):
    result = CliRunner().invoke(main, ["trace", "stats", odd_trace, "--format", "kvsim", "--columns", MAPPING,
                                       "--skip-bad-rows", "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    assert stats["rows"] == 2 and stats["skipped_rows"] == 1 and stats["prompt_tokens"]["max"] == 200


def test_run_reads_renamed_columns_and_reports_skipped_rows(odd_trace):
    args = ["run", odd_trace, "--trace-format", "kvsim", "--columns", MAPPING, "--step-time", "0.01",
            "--kv-tokens", "4096", "--json"]
    failed = CliRunner().invoke(main, args)
    assert failed.exit_code == 2 and "line 4" in failed.output and "output_tokens" in failed.output
    result = CliRunner().invoke(main, [*args, "--skip-bad-rows"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["requests"] == 2 and summary["completed"] == 2 and summary["skipped_rows"] == 1
    assert sum(summary["skipped_reasons"].values()) == 1  # why, not only how many
    text = CliRunner().invoke(main, [a for a in args if a != "--json"] + ["--skip-bad-rows"]).output
    assert "skipped_reasons" in text and "1 x " in text


def test_trace_options_need_a_trace():
    result = CliRunner().invoke(main, ["run", "--skip-bad-rows", "--json"])
    assert result.exit_code == 2 and "trace file only" in result.output


def test_run_time_scales_a_traces_own_timestamps(tmp_path):
    """`--arrivals trace:rate=R` keeps the trace's pattern of arrivals, squeezed or stretched to R req/s; `--rate`
    and `--arrivals` together are refused."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n3,10,5\n4,10,5\n")
    base = ["run", str(path), "--step-time", "0.001", "--kv-tokens", "4096", "--out"]
    result = CliRunner().invoke(main, [*base, str(tmp_path / "out"), "--arrivals", "trace:rate=2", "--json"])
    assert result.exit_code == 0, result.output
    import pandas as pd

    arrivals = pd.read_parquet(tmp_path / "out" / "requests.parquet")["arrival_s"].tolist()
    assert arrivals == pytest.approx([0.0, 0.5, 1.5, 2.0])  # 4 requests over 2 s: the same gaps, halved
    both = CliRunner().invoke(main, [*base, str(tmp_path / "o2"), "--arrivals", "trace:rate=2", "--rate", "2"])
    assert both.exit_code == 2 and "not both" in both.output


def test_num_requests_cuts_the_trace_before_its_times_are_scaled(tmp_path):
    """`--num-requests N --arrivals trace:rate=R` runs the first N rows at R req/s, as a preset does: scaled
    first, the 4 rows kept (a dense head of a sparse trace) would run at a quarter of R."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n3,10,5\n4,10,5\n"
                    "20,10,5\n30,10,5\n40,10,5\n50,10,5\n")
    result = CliRunner().invoke(main, ["run", str(path), "--step-time", "0.001", "--kv-tokens", "4096",
                                       "--num-requests", "4", "--arrivals", "trace:rate=2",
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    import pandas as pd

    arrivals = pd.read_parquet(tmp_path / "out" / "requests.parquet")["arrival_s"].tolist()
    assert arrivals == pytest.approx([0.0, 0.5, 1.5, 2.0])


def test_a_rate_on_a_timestamped_trace_says_it_replaced_the_timestamps(tmp_path):
    """`--rate R` on a trace file draws Poisson arrivals, where a trace preset's `--rate` scales its own times:
    the run's workload source says the file's timestamps were replaced, and how to keep them."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n3,10,5\n")
    base = ["run", str(path), "--step-time", "0.001", "--kv-tokens", "4096", "--json"]
    poisson = json.loads(CliRunner().invoke(main, [*base, "--rate", "2"]).stdout)["workload_source"]
    assert poisson.endswith("replacing the file's own timestamps (--arrivals trace:rate=R keeps their pattern)")
    scaled = json.loads(CliRunner().invoke(main, [*base, "--arrivals", "trace:rate=2"]).stdout)["workload_source"]
    assert "replacing" not in scaled
