"""Multi-turn sessions (`workloads.sessions`): the generator, the canonical ``session_id``/``turn``/
``think_time_s`` columns, their one-line errors, and prefix identity that follows the conversation."""

import numpy as np
import pytest

from workloads import TraceError, Workload, load_trace, trace_stats, write_trace
from workloads.named import generate


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_closed_loop_sessions_grow_turn_by_turn():
    w = generate("fixed:prompt=100,output=50", "constant:rate=1", 7, seed=0, turns=3, think_time_s=2.0)
    assert w.session_id.tolist() == [0, 0, 0, 1, 1, 1, 2] and w.turn.tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert w.prompt_tokens.tolist() == [100, 250, 400, 100, 250, 400, 100]  # prompt + output + new message
    assert w.arrival_time_s.tolist() == [0, 0, 0, 1, 1, 1, 2]  # later turns: released by the simulator
    np.testing.assert_array_equal(w.think_time_s, [np.nan, 2, 2, np.nan, 2, 2, np.nan])


def test_a_turn_identifies_its_prompt_and_its_output():
    """Turn k's blocks (prompt and generated tokens) are the leading blocks of turn k+1's prompt."""
    w = generate("fixed:prompt=100,output=50", "constant:rate=1", 3, seed=0, turns=3, think_time_s=0.0)
    first, second, third = (w[i].block_hashes(16) for i in range(3))
    assert (len(first), len(second), len(third)) == (150 // 16, 300 // 16, 450 // 16)
    assert second[:9] == first and third[:18] == second
    other = generate("fixed:prompt=100,output=50", "constant:rate=1", 6, seed=0, turns=3, think_time_s=0.0)
    assert other[3].block_hashes(16)[0] != first[0]  # another session shares nothing


def test_system_prompt_blocks_are_shared_across_sessions():
    w = generate("fixed:prompt=100,output=50", "constant:rate=1", 4, seed=0, turns=2, think_time_s=1.0,
                 system_prompt_len=64, system_prompt_frac=1.0)
    a, b = w[0].block_hashes(16), w[2].block_hashes(16)
    assert w.session_id.tolist() == [0, 0, 1, 1]
    assert a[:4] == b[:4] and a[4] != b[4]  # 64 tokens: 4 shared blocks, then each session's own
    assert w[1].block_hashes(16)[: len(a)] == a


def test_stats_time_only_the_rows_that_arrive_on_their_own():
    """Regression: a later turn's arrival_time_s is its session's start (it arrives when its previous turn ends,
    in the simulation), so a rate over every row counted 3 rows a second for 1 session a second."""
    w = generate("fixed:prompt=100,output=50", "constant:rate=1", 30, seed=0, turns=3, think_time_s=2.0)
    stats = trace_stats(w)
    assert stats["timed_rows"] == 10 and stats["duration_s"] == 9.0 and stats["rate_rps"] == pytest.approx(10 / 9)
    assert stats["interarrival_cv"] == 0.0
    assert (stats["sessions"], stats["released_turns"], stats["think_time_mean_s"]) == (10, 20, 2.0)
    open_loop = trace_stats(generate("fixed:prompt=100,output=50", "constant:rate=1", 30, seed=0, turns=3,
                                     turn_gap_s=5.0))
    assert open_loop["timed_rows"] == 30 and open_loop["released_turns"] == 0 and open_loop["sessions"] == 10


def test_session_trace_reads_and_counts_its_reuse(tmp_path):
    path = write(tmp_path, "s.csv", "arrival_time_s,prompt_tokens,output_tokens,session_id,turn,think_time_s\n"
                                    "0,100,50,7,0,\n0,250,50,7,1,1.5\n3,20,5,,0,\n4,400,10,7,2,\n")
    w = load_trace(path)
    assert w.session_id.tolist() == [7, 7, -1, 7] and w.turn.tolist() == [0, 1, 0, 2]
    assert w[1].think_time_s == 1.5 and w[3].think_time_s is None  # blank: arrives at its own time
    assert trace_stats(w)["prefix_reuse_share"] == pytest.approx((150 + 300) / (100 + 250 + 20 + 400))
    assert list(load_trace(write_trace(w, tmp_path / "back.jsonl"))) == list(w)


BAD_ROWS = [  # (rows after the header, line, field, problem)
    ("0,100,50,1,0,\n0,250,50,1,2,1\n", 3, "turn", "refers to a missing earlier turn"),
    ("0,100,50,1,0,\n0,250,50,2,1,1\n", 3, "turn", "refers to a missing earlier turn"),
    ("0,100,50,1,0,\n0,250,50,1,1,-2\n", 3, "think_time_s", "must be finite and >= 0"),
    ("0,100,50,1,0,\n0,250,50,1,1,1e30\n", 3, "think_time_s", r"must be <= 1e\+09 s \(about 32 years\)"),
    ("0,100,50,1,0,\n0,120,50,1,1,1\n", 3, "prompt_tokens", "shorter than the previous turn's"),
    ("0,100,50,1,0,\n0,250,50,1,0,\n", 3, "turn", "repeats an earlier row's session_id and turn"),
    ("0,100,50,1,0,3\n", 2, "think_time_s", "given on a session's first turn"),
    ("0,100,50,1,-1,\n", 2, "turn", "must be >= 0"),
    ("0,100,50,,1,\n", 2, "turn", "given without session_id"),
    # a blank turn once read as turn 0 and was blamed on a later rule (a repeat, a first turn's think time)
    ("0,100,50,1,0,\n0,250,50,1,,\n", 3, "turn", r"missing \(a session row needs its turn number\) \(add"),
    ("0,100,50,1,,2\n", 2, "turn", r"missing \(a session row needs its turn number\) \(add"),
]


@pytest.mark.parametrize("rows, line, field, problem", BAD_ROWS)
def test_bad_session_rows_name_file_line_and_field(tmp_path, rows, line, field, problem):
    path = write(tmp_path, "bad.csv", "arrival_time_s,prompt_tokens,output_tokens,session_id,turn,think_time_s\n"
                 + rows)
    with pytest.raises(TraceError, match=f"bad.csv: line {line}: field '{field}': {problem}") as error:
        load_trace(path)
    assert "\n" not in str(error.value)


def test_a_session_id_column_without_a_turn_column(tmp_path):
    """Without a turn column every row was turn 0, and a session's second row was blamed for repeating the
    first; sessions of one row each need no turn column."""
    header = "arrival_time_s,prompt_tokens,output_tokens,session_id\n"
    path = write(tmp_path, "s.csv", header + "0,100,50,a\n0,20,5,b\n0,250,50,a\n")
    for skip in (False, True):  # no row is wrong: the file lacks a column
        with pytest.raises(TraceError, match=r"^\S*s\.csv: line 4: field 'session_id': repeats an earlier row's "
                                             r"session, and the file has no turn column: a session_id column needs "
                                             r"a turn column \(each row's turn in its session: 0, 1, 2, \.\.\. in "
                                             r"file order\)$"):
            load_trace(path, skip_bad_rows=skip)
    w = load_trace(write(tmp_path, "one.csv", header + "0,100,50,a\n0,20,5,b\n1,5,5,\n"))
    assert w.turn.tolist() == [0, 0, 0] and w.session_id[0] != w.session_id[1]


def test_skipping_a_bad_turn_drops_the_turns_after_it(tmp_path):
    path = write(tmp_path, "skip.csv", "arrival_time_s,prompt_tokens,output_tokens,session_id,turn,think_time_s\n"
                 "0,100,50,1,0,\n0,250,50,1,1,-1\n0,400,50,1,2,1\n1,10,5,2,0,\n")
    w = load_trace(path, skip_bad_rows=True)
    assert w.session_id.tolist() == [1, 2] and w.trace_row.tolist() == [2, 5]  # the lines the rows were read on
    assert w.skipped_reasons == {"think_time_s: must be finite and >= 0": 1,
                                 "turn: refers to a missing earlier turn (no turn - 1 of its session_id in an "
                                 "earlier row)": 1}


def test_workload_columns_get_the_same_rules():
    base = {"arrival_time_s": np.zeros(2), "prompt_tokens": [100, 250], "output_tokens": [50, 50]}
    with pytest.raises(ValueError, match="request 1: turn: refers to a missing earlier turn"):
        Workload(**base, session_id=[1, 1], turn=[0, 2])
    with pytest.raises(ValueError, match="request 1: think_time_s: must be finite and >= 0"):
        Workload(**base, session_id=[1, 1], turn=[0, 1], think_time_s=[np.nan, -1.0])
    with pytest.raises(ValueError, match=r"request 1: think_time_s: must be <= 1e\+09 s"):
        Workload(**base, session_id=[1, 1], turn=[0, 1], think_time_s=[np.nan, 1e30])
    with pytest.raises(ValueError, match="request 0: prefix_hashes: given on a session turn"):
        Workload(**base, session_id=[1, 1], turn=[0, 1], hash_offsets=[0, 1, 1], hash_values=[5])


def test_sessions_and_closed_loop_users_do_not_mix(tmp_path):
    path = write(tmp_path, "mix.csv", "arrival_time_s,prompt_tokens,output_tokens,session_id,turn,"
                 "closed_loop_users\n0,100,50,1,0,4\n")
    with pytest.raises(TraceError, match="closed_loop_users"):
        load_trace(path)
    with pytest.raises(TraceError, match="think_time_s applies to multi-turn sessions"):
        generate("fixed:prompt=10,output=5", "constant:rate=1", 4, think_time_s=1.0)


@pytest.mark.parametrize(("options", "message"), [
    ({"turn_gap_s": 3.0}, "turn_gap_s applies to open-loop multi-turn conversations"),
    ({"turns": 2, "turn_gap_s": 3.0, "think_time_s": 1.0}, "turn_gap_s applies to open-loop"),
    ({"system_prompt_len": 50}, "system_prompt_len needs system_prompt_frac > 0"),
    ({"system_prompt_frac": 0.5}, "system_prompt_frac needs system_prompt_len > 0"),
])
def test_a_setting_that_would_change_nothing_is_refused(options, message):
    """A gap with no turns to space, a system prompt nobody carries: the user meant something, so say so
    instead of writing the workload without it."""
    with pytest.raises(TraceError, match=message):
        generate("fixed:prompt=10,output=5", "constant:rate=1", 4, **options)


def test_a_turns_system_prompt_must_be_its_previous_turns(tmp_path):
    """A turn that names its system prompt only on turn 0 shared no block with it (a turn's blocks inside the
    prefix are the group's, the rest the session's): refused with its line, and a Workload built so too."""
    header = "arrival_time_s,prompt_tokens,output_tokens,session_id,turn,think_time_s,prefix_group,prefix_len\n"
    path = write(tmp_path, "t.csv", header + "0,100,50,s,0,,sys,40\n0,180,10,s,1,1,,\n")
    with pytest.raises(TraceError, match=r"t.csv: line 3: field 'prefix_group': differs from the previous turn's "
                                         r"prefix_group or prefix_len \(a session's"):
        load_trace(path)
    assert len(load_trace(write(tmp_path, "ok.csv", header + "0,100,50,s,0,,sys,40\n0,180,10,s,1,1,sys,40\n"))) == 2
    with pytest.raises(ValueError, match="request 1: prefix_group: differs from the previous turn's"):
        Workload(arrival_time_s=np.zeros(2), prompt_tokens=np.array([100, 180]), output_tokens=np.array([50, 10]),
                 session_id=np.array([0, 0]), turn=np.array([0, 1]), think_time_s=np.array([np.nan, 1.0]),
                 prefix_group=np.array([7, 7]), prefix_len=np.array([40, 64]))
