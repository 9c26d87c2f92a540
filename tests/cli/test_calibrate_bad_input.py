"""`kvsim calibrate --from-trace` on broken measured runs: one ``Error:`` line naming the file, row and field
(never a traceback, never a message without the file), and requests left out counted, not dropped."""

import json
import warnings

import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.measured import read_measured

HEADER = "arrival_time_s,prompt_tokens,output_tokens,ttft_s,e2e_s"
GOOD_ROWS = "0.0,482,59,0.0782,1.2582\n0.5,438,63,0.0738,1.3338\n1.0,70,43,0.0370,0.8970\n"
ITLS = [[0.02] * 9, [0.02] * 19, [0.02] * 14, [0.02] * 11]


def _bench(**changes) -> str:
    """A vLLM benchmark_serving --save-result JSON of four requests, with ``changes`` applied."""
    data = {"request_rate": 2.0, "input_lens": [100, 200, 150, 120], "output_lens": [10, 20, 15, 12],
            "ttfts": [0.05, 0.06, 0.05, 0.05], "itls": ITLS}
    return json.dumps(data | changes)


def _request(start: float, **changes) -> dict:
    return {"start_time": start, "first_token_time": start + 0.05, "end_time": start + 0.5, "prompt_tokens": 100,
            "output_tokens": 10} | changes


def _guidellm(requests: dict, strategy: dict | None = None) -> str:
    bench = {"requests": requests} | ({"args": {"strategy": strategy}} if strategy else {})
    return json.dumps({"benchmarks": [bench]})


def _calibrate(tmp_path, name: str, text: str, *extra):
    path = tmp_path / name
    path.write_text(text)
    args = ["calibrate", "--model", "llama-3-8b", "--gpu", "a100-80gb", "--kv-tokens", "100000", "--max-evals", "2",
            "--time-limit", "20", "--out", str(tmp_path / "cal.json"), "--from-trace", str(path), *extra]
    return CliRunner().invoke(main, args)


def _one_line_error(result, *expected: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "Warning" not in result.output, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for part in expected:
        assert part in lines[0], (part, lines[0])
    return lines[0]


@pytest.mark.parametrize("name,text,expected", [
    # tracebacks before (IndexError, TypeError, AttributeError)
    ("m_hdr.csv", HEADER + "\n", ["m_hdr.csv: no requests to fit"]),
    ("bs_empty.json", _bench(input_lens=[], output_lens=[], ttfts=[], itls=[]), ["bs_empty.json: no requests"]),
    ("bs_ttft_none.json", _bench(ttfts=[None, 0.06, 0.05, 0.05]),
     ["bs_ttft_none.json: request 1: field 'ttfts': bad value None (missing or not a number)"]),
    ("bs_ttft_list.json", _bench(ttfts=[[0.1], 0.06, 0.05, 0.05]), ["request 1: field 'ttfts': bad value [0.1]"]),
    ("bs_itl_str.json", _bench(itls=[["a"], [0.02], [0.02], [0.02]]),
     ["bs_itl_str.json: request 1: field 'itls[0]': bad value 'a'"]),
    ("bs_itl_notlist.json", _bench(itls=[ITLS[0], 0.02, ITLS[2], ITLS[3]]),
     ["request 2: field 'itls': bad value 0.02 (must be a list of seconds)"]),
    ("gl_bench_dict.json", json.dumps({"benchmarks": {"a": 1}}),
     ["gl_bench_dict.json: top level: field 'benchmarks': bad value {'a': 1} (must be a list of benchmarks)"]),
    ("gl_bench_str.json", json.dumps({"benchmarks": "x"}), ["field 'benchmarks': bad value 'x'"]),
    ("gl_bench_notdict.json", json.dumps({"benchmarks": [5]}),
     ["gl_bench_notdict.json: benchmarks[0]: must be an object (one benchmark), got 5"]),
    ("gl_req_notdict.json", json.dumps({"benchmarks": [{"requests": {"successful": [5]}}]}),
     ["gl_req_notdict.json: benchmarks[0].requests.successful[0]: must be an object (one request), got 5"]),
    # messages that named no file, row or field
    ("m_empty.csv", "", ["m_empty.csv: empty file"]),
    ("m_extra.csv", f"{HEADER}\n{GOOD_ROWS}3,100,10,0.1,0.5,9\n", ["m_extra.csv: line 5: 6 fields, the header names 5"]),
    ("m_warm_str.csv", f"{HEADER},warmup\n0,100,10,0.1,0.5,yes\n1,100,10,0.1,0.5,0\n2,100,10,0.1,0.5,0\n",
     ["m_warm_str.csv: row 1: field 'warmup': bad value 'yes' (must be 0/1 or true/false)"]),
    ("m_warm_nan.csv", f"{HEADER},warmup\n0,100,10,0.1,0.5,\n1,100,10,0.1,0.5,0\n2,100,10,0.1,0.5,0\n",
     ["m_warm_nan.csv: row 1: field 'warmup'"]),
    ("m_prefix.csv", f"{HEADER},prefix_group,prefix_len\n0,100,10,0.1,0.5,1,50\n1,100,10,0.1,0.5,-1,0\n",
     ["m_prefix.csv: row 2: field 'prefix_group': bad value -1"]),
    ("m_prefix2.csv", f"{HEADER},prefix_group,prefix_len\n0,100,10,0.1,0.5,1,500\n1,100,10,0.1,0.5,,\n",
     ["m_prefix2.csv: row 1: field 'prefix_len': bad value 500 (must be <= prompt_tokens"]),
    ("m_plen.csv", f"{HEADER},prefix_group,prefix_len\n0,100,10,0.1,0.5,1,50\n1,100,10,0.1,0.5,1,x\n",
     ["m_plen.csv: row 2: field 'prefix_len': bad value 'x'"]),
    ("bs_rate_str.json", _bench(request_rate="fast"),
     ["bs_rate_str.json: top level: field 'request_rate': bad value 'fast'"]),
    ("gl_rate_str.json", _guidellm({"successful": [_request(0), _request(1)]}, {"type_": "constant", "rate": "fast"}),
     ["gl_rate_str.json: benchmarks[0]: field 'args.strategy.rate': bad value 'fast'"]),
    # a multi-turn session's turns, by the trace readers' rules (`workloads.sessions`)
    ("s_missing.csv", f"{HEADER},session_id,turn\n0,100,10,0.1,0.5,7,0\n1,100,10,0.1,0.5,,\n2,200,10,0.1,0.5,7,2\n",
     ["s_missing.csv: row 3: field 'turn': bad value 2 (refers to a missing earlier turn"]),
    ("s_short.csv", f"{HEADER},session_id,turn\n0,100,10,0.1,0.5,chat-a,0\n1,100,10,0.1,0.5,chat-a,1\n",
     ["s_short.csv: row 2: field 'prompt_tokens': bad value 100 (shorter than the previous turn's prompt_tokens + "
      "output_tokens)"]),
    ("s_repeat.csv", f"{HEADER},session_id,turn\n0,100,10,0.1,0.5,7,0\n1,200,10,0.1,0.5,7,0\n",
     ["s_repeat.csv: row 2: field 'turn': bad value 0 (repeats an earlier row's session_id and turn)"]),
    ("s_blank.csv", f"{HEADER},session_id,turn\n0,100,10,0.1,0.5,7,0\n1,200,10,0.1,0.5,7,\n",
     ["s_blank.csv: row 2: field 'turn'", "(missing (a session row needs its turn number))"]),
    ("s_text.csv", f"{HEADER},session_id,turn\n0,100,10,0.1,0.5,7,0\n1,200,10,0.1,0.5,7,x\n",
     ["s_text.csv: row 2: field 'turn': bad value 'x' (must be a whole number"]),
    ("s_lone.csv", f"{HEADER},session_id,turn\n0,100,10,0.1,0.5,,1\n1,200,10,0.1,0.5,,\n",
     ["s_lone.csv: row 1: field 'turn': bad value 1 (given without session_id)"]),
    ("s_neg.csv", f"{HEADER},session_id,turn\n0,100,10,0.1,0.5,-3,0\n1,200,10,0.1,0.5,,\n",
     ["s_neg.csv: row 1: field 'session_id': bad value -3 (must be a whole number >= 0, a session name"]),
    ("s_prefix.csv", f"{HEADER},session_id,turn,prefix_group,prefix_len\n0,100,10,0.1,0.5,7,0,1,50\n"
     "1,200,10,0.1,0.5,7,1,,\n", ["s_prefix.csv: row 2: field 'prefix_group'", "(differs from the previous turn's"]),
    ("s_no_turn.csv", f"{HEADER},session_id\n0,100,10,0.1,0.5,7\n1,200,10,0.1,0.5,7\n",
     ["s_no_turn.csv: column session_id without turn: a multi-turn session needs both"]),
    # a request's parallel samples and beams (vLLM's n and beam_width), as the trace readers check them
    ("m_n_frac.csv", f"{HEADER},n\n0,100,10,0.1,0.5,3\n1,100,10,0.1,0.5,2.5\n",
     ["m_n_frac.csv: row 2: field 'n': bad value 2.5 (must be a whole number from 1 to 1e+06, or blank for "
      "1)"]),
    ("m_n_zero.csv", f"{HEADER},n\n0,100,10,0.1,0.5,0\n1,100,10,0.1,0.5,\n",
     ["m_n_zero.csv: row 1: field 'n': bad value 0"]),
    ("m_n_text.csv", f"{HEADER},n\n0,100,10,0.1,0.5,\n1,100,10,0.1,0.5,three\n",
     ["m_n_text.csv: row 2: field 'n': bad value 'three'"]),
    ("m_beam_big.csv", f"{HEADER},beam_width\n0,100,10,0.1,0.5,2000000\n1,100,10,0.1,0.5,1\n",
     ["m_beam_big.csv: row 1: field 'beam_width': bad value 2000000 (must be a whole number from 1 to "
      "1e+06"]),
    ("m_n_beam.csv", f"{HEADER},n,beam_width\n0,100,10,0.1,0.5,1,4\n1,100,10,0.1,0.5,2,4\n",
     ["m_n_beam.csv: row 2: field 'beam_width': bad value 4 (use either n (parallel sampling) or beam_width, "
      "not both)"]),
    # the wrong field blamed: arrival_time_s for a zero or negative rate
    ("bs_rate_zero.json", _bench(request_rate=0), ["field 'request_rate': bad value 0 (must be a finite number"]),
    ("bs_rate_neg.json", _bench(request_rate=-2), ["field 'request_rate': bad value -2"]),
    # accepted silently before
    ("m_frac.csv", f"{HEADER}\n{GOOD_ROWS}3,100.7,10,0.1,0.5\n",
     ["m_frac.csv: row 4: field 'prompt_tokens': bad value 100.7 (must be a whole number)"]),
    ("bs_input_frac.json", _bench(input_lens=[100.5, 200, 150, 120]),
     ["bs_input_frac.json: request 1: field 'input_lens': bad value 100.5 (must be a whole number)"]),
    ("gl_frac.json", _guidellm({"successful": [_request(0, prompt_tokens=100.5), _request(1)]}),
     ["gl_frac.json: benchmarks[0].requests.successful[0]: field 'prompt_tokens': bad value 100.5"]),
    ("m_ttft_gt_e2e.csv", f"{HEADER}\n{GOOD_ROWS}3,100,10,0.9,0.5\n",
     ["m_ttft_gt_e2e.csv: row 4: field 'ttft_s': bad value 0.9 (must be <= e2e_s"]),
    ("m_warm_7.csv", f"{HEADER},warmup\n0,100,10,0.1,0.5,7\n1,100,10,0.1,0.5,0\n2,100,10,0.1,0.5,0\n",
     ["m_warm_7.csv: row 1: field 'warmup': bad value 7 (must be 0/1 or true/false)"]),
    ("bs_bool.json", _bench(input_lens=[True, 200, 150, 120]),
     ["bs_bool.json: request 1: field 'input_lens': bad value True"]),
    ("m_zero.csv", f"{HEADER}\n{GOOD_ROWS}3,100,10,0,0\n", ["m_zero.csv: row 4: field 'ttft_s': bad value 0 (must be > 0)"]),
    # milliseconds where benchmark_serving writes seconds, told by the file's own duration and summary means
    ("bs_ms_duration.json", _bench(ttfts=[50, 60, 50, 50], duration=3.5),
     ["bs_ms_duration.json: field 'ttfts' holds 60, longer than the run's 'duration' 3.5 s: are they milliseconds?"]),
    ("bs_ms_mean.json", _bench(ttfts=[50, 60, 50, 50], mean_ttft_ms=52.5),
     ["bs_ms_mean.json: field 'ttfts' is in milliseconds: its mean 52.5 matches 'mean_ttft_ms' 52.5"]),
    ("bs_itls_ms.json", _bench(itls=[[20.0] * len(gaps) for gaps in ITLS], mean_e2el_ms=265.0),
     ["bs_itls_ms.json: field 'itls' is in milliseconds: its mean 265.053 matches 'mean_e2el_ms' 265"]),
    # guidellm's totals of a sampled run: counts, else the file's fault named (not a traceback, not ignored)
    *[(f"gl_totals_{i}.json",
       json.dumps({"benchmarks": [{"requests": {"successful": [_request(0), _request(1)]},
                                   "request_totals": {"successful": total}}]}),
       [f"gl_totals_{i}.json: benchmarks[0]: field 'request_totals.successful': bad value", "(must be a count of "
        "requests)"]) for i, total in enumerate([float("inf"), float("nan"), "many", -3])],
    # one request cannot be split into a half to fit and a half to score
    ("m_one.csv", f"{HEADER}\n0,100,10,0.1,0.5\n", ["m_one.csv: 1 request(s) besides warm-up; a fit needs at least 2"]),
])
def test_bad_measured_run_is_one_line_naming_file_row_and_field(tmp_path, name, text, expected):
    _one_line_error(_calibrate(tmp_path, name, text), *expected)


def test_seconds_with_the_summary_fields_of_benchmark_serving_read_as_seconds(tmp_path):
    from sim.measured import read_measured

    path = tmp_path / "bs.json"
    path.write_text(_bench(duration=3.5, mean_ttft_ms=52.5, mean_e2el_ms=317.5))
    frame = read_measured(path).frame
    assert frame["ttft_s"].tolist() == [0.05, 0.06, 0.05, 0.05]
    assert frame["e2e_s"].mean() == pytest.approx(0.3175)


def test_fit_options_are_checked(tmp_path):
    ok = f"{HEADER}\n{GOOD_ROWS}"
    for value in ("-1", "nan", "0", "inf"):
        line = _one_line_error(_calibrate(tmp_path, "m.csv", ok, "--time-limit", value), "--time-limit must be")
        assert "finite" in line and "> 0" in line
    # a calibration table: refused, without the profile lookup's offer of "(or a calibration table .json)"
    table = tmp_path / "c_ok.json"
    table.write_text(json.dumps({"format": "kvsim-calibration", "version": 2}))
    line = _one_line_error(_calibrate(tmp_path, "m.csv", ok, "--start-profile", str(table)),
                           "--start-profile must be a named profile (vllm-v1", "c_ok.json")
    assert "or a calibration table .json" not in line


def test_failed_requests_are_counted_and_reported(tmp_path):
    """guidellm's errored and incomplete requests (and vLLM's failed ones) are left out, counted and named in
    one warning line, never dropped silently."""
    text = _guidellm({"successful": [_request(0), _request(1)], "errored": [_request(2)] * 5,
                      "incomplete": [_request(3, prompt_tokens=1, output_tokens=1)]})
    result = _calibrate(tmp_path, "gl_errored.json", text)
    assert result.exit_code == 0, result.output
    assert ("Warning: " + str(tmp_path / "gl_errored.json") + ": 6 request(s) left out of the fit and its scores "
            "(5 errored, 1 incomplete); 2 used") in result.output
    path = tmp_path / "bs_err.json"
    path.write_text(_bench(output_lens=[10, 0, 15, 12], itls=[ITLS[0], [], ITLS[2], ITLS[3]],
                           errors=["", "timeout", "", ""]))
    with pytest.warns(UserWarning, match=r"bs_err.json: 1 request\(s\) left out .*1 failed \(an entry in 'errors'\)"):
        run = read_measured(path)
    assert run.skipped == {"failed (an entry in 'errors')": 1} and len(run.frame) == 3
    # the failed request still took its place in the arrival schedule (evenly spaced at request_rate)
    assert run.frame["arrival_time_s"].tolist() == [0.0, 1.0, 1.5]
    path.write_text(_bench(errors=["timeout"] * 4))
    _one_line_error(CliRunner().invoke(main, ["calibrate", "--gpu", "a100-80gb", "--from-trace", str(path)]),
                    "bs_err.json: no requests to fit (4 failed")


def test_itls_need_not_number_output_lens_minus_one(tmp_path):
    """vLLM's benchmark records one inter-token gap per streamed chunk after the first, and a chunk may carry
    several tokens (its own comment says so: output lengths come from the tokenizer for that reason), so a
    request with fewer ITLs than ``output_lens - 1`` is legitimate, not an error."""
    path = tmp_path / "bs_itl_count.json"
    path.write_text(_bench(itls=[[0.06, 0.06, 0.06], *ITLS[1:]]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = read_measured(path)
    assert run.frame["e2e_s"].iloc[0] == pytest.approx(0.05 + 0.18)
    assert run.frame["tpot_s"].iloc[0] == pytest.approx(0.18 / 9)


def test_optional_columns_blank_means_their_default(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text(f"{HEADER},warmup,prefix_group,prefix_len,n,beam_width\n0,100,10,0.1,0.5,true,sys,50,4,\n"
                    "1,100,10,0.1,0.5,false,,,,2\n2,100,10,0.1,0.5,0,3,0,1,1\n")
    frame = read_measured(path).frame
    assert frame["warmup"].tolist() == [1, 0, 0]
    assert frame["n"].tolist() == [4, 1, 1] and frame["beam_width"].tolist() == [1, 2, 1]
    assert frame["prefix_group"].iloc[1] == -1 and frame["prefix_group"].iloc[2] == 3
    assert frame["prefix_group"].iloc[0] >= 0 and frame["prefix_len"].tolist() == [50, 0, 0]


def test_requests_measured_past_max_model_len_are_counted_in_the_report(tmp_path):
    """A measured request whose prompt + output runs past the given max_model_len is stopped there by the
    simulation (vLLM's rule): scored against a shorter run than was measured, so the report and the table's
    ``fit.length_capped`` say how many; ``--over-length reject`` leaves it out of the scores instead."""
    rows = GOOD_ROWS + "1.5,8000,500,0.5,9.0\n2.0,300,40,0.06,0.9\n2.5,200,30,0.05,0.7\n"
    result = _calibrate(tmp_path, "long.csv", HEADER + "\n" + rows)
    assert result.exit_code == 0, result.output
    assert ("1 scored request(s) measured past max_model_len, their outputs stopped there in the simulation as "
            "vLLM stops them") in result.output
    assert json.loads((tmp_path / "cal.json").read_text())["fit"]["length_capped"] == 1
    refused = _calibrate(tmp_path, "long.csv", HEADER + "\n" + rows, "--over-length", "reject")
    assert refused.exit_code == 0, refused.output
    assert "1 x prompt + output = N tokens exceeds max_model_len 8192" in refused.output
    assert json.loads((tmp_path / "cal.json").read_text())["fit"]["length_capped"] == 0


def test_requests_the_simulation_rejects_are_counted_in_the_report(tmp_path):
    """A measured request longer than the model's limit gets no simulated latency: both scores leave it out,
    and the report and the table's ``fit.rejected`` say how many and why."""
    rows = GOOD_ROWS + "1.5,9000,50,0.5,2.0\n2.0,300,40,0.06,0.9\n2.5,200,30,0.05,0.7\n"
    result = _calibrate(tmp_path, "long.csv", HEADER + "\n" + rows)
    assert result.exit_code == 0, result.output
    assert ("1 scored request(s) rejected by the simulation, left out of the scores: 1 x prompt of N tokens "
            "leaves no room for an output token within max_model_len 8192") in result.output
    table = json.loads((tmp_path / "cal.json").read_text())
    assert table["fit"]["rejected"] == {"prompt of N tokens leaves no room for an output token within max_model_len 8192": 1}


def test_a_split_with_an_empty_half_is_refused(tmp_path):
    """Two scored requests and a warm-up can leave one half without a scored request: a MAPE over none is no
    result."""
    rows = "0.0,482,59,0.0782,1.2582,1\n0.5,438,63,0.0738,1.3338,0\n1.0,70,43,0.0370,0.8970,0\n"
    for seed in range(8):
        result = _calibrate(tmp_path, "short.csv", HEADER + ",warmup\n" + rows, "--seed", str(seed))
        if result.exit_code:
            _one_line_error(result, "short.csv: the ", "half has no scored requests (2 scored of 3")
            return
        assert "nan" not in result.output
    pytest.fail("no seed left a half empty")


def test_a_fit_the_simulation_leaves_too_few_requests_to_is_refused(tmp_path):
    """Rejections (a pool or max_model_len smaller than the run's) show only once the run is simulated: when they
    leave a half with no served request, no table is written, rather than one scored over nothing."""
    rows = GOOD_ROWS.splitlines()[0] + "\n" + "".join(f"{0.5 + i / 2},9000,50,0.5,2.0\n" for i in range(5))
    result = _calibrate(tmp_path, "long.csv", HEADER + "\n" + rows)
    _one_line_error(result, "long.csv: the simulation served ", "5 scored requests rejected in all): too few to fit "
                    "and check; give the run's own settings")
    assert not (tmp_path / "cal.json").exists()


def test_a_run_of_one_token_outputs_has_no_tpot_score_and_a_strict_json_table(tmp_path):
    """With no request generating two tokens there is no TPOT to score: the report says n/a and the table holds
    null, not NaN (which is no JSON: strict readers refuse the file)."""
    rows = "0.0,482,1,0.0782,0.0782\n0.5,438,1,0.0738,0.0738\n1.0,70,1,0.0370,0.0370\n1.5,300,1,0.05,0.05\n"
    result = _calibrate(tmp_path, "one.csv", HEADER + "\n" + rows)
    assert result.exit_code == 0, result.output
    assert "tpot n/a (no request generated two tokens)" in result.output and "nan" not in result.output

    def refuse(name: str):
        raise ValueError(name)

    table = json.loads((tmp_path / "cal.json").read_text(), parse_constant=refuse)
    assert table["fit"]["heldout"]["tpot_mape"] is None and table["fit"]["heldout"]["ttft_mape"] is not None


def test_a_fit_far_from_the_held_out_half_warns(tmp_path):
    """Latencies written in milliseconds under seconds' column names read as a thousand times the run's: the
    fit cannot reach them, and the report says so on stderr (the table is still written, as asked)."""
    ms = "".join(f"{line.rsplit(',', 2)[0]},{float(line.split(',')[3]) * 1000:g},{float(line.split(',')[4]) * 1000:g}\n"
                 for line in (GOOD_ROWS + "1.5,300,40,0.06,0.9\n").splitlines())
    result = _calibrate(tmp_path, "ms.csv", HEADER + "\n" + ms)
    assert result.exit_code == 0, result.output
    assert "Warning: the fit misses the held-out half by " in result.stderr
    assert "check that the run's latencies are in seconds" in result.stderr and (tmp_path / "cal.json").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--list", "--from-trace", "run.csv"], "--list takes no other option (got --from-trace)"),
    (["--from-trace", "run.csv", "--gpu", "a100-80gb", "--quick"],
     "--quick: options of timing kernels, not of fitting a measured run (--from-trace)"),
    (["--kv-tokens", "5000"], "--kv-tokens: options of fitting a measured run; give --from-trace FILE"),
])
def test_an_option_of_another_mode_is_refused(tmp_path, monkeypatch, args, message):
    """Guards `--list --from-trace F` (listed, the file never read), `--from-trace F --quick` (fitted, --quick
    dropped) and `--kv-tokens N` alone (went on to time kernels, then asked for torch)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.csv").write_text(HEADER + "\n" + GOOD_ROWS)
    result = CliRunner().invoke(main, ["calibrate", *args])
    assert result.exit_code == 2 and result.stderr.splitlines() == [f"Error: {message}"], result.output


def test_the_table_records_the_deployment_it_was_fitted_under(tmp_path):
    result = _calibrate(tmp_path, "run.csv", HEADER + "\n" + GOOD_ROWS + "1.5,300,40,0.06,0.9\n",
                        "--kv-cache-dtype", "fp8", "--max-num-seqs", "64", "--parallel-sampling", "fork")
    assert result.exit_code == 0, result.output
    settings = json.loads((tmp_path / "cal.json").read_text())["fit"]["settings"]
    assert settings["kv_cache_dtype"] == "fp8" and settings["max_num_seqs"] == 64
    assert settings["parallel_sampling"] == "fork"
    # a setting the replayed runs ignore is said once, as kvsim run says it: one line, no Python warning
    note = "Warning: paged: --parallel-sampling fork ignored: no request of this workload is sampled"
    assert result.output.count(note) == 1 and "UserWarning" not in result.output
    assert settings["kv_tokens"] == 100000 and settings["tensor_parallel"] == 1
