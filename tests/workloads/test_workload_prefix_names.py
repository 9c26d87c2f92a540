"""Trace columns vLLM-parity runs need: text prefix-group names and a scheduling priority."""

import pytest
from click.testing import CliRunner

from sim.cli import main
from workloads import TraceError, load_trace


def write(tmp_path, rows: str):
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s,prompt_tokens,output_tokens,prefix_group,prefix_len,priority\n" + rows)
    return path


def test_text_group_names_are_groups(tmp_path):
    """Regression: a text prefix_group ("system-a") used to become "no group" silently."""
    w = load_trace(write(tmp_path, "0,100,5,system-a,64,\n1,100,5,system-b,64,\n2,100,5,system-a,64,\n3,100,5,,,\n"
                                   "4,100,5,7,64,\n"))
    g = w.prefix_group.tolist()
    assert g[0] == g[2] and g[0] != g[1] and g[3] == -1 and g[4] == 7 and min(g[:3]) > 2**53
    assert w[0].block_hashes(16) == w[2].block_hashes(16) != w[1].block_hashes(16)
    again = load_trace(write(tmp_path, "0,100,5,system-a,64,\n"))
    assert again.prefix_group[0] == g[0]  # stable across reads and processes (no salted hash())


@pytest.mark.parametrize("cell, problem", [("-3", "must be >= 0"), ("1.5", "must be a whole number")])
def test_unreadable_groups_are_one_line_errors(tmp_path, cell, problem):
    with pytest.raises(TraceError, match=f"line 2.*prefix_group.*{problem}"):
        load_trace(write(tmp_path, f"0,100,5,{cell},64,\n"))


def test_priority_column_is_read_and_checked(tmp_path):
    w = load_trace(write(tmp_path, "0,100,5,,,2\n1,100,5,,,\n2,100,5,,,-1\n"))
    assert w.priority.tolist() == [2, 0, -1]
    with pytest.raises(TraceError, match="line 2.*priority.*whole number"):
        load_trace(write(tmp_path, "0,100,5,,,high\n"))


def test_priority_policy_runs_the_urgent_request_first(tmp_path):
    """Under --scheduling-policy priority the lower value is admitted first; FCFS keeps arrival order."""
    path = write(tmp_path, "0,3000,2,,,5\n0,3000,2,,,0\n")
    out = {}
    for policy in ("fcfs", "priority"):
        result = CliRunner().invoke(main, ["run", str(path), "--kv-tokens", "4000", "--step-time", "1", "--max-model-len", "8192",
                                           "--scheduling-policy", policy, "--json", "--out", str(tmp_path / policy),
                                           "--format", "csv"])
        assert result.exit_code == 0, result.output
        import pandas as pd

        out[policy] = pd.read_csv(tmp_path / policy / "requests.csv")["first_token_s"].tolist()
    assert out["fcfs"][0] < out["fcfs"][1] and out["priority"][1] < out["priority"][0]
