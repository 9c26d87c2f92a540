"""Multi-turn sessions on the command line: ``kvsim trace generate --turns --think-time-s`` writes a session
trace that ``kvsim run`` replays, and a bad session row is the usual one-line error (exit 2)."""

import json

from click.testing import CliRunner

from sim.cli import main
from workloads import load_trace


def _invoke(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_generate_sessions_then_run(tmp_path):
    out = tmp_path / "sessions.csv"
    result = _invoke(["trace", "generate", "--lengths", "fixed:prompt=100,output=50", "--arrivals",
                      "poisson:rate=1", "--num-requests", 12, "--turns", 3, "--think-time-s", 2, "--out", out])
    assert result.exit_code == 0, result.output
    w = load_trace(out)
    assert w.turn.tolist()[:3] == [0, 1, 2] and w.think_time_s[1] == 2.0
    result = _invoke(["run", out, "--kv-tokens", 20000, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["cached_prompt_tokens"] == 4 * (144 + 288)  # 4 sessions of 3 turns, every full block hit


def test_bad_session_rows_are_one_line_errors(tmp_path):
    header = "arrival_time_s,prompt_tokens,output_tokens,session_id,turn,think_time_s\n"
    cases = {"missing.csv": ("0,100,50,1,0,\n1,250,50,1,2,1\n", "line 3: field 'turn': refers to a missing "
                             "earlier turn"),
             "think.csv": ("0,100,50,1,0,\n1,250,50,1,1,-0.5\n", "line 3: field 'think_time_s': must be finite "
                           "and >= 0")}
    for name, (rows, message) in cases.items():
        path = tmp_path / name
        path.write_text(header + rows)
        for command in (["run", path, "--kv-tokens", 20000], ["trace", "stats", path]):
            result = _invoke(command)
            assert result.exit_code == 2, result.output
            assert result.output.startswith("Error: ") and result.output.count("\n") == 1
            assert f"{name}: {message}" in result.output


def test_turns_per_session_count_only_rows_in_a_session(tmp_path):
    """A trace may mix sessions with single requests: one session of two turns among two single requests is
    2.0 turns a session, not 4 rows over 1 session."""
    path = tmp_path / "mixed.csv"
    path.write_text("arrival_time_s,prompt_tokens,output_tokens,session_id,turn,think_time_s\n"
                    "0,100,50,0,0,\n1,300,50,0,1,1\n2,100,50,,,\n3,100,50,,,\n")
    result = _invoke(["trace", "stats", path])
    assert result.exit_code == 0, result.output
    assert "1 sessions, 2.0 turns each on average" in result.output
