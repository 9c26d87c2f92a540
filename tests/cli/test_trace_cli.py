"""`kvsim trace stats` and `kvsim trace generate`: output, JSON keys, exit code 2 on bad input."""

import json

import pytest
from click.testing import CliRunner

from sim.commands.trace import trace
from workloads import load_trace
from workloads.presets import SAMPLES_DIR


def run(*args):
    return CliRunner().invoke(trace, [str(a) for a in args])


def test_stats_json_has_the_public_keys():
    result = run("stats", SAMPLES_DIR / "AzureLLMInferenceTrace_conv.csv", "--json")
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    for key in ("rows", "duration_s", "rate_rps", "skipped_rows", "prompt_tokens", "output_tokens"):
        assert key in stats
    assert stats["rows"] == 2000 and stats["skipped_rows"] == 0
    assert set(stats["prompt_tokens"]) >= {"mean", "p50", "p99", "max"}


def test_stats_text_for_a_preset_and_a_file():
    result = run("stats", "mooncake-conv")
    assert result.exit_code == 0, result.output
    assert "prefix reuse" in result.output and "Mooncake" in result.output and "p99" in result.output


def test_stats_text_says_which_arrivals_the_simulation_times(tmp_path):
    closed, sessions = tmp_path / "closed.csv", tmp_path / "sessions.csv"
    assert run("generate", "--lengths", "fixed:prompt=100,output=50", "--arrivals", "closed:users=8,think_s=0.5",
               "--num-requests", 40, "--out", closed).exit_code == 0
    assert run("generate", "--lengths", "fixed:prompt=100,output=50", "--arrivals", "constant:rate=1",
               "--num-requests", 30, "--turns", 3, "--think-time-s", 2, "--out", sessions).exit_code == 0
    text = run("stats", closed).output
    assert "rate n/a" in text and "closed loop of 8 users, think time 0.5 s (arrival times come from the" in text
    text = run("stats", sessions).output
    assert "rate 1.111 req/s, inter-arrival CV 0.00 (the 10 rows that arrive on their own)" in text
    assert "10 sessions, 3.0 turns each on average; 20 later turns arrive when their previous turn ends" in text


def test_stats_reports_skipped_rows(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,10,5\n1,x,5\n2,10,0\n3,4,4\n")
    bad = run("stats", path)
    assert bad.exit_code == 2
    assert "line 3: field 'prompt_tokens'" in bad.output
    result = run("stats", path, "--skip-bad-rows", "--json")
    stats = json.loads(result.output)
    assert stats["rows"] == 2 and stats["skipped_rows"] == 2
    assert sum(stats["skipped_reasons"].values()) == 2


@pytest.mark.parametrize("args", [
    ("stats", "/no/such/file.csv"),
    ("stats", SAMPLES_DIR / "AzureLLMInferenceTrace_conv.csv", "--format", "mooncake"),
    ("generate", "--lengths", "fixed:prompt=1", "--arrivals", "poisson:rate=1", "--num-requests", "5",
     "--out", "x.csv"),
    ("generate", "--preset", "nope", "--out", "x.csv"),
    ("generate", "--lengths", "fixed:prompt=1,output=1", "--arrivals", "poisson:rate=1", "--num-requests", "5",
     "--out", "x.txt"),
])
def test_errors_exit_with_code_2_and_one_message_line(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run(*args)
    assert result.exit_code == 2
    assert [line for line in result.output.splitlines() if line.startswith("Error:")]


def test_generate_writes_what_it_says(tmp_path):
    out = tmp_path / "g.parquet"
    result = run("generate", "--lengths", "lognormal:prompt_mean=161,prompt_cv=1.2,output_mean=338,output_cv=1.0,"
                 "max_total=2048", "--arrivals", "poisson:rate=2", "--num-requests", "500", "--seed", "3",
                 "--n", "2", "--out", out)
    assert result.exit_code == 0, result.output
    w = load_trace(out)
    assert len(w) == 500 and (w.n == 2).all() and (w.prompt_tokens + w.output_tokens).max() <= 2048
    again = tmp_path / "h.parquet"
    run("generate", "--lengths", "lognormal:prompt_mean=161,prompt_cv=1.2,output_mean=338,output_cv=1.0,"
        "max_total=2048", "--arrivals", "poisson:rate=2", "--num-requests", "500", "--seed", "3", "--n", "2",
        "--out", again)
    assert out.read_bytes() == again.read_bytes()


def test_generate_a_preset_and_read_it_back(tmp_path):
    out = tmp_path / "p.csv"
    result = run("generate", "--preset", "alpaca-paper", "--num-requests", "300", "--rate", "4", "--out", out)
    assert result.exit_code == 0, result.output
    stats = json.loads(run("stats", out, "--json").output)
    assert stats["rows"] == 300 and stats["rate_rps"] == pytest.approx(4, rel=0.25)


def test_help_documents_the_spec_grammar():
    text = run("generate", "--help").output
    for kind in ("lognormal:", "zipf:", "empirical:", "poisson:", "gamma:", "closed:", "trace"):
        assert kind in text


def test_trace_is_registered_in_the_cli():
    from sim.cli import COMMAND_MODULES

    assert "trace" in COMMAND_MODULES


IRREGULAR = "arrival_time_s,prompt_tokens,output_tokens\n0,100,10\n0.1,100,10\n5,100,10\n"


@pytest.mark.parametrize(("lengths", "arrivals"), [
    ("fixed:prompt=200,output=100", "trace:path=irr.csv"),
    ("empirical:trace=irr.csv", "trace:rate=2"),  # the timestamps of the trace the lengths resample
])
def test_generate_refuses_more_requests_than_the_arrival_trace_has(tmp_path, monkeypatch, lengths, arrivals):
    """Guards `--arrivals trace:path=irr.csv --num-requests 8` on a 3-row trace, which looped its timestamps
    (0, 0.1, 5, 7.5, 7.6, 12.5, ...) with an invented 2.5 s gap and exit 0. It is refused as `kvsim run irr.csv
    --num-requests 8` refuses it, in one line naming the file, and writes nothing; 3 requests still work."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "irr.csv").write_text(IRREGULAR)
    result = run("generate", "--lengths", lengths, "--arrivals", arrivals, "--num-requests", 8, "--out", "g.csv")
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == [
        "Error: irr.csv: --num-requests 8 asks for more requests than the trace has (3); --arrivals trace uses "
        "each of its timestamps once"]
    assert not (tmp_path / "g.csv").exists()
    ok = run("generate", "--lengths", "fixed:prompt=200,output=100", "--arrivals", "trace:path=irr.csv",
             "--num-requests", 3, "--out", "g.csv")
    assert ok.exit_code == 0, ok.output
    assert load_trace(tmp_path / "g.csv").arrival_time_s.tolist() == [0.0, 0.1, 5.0]
