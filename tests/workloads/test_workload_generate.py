"""Synthetic workloads: length families, arrival processes, spec strings, sharing, presets, determinism."""

import numpy as np
import pytest

from workloads import (
    PRESETS,
    TraceError,
    Workload,
    generate,
    load_preset,
    load_trace,
    trace_stats,
    write_trace,
)
from workloads.arrivals import Gamma, Poisson
from workloads.errors import TraceWarning
from workloads.named import parse_arrivals, parse_lengths
from workloads.paper_lengths import PAPER_TARGETS, capped_means, paper_lengths

RNG = np.random.default_rng


def test_length_families_sample_what_they_say():
    prompt, output = parse_lengths("fixed:prompt=7,output=9").sample(RNG(0), 5)
    assert prompt.tolist() == [7] * 5 and output.tolist() == [9] * 5
    prompt, output = parse_lengths("uniform:prompt_min=3,prompt_max=5,output_min=1,output_max=2").sample(RNG(0), 4000)
    assert set(prompt.tolist()) == {3, 4, 5} and set(output.tolist()) == {1, 2}
    prompt, output = parse_lengths("lognormal:prompt_mean=200,prompt_cv=0.5,output_mean=50,output_cv=1").sample(
        RNG(0), 200_000)
    assert prompt.mean() == pytest.approx(200, rel=0.01) and output.mean() == pytest.approx(50, rel=0.02)
    assert prompt.std() / prompt.mean() == pytest.approx(0.5, rel=0.03)
    prompt, output = parse_lengths("zipf:prompt_s=1.2,prompt_max=100,output_s=2,output_max=10").sample(RNG(0), 50_000)
    assert prompt.min() == 1 and prompt.max() <= 100 and output.max() <= 10
    assert (output == 1).mean() == pytest.approx(1 / sum(k**-2 for k in range(1, 11)), abs=0.01)


def test_cap_limits_prompt_plus_output():
    prompt, output = parse_lengths("fixed:prompt=5000,output=10,max_total=2048").sample(RNG(0), 3)
    assert prompt.tolist() == [2047] * 3 and output.tolist() == [1] * 3
    prompt, output = parse_lengths("lognormal:prompt_mean=900,prompt_cv=2,output_mean=900,output_cv=2,"
                                   "max_total=1024").sample(RNG(1), 10_000)
    assert (prompt + output).max() <= 1024 and prompt.min() >= 1 and output.min() >= 1


def test_empirical_resamples_pairs_from_a_trace():
    source = load_preset("azure-code")
    dist = parse_lengths("empirical:trace=azure-code")
    prompt, output = dist.sample(RNG(0), 1000)
    pairs = set(zip(source.prompt_tokens.tolist(), source.output_tokens.tolist(), strict=True))
    assert all(pair in pairs for pair in zip(prompt.tolist(), output.tolist(), strict=True))


def test_value_objects_hold_data_and_names_resolve_once_at_parsing():
    """Guards the untied workloads: `Empirical` and `TraceTimes` take a workload, never a name (they used to
    load presets by name themselves, an import circle); the spec parser resolves the name once; the reader
    keeps a trace's own timestamps (re-timing is the caller's ``arrivals=``)."""
    from workloads import load_trace, readers
    from workloads.arrivals import TraceTimes
    from workloads.lengths import Empirical
    from workloads.presets import SAMPLES_DIR

    source = load_preset("azure-code")
    with pytest.raises(TypeError):
        Empirical(trace="azure-code")  # type: ignore[call-arg]
    assert parse_lengths("empirical:trace=azure-code") == Empirical(source, "azure-code")
    times = parse_arrivals("trace:path=azure-code").times(RNG(0), 5)
    assert times.tolist() == TraceTimes(source=source).times(RNG(0), 5).tolist()
    path = SAMPLES_DIR / "AzureLLMInferenceTrace_conv.csv"
    read = readers.load_trace(path)
    assert "arrivals" not in read.source and read.arrival_time_s[1] > 0
    with pytest.raises(TypeError):
        readers.load_trace(path, arrivals="constant:rate=10")  # type: ignore[call-arg]
    timed = load_trace(path, arrivals="constant:rate=10")
    assert timed.arrival_time_s[:3].tolist() == [0.0, 0.1, 0.2] and "arrivals constant:rate=10" in timed.source


@pytest.mark.parametrize("name", sorted(PAPER_TARGETS))
def test_paper_presets_match_the_paper_means_after_the_cap(name):
    p_mean, _, o_mean, _ = PAPER_TARGETS[name]
    dist = paper_lengths(name)
    exact = capped_means(dist.prompt_mean, dist.prompt_cv, dist.output_mean, dist.output_cv)
    assert exact == pytest.approx((p_mean, o_mean), rel=1e-6)
    workload = load_preset(name, num_requests=100_000, seed=1)
    assert workload.prompt_tokens.mean() == pytest.approx(p_mean, rel=0.02)
    assert workload.output_tokens.mean() == pytest.approx(o_mean, rel=0.02)
    assert (workload.prompt_tokens + workload.output_tokens).max() <= 2048
    assert trace_stats(workload)["rate_rps"] == pytest.approx(1.0, rel=0.02)
    assert "Kwon" in workload.source


def test_paper_preset_defaults_to_one_hour_at_the_rate():
    assert len(load_preset("alpaca-paper", rate=2.0)) == 7200


def test_arrival_processes():
    t = Poisson(4.0).times(RNG(0), 100_000)
    gaps = np.diff(t)
    assert t[0] == 0 and gaps.mean() == pytest.approx(0.25, rel=0.02) and gaps.std() / gaps.mean() == pytest.approx(
        1, rel=0.03)
    gaps = np.diff(Gamma(2.0, 3.0).times(RNG(0), 200_000))
    assert gaps.mean() == pytest.approx(0.5, rel=0.05) and gaps.std() / gaps.mean() == pytest.approx(3, rel=0.1)
    assert parse_arrivals("constant:rate=4").times(RNG(0), 3).tolist() == [0.0, 0.25, 0.5]


def test_trace_arrivals_are_scaled_to_a_target_rate():
    azure = load_preset("azure-conv", rate=20.0)
    assert trace_stats(azure)["rate_rps"] == pytest.approx(20.0, rel=1e-9)
    w = generate("empirical:trace=azure-conv", "trace:rate=10", 1500, seed=0)  # (the shipped sample has 2,000)
    assert trace_stats(w)["rate_rps"] == pytest.approx(10.0, rel=0.05)


def test_closed_loop_is_a_marker_not_a_timeline():
    w = generate("fixed:prompt=10,output=10", "closed:users=8,think_s=2", 100, seed=0)
    assert w.closed_loop.users == 8 and w.closed_loop.think_time_s == 2 and (w.arrival_time_s == 0).all()
    with pytest.raises(TraceError, match="open-loop"):
        generate("fixed:prompt=10,output=10", "closed:users=8", 100, seed=0, turns=2)


def test_retiming_a_trace_file_names_the_file_and_says_when_a_closed_loop_gives_way(tmp_path):
    """``--arrivals trace`` on a one-row file or on a closed loop names the file and the reason; other arrivals
    replace a file's closed loop with a warning, not silently."""
    one = tmp_path / "one.csv"
    one.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,100,50\n")
    with pytest.raises(TraceError, match=r"one\.csv: --arrivals trace:rate=2: .*'one' has 1 row\(s\) that arrive "
                                         r"on their own; they need at least 2 timestamped rows"):
        load_trace(one, arrivals="trace:rate=2")
    loop = write_trace(generate("fixed:prompt=10,output=10", "closed:users=4,think_s=1", 20, seed=0),
                       tmp_path / "loop.csv")
    with pytest.raises(TraceError, match="loop.csv: --arrivals trace:rate=2: .*is a closed loop"):
        load_trace(loop, arrivals="trace:rate=2")
    with pytest.warns(TraceWarning, match=r"a closed loop \(closed:users=4,think_s=1\); --arrivals poisson:rate=2 "
                                          "replaces it"):
        w = load_trace(loop, arrivals="poisson:rate=2")
    assert w.closed_loop is None and len(w) == 20


@pytest.mark.parametrize(("spec", "what"), [
    ("poisson", "rate"), ("poisson:rate=-1", "positive"), ("poisson:rate=x", "not a float"),
    ("weibull:rate=1", "unknown kind"), ("gamma:rate=1,cv=2,foo=3", "unknown parameter"),
    ("poisson:rate", "key=value"), ("poisson:rate=1,rate=2", "twice"),
])
def test_bad_arrival_specs_are_trace_errors(spec, what):
    with pytest.raises(TraceError, match=what):
        parse_arrivals(spec)


def test_bad_length_specs_are_trace_errors():
    for spec in ("lognormal:prompt_mean=1", "uniform:prompt_min=5,prompt_max=1,output_min=1,output_max=2",
                 "fixed:prompt=1,output=1,max_total=1", "empirical:trace=/no/such/file.csv", ":x=1"):
        with pytest.raises(TraceError):
            parse_lengths(spec)


@pytest.mark.parametrize(("spec", "message"), [
    ("lognormal:prompt_mean=600,output_mean=200",
     "lognormal needs prompt_cv, output_cv (its parameters: prompt_mean, prompt_cv, output_mean, output_cv, "
     "max_total=None)"),
    ("fixed:prompt=10,output=10,prompt_cv=1", "fixed takes no prompt_cv (its parameters: "),
])
def test_a_length_spec_missing_or_borrowing_a_parameter_names_the_kinds_parameters(spec, message):
    """Not Python's "__init__() missing 2 required positional arguments": the spec's own words."""
    with pytest.raises(TraceError) as caught:
        parse_lengths(spec)
    assert message in str(caught.value) and "__init__" not in str(caught.value)


def test_same_seed_same_bytes_and_different_seed_differs(tmp_path):
    def write(seed, name):
        w = generate("lognormal:prompt_mean=161,prompt_cv=1.2,output_mean=338,output_cv=1.0,max_total=2048",
                     "gamma:rate=2,cv=3", 2000, seed, system_prompt_len=50, system_prompt_frac=0.3, turns=3,
                     turn_gap_s=5)
        return write_trace(w, tmp_path / name).read_bytes()

    for suffix in (".csv", ".jsonl", ".parquet"):
        assert write(7, f"a{suffix}") == write(7, f"b{suffix}")
    assert write(7, "c.csv") != write(8, "d.csv")


def test_sharing_options():
    lengths = "fixed:prompt=100,output=10"
    w = generate(lengths, "poisson:rate=1", 2000, seed=0, n=4)
    assert (w.n == 4).all() and all(r.num_seqs == 4 for r in w.head(5))
    w = generate(lengths, "poisson:rate=1", 2000, seed=0, beam_width=3)
    assert w[0].num_seqs == 3
    w = generate(lengths, "poisson:rate=1", 4000, seed=0, system_prompt_len=64, system_prompt_frac=0.25)
    shared = w.prefix_group == 0
    assert shared.mean() == pytest.approx(0.25, abs=0.03)
    assert (w.prompt_tokens[shared] == 164).all() and (w.prompt_tokens[~shared] == 100).all()
    first, second = (w[int(i)] for i in np.flatnonzero(shared)[:2])
    assert first.block_hashes(16) == second.block_hashes(16) and len(first.block_hashes(16)) == 4
    with pytest.raises(TraceError, match="not both"):
        generate(lengths, "poisson:rate=1", 10, n=2, beam_width=2)


def test_multi_turn_conversations_extend_earlier_turns():
    w = generate("fixed:prompt=40,output=20", "constant:rate=10", 60, seed=0, turns=3, turn_gap_s=0.25)
    first, later = w[0], w[3]  # at 10 req/s a turn is ready again after 3 arrivals (0.3 s >= 0.25 s)
    assert later.prompt_tokens == first.prompt_tokens + first.output_tokens + 40
    assert (later.session_id, later.turn, first.turn) == (first.session_id, 1, 0)
    # the first turn's 40 prompt and 20 generated tokens: 3 full blocks, all shared with the next turn
    assert len(first.block_hashes(16)) == 3 and later.block_hashes(16)[:3] == first.block_hashes(16)
    assert w[6].prompt_tokens == 40 + 20 + 40 + 20 + 40 and w[9].prompt_tokens == 40  # third turn, then new
    assert trace_stats(w)["prefix_reuse_share"] > 0.4


def test_multi_turn_respects_the_cap_by_starting_a_new_conversation():
    w = generate("fixed:prompt=400,output=300,max_total=1024", "constant:rate=1", 20, seed=0, turns=5,
                 turn_gap_s=0.5)
    assert (w.prompt_tokens + w.output_tokens).max() <= 1024


def test_preset_errors():
    with pytest.raises(TraceError, match="unknown preset"):
        load_preset("nope")
    with pytest.raises(TraceError, match="asks for more requests than the trace has"):
        load_preset("azure-code", num_requests=10**7)
    assert len(load_preset("mooncake-conv", num_requests=50)) == 50
    assert set(PRESETS) == {"sharegpt-paper", "alpaca-paper", "sharegpt-demo", "azure-code", "azure-conv",
                            "mooncake-conv", "sharegpt-etalon"}


def test_a_workload_round_trips_through_a_frame_by_the_public_names():
    """`docs/architecture.md` names `workloads.workload_to_frame` / `workload_from_frame`: they exist there."""
    import workloads

    w = workloads.generate("fixed:prompt=40,output=20", "poisson:rate=2", 12, seed=0, turns=3, think_time_s=1.0)
    back = workloads.workload_from_frame(workloads.workload_to_frame(w))
    assert np.array_equal(back.prompt_tokens, w.prompt_tokens) and np.array_equal(back.turn, w.turn)


def test_retiming_a_session_trace_draws_a_time_per_session_not_per_turn(tmp_path):
    """A session's later turns are released by the turn before them, so ``trace:rate=R`` (and ``poisson:rate=R``)
    times the rows that arrive on their own: R first turns a second, as ``trace stats`` counts the file's rate
    (one time per row made the sessions' rate R x sessions / rows, 3.3x slower here). Each turn keeps its place
    after the turn before it."""
    w = generate("fixed:prompt=100,output=20", "poisson:rate=4", 300, seed=0, turns=4, think_time_s=3.0)
    path = write_trace(w, tmp_path / "sess.csv")
    for spec in ("trace:rate=8", "poisson:rate=8"):
        timed = load_trace(path, arrivals=spec)
        stats = trace_stats(timed)
        assert stats["timed_rows"] == stats["sessions"] < len(timed) == 300
        if spec.startswith("trace"):
            assert stats["rate_rps"] == pytest.approx(8.0)
        assert (np.diff(timed.arrival_time_s) >= 0).all()
        for session in np.unique(timed.session_id):
            turns = timed.turn[timed.session_id == session]
            assert (np.diff(turns) > 0).all()  # the turns of a session still in order


def test_a_session_trace_lends_only_its_own_arrivals_to_trace_times(tmp_path):
    """``trace:path=SESSIONS`` takes the times of the rows that arrive on their own: a later turn's time is its
    session's placeholder (the simulator releases it), which made bursts of identical timestamps."""
    sessions = generate("fixed:prompt=200,output=100", "poisson:rate=1", 200, seed=0, turns=4, think_time_s=5.0)
    path = write_trace(sessions, tmp_path / "sess.csv")
    w = generate("fixed:prompt=10,output=5", f"trace:path={path}", 20, seed=0)
    own = np.sort(np.unique(sessions.arrival_time_s[sessions.turn == 0]))
    assert np.array_equal(w.arrival_time_s, own[:20] - own[0])


def test_wrong_types_to_the_api_are_one_sentence_naming_what_was_expected(tmp_path):
    """A frame where a workload or path goes, arguments swapped, a None spec: each was a library's AttributeError
    or pathlib's TypeError that said nothing of what to pass."""
    import pandas as pd

    from workloads import workload_from_frame

    w = generate("fixed:prompt=10,output=5", "poisson:rate=1", 5, seed=0)
    cases = [
        (lambda: write_trace(pd.DataFrame(), tmp_path / "x.csv"), TypeError, "write_trace(workload, path): got "
         "DataFrame and PosixPath; a frame becomes a workload with workloads.workload_from_frame(df)"),
        (lambda: write_trace(str(tmp_path / "x.csv"), w), TypeError, "got str and Workload"),
        (lambda: load_trace(pd.DataFrame()), TypeError, "load_trace: path must be a file path (str or pathlib.Path), "
         "got DataFrame"),
        (lambda: generate(None, "poisson:rate=1", 10), TraceError, "lengths: expected a spec string such as "
         "'fixed:prompt=100,output=50', or one of Fixed, Uniform, Lognormal, Zipf, Empirical, got NoneType"),
        (lambda: generate("fixed:prompt=10,output=5", {"rate": 1}, 10), TraceError, "arrivals: expected a spec "
         "string such as 'poisson:rate=2', or one of Poisson, Gamma, Constant, TraceTimes, Closed, got dict"),
        (lambda: workload_from_frame("t.csv"), TypeError, "workload_from_frame: frame must be a pandas DataFrame, got "
         "str (a file: workloads.load_trace(path))"),
    ]
    for call, kind, message in cases:
        with pytest.raises(kind) as info:
            call()
        assert message in str(info.value) and "\n" not in str(info.value)


def test_trace_arrivals_use_each_timestamp_once_and_only_real_ones(tmp_path):
    """More requests than the source has own arrivals (its gaps were repeated cyclically), a file without
    timestamps (the reader's stand-in Poisson times passed for the trace's), a rate over a head of equal
    timestamps (all arrivals stayed at 0) and the length-only preset: each one error."""
    sessions = generate("fixed:prompt=20,output=10", "poisson:rate=1", 40, seed=0, turns=4, think_time_s=1.0)
    path = write_trace(sessions, tmp_path / "sess.csv")
    timed = int((sessions.turn == 0).sum())
    with pytest.raises(TraceError, match=rf"{timed + 1} requests need {timed + 1} timestamps, and the source "
                                         rf"trace 'sess' has {timed} \(rows that arrive on their own"):
        generate("fixed:prompt=10,output=5", f"trace:path={path}", timed + 1, seed=0)
    lengths_only = tmp_path / "lengths.csv"
    lengths_only.write_text("num_prefill_tokens,num_decode_tokens\n" + "10,5\n" * 20)
    with pytest.raises(TraceError, match="spans no time \\(its timestamps are all equal, or it has none"):
        generate("fixed:prompt=10,output=5", f"trace:path={lengths_only}", 10, seed=0)
    burst = tmp_path / "burst.csv"
    burst.write_text("arrival_time_s,prompt_tokens,output_tokens\n" + "0,10,5\n" * 5 + "3,10,5\n")
    with pytest.raises(TraceError, match="the first 5 timestamps of 'burst' are all equal, so no rate"):
        generate("fixed:prompt=10,output=5", f"trace:rate=2,path={burst}", 5, seed=0)
    assert generate("fixed:prompt=10,output=5", f"trace:path={burst}", 5, seed=0).arrival_time_s.tolist() == [0] * 5
    with pytest.raises(TraceError, match="preset sharegpt-etalon has no timestamps of its own"):
        parse_arrivals("trace:path=sharegpt-etalon")


def test_prefix_reuse_counts_what_an_earlier_row_of_the_group_carried():
    """Prefix lengths may differ within a group: a row reuses at most the longest an earlier row carried (a
    radix cache at block size 1 hits 100 then 200 of the 100, 200, 200 below: 300 of 900)."""
    w = Workload(arrival_time_s=np.array([0.0, 10, 20]), prompt_tokens=np.array([300] * 3),
                 output_tokens=np.array([5] * 3), prefix_group=np.array([0] * 3), prefix_len=np.array([100, 200, 200]))
    assert trace_stats(w)["prefix_reuse_share"] == pytest.approx(300 / 900)


def test_open_loop_turns_cut_short_by_the_traces_end_warn():
    """25 requests at 1 req/s with turns 30 s apart: every arrival starts a conversation (none is ready for its
    next turn before the arrivals end), 1.0 turns of 4: said, where the help promised fewer only under
    max_total. 2,000 requests reach 3.2 turns or more, without a word."""
    with pytest.warns(TraceWarning, match=r"--turns 4: the conversations average 1.0 turns"):
        generate("fixed:prompt=10,output=5", "poisson:rate=1", 25, seed=0, turns=4)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceWarning)
        generate("fixed:prompt=10,output=5", "poisson:rate=1", 2000, seed=0, turns=4)
