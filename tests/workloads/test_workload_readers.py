"""Trace readers: every format, detection, column mapping, and one clear `TraceError` for bad input."""

import json
import re

import numpy as np
import pandas as pd
import pytest

from workloads import TraceError, generate, load_trace, trace_stats, write_trace
from workloads.errors import TraceWarning
from workloads.presets import SAMPLES_DIR, shared_traces_dir

needs_shared = pytest.mark.skipif(shared_traces_dir() is None,
                                  reason="the full public traces are not here (set KVSIM_TRACES to their folder)")

AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\r\n{rows}"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def azure(tmp_path, rows):
    return write(tmp_path, "a.csv", AZURE.format(rows="\r\n".join(rows)))


def test_azure_sample_reads_with_crlf_and_no_trailing_newline():
    sample = SAMPLES_DIR / "AzureLLMInferenceTrace_conv.csv"
    assert sample.read_bytes().count(b"\r\n") == 2000 and not sample.read_bytes().endswith(b"\n")
    w = load_trace(sample)
    assert len(w) == 2000 and w.arrival_time_s[0] == 0.0
    assert (w.prompt_tokens[:2] == [374, 396]).all() and (w.output_tokens[:2] == [44, 109]).all()
    assert w.arrival_time_s[1] == pytest.approx(4.314578)
    assert "CC-BY-4.0" in w.source


def test_mooncake_sample_keeps_hash_ids():
    w = load_trace(SAMPLES_DIR / "conversation_trace.jsonl")
    assert len(w) == 2000 and w.prefix_hash_tokens == 512
    first = w[0]
    assert first.prefix_hashes == tuple(range(14)) and first.prompt_tokens == 6758
    assert len(first.block_hashes(16)) == 6758 // 16
    assert w[1].block_hashes(16)[:32] == first.block_hashes(16)[:32]  # both start with hash id 0


def test_vidur_stats_get_seeded_poisson_arrivals():
    path = SAMPLES_DIR / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
    a, b = load_trace(path, seed=3), load_trace(path, seed=3)
    assert np.array_equal(a.arrival_time_s, b.arrival_time_s)
    assert not np.array_equal(a.arrival_time_s, load_trace(path, seed=4).arrival_time_s)
    assert trace_stats(a)["rate_rps"] == pytest.approx(1.0, rel=0.1)
    fast = load_trace(path, arrivals="constant:rate=10")
    assert fast.arrival_time_s[10] == pytest.approx(1.0)


def test_burstgpt_keeps_failed_requests_out_and_counts_them(tmp_path):
    text = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,472,18,490,Conversation log\n"
            "45,ChatGPT,1087,0,1087,Conversation log\n"
            "118,GPT-4,417,276,693,API log\n")
    w = load_trace(write(tmp_path, "burst.csv", text))
    assert len(w) == 2 and list(w.prompt_tokens) == [472, 417] and list(w.arrival_time_s) == [0.0, 113.0]  # rebased
    assert w.skipped_rows == 1 and w.skipped_reasons == {"failed request (0 response tokens)": 1}


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_canonical_round_trip_in_every_container(tmp_path, suffix):
    w = generate("uniform:prompt_min=20,prompt_max=300,output_min=1,output_max=50", "gamma:rate=3,cv=2", 300,
                 seed=5, n=2, system_prompt_len=40, system_prompt_frac=0.5)
    back = load_trace(write_trace(w, tmp_path / f"t{suffix}"))
    assert list(back) == list(w)
    turns = generate("fixed:prompt=30,output=20", "poisson:rate=5", 200, seed=1, turns=3, turn_gap_s=0.5)
    back = load_trace(write_trace(turns, tmp_path / f"turns{suffix}"))
    assert list(back) == list(turns) and back.has_sessions
    sessions = generate("fixed:prompt=30,output=20", "poisson:rate=5", 20, seed=1, turns=3, think_time_s=2.5)
    assert list(load_trace(write_trace(sessions, tmp_path / f"s{suffix}"))) == list(sessions)
    closed = generate("fixed:prompt=30,output=20", "closed:users=4,think_s=1.5", 10, seed=1)
    assert load_trace(write_trace(closed, tmp_path / f"c{suffix}")).closed_loop == closed.closed_loop


def test_max_tokens_and_beam_width_optional_columns(tmp_path):
    text = ("arrival_time_s,prompt_tokens,output_tokens,max_tokens,beam_width\n"
            "0,10,5,,1\n1.5,20,6,8,4\n")
    w = load_trace(write(tmp_path, "k.csv", text))
    assert w[0].max_tokens is None and w[1].max_tokens == 8 and w[1].beam_width == 4


def test_column_mapping_override(tmp_path):
    path = write(tmp_path, "mine.csv", "t,in,out\n0,5,6\n2,7,8\n")
    with pytest.raises(TraceError, match="unknown trace format"):
        load_trace(path)
    w = load_trace(path, columns={"arrival_time_s": "t", "prompt_tokens": "in", "output_tokens": "out"})
    assert list(w.prompt_tokens) == [5, 7]
    renamed = write(tmp_path, "az.csv", "TIMESTAMP,Prompt,GeneratedTokens\n2023-11-16 18:15:46.68,5,6\n")
    w = load_trace(renamed, format="azure", columns={"prompt_tokens": "Prompt"})
    assert w[0].prompt_tokens == 5


@pytest.mark.parametrize(("rows", "line", "field", "problem"), [
    (["2023-11-16 18:15:46.6805900,374,44", "2023-11-16 18:15:50.9951690,abc,109"], 3, "prompt_tokens",
     "not a number"),
    (["2023-11-16 18:15:46.6805900,374,44", "2023-11-16 18:15:50.9951690,-3,109"], 3, "prompt_tokens", ">= 1"),
    (["2023-11-16 18:15:46.6805900,374,0"], 2, "output_tokens", ">= 1"),
    (["2023-11-16 18:15:46.6805900,374,4.5"], 2, "output_tokens", "whole number"),
    (["2023-11-16 18:15:46.6805900,374,44", "2023-11-16 18:15:40.0,3,4"], 3, "arrival_time_s", "out of order"),
    (["not a time,374,44"], 2, "arrival_time_s", "not a number"),
    (["2023-11-16 18:15:46.6805900,,44"], 2, "prompt_tokens", "missing"),
])
def test_bad_rows_name_file_line_and_field(tmp_path, rows, line, field, problem):
    path = azure(tmp_path, rows)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    message = str(info.value)
    assert str(path) in message and f"line {line}:" in message and f"'{field}'" in message and problem in message
    assert "\n" not in message
    column = {"arrival_time_s": "TIMESTAMP", "prompt_tokens": "ContextTokens", "output_tokens": "GeneratedTokens"}
    assert f"field '{field}' (column '{column[field]}'):" in message  # the name the user finds in the file


def test_a_huge_cell_is_shown_as_written_not_as_the_floats_digits(tmp_path):
    """A cell of 1e30 was shown as the 31-digit integer its float holds (1000000000000000019884624838656); a
    whole number a float holds exactly is still shown as one."""
    header = "arrival_time_s,prompt_tokens,output_tokens"
    for cell, shown in (("1e30", "1e+30"), ("10000000000", "10000000000"), ("2e16", "2e+16")):
        with pytest.raises(TraceError, match=re.escape(f"line 3: field 'prompt_tokens': must be <= 1e+09 (got {shown})")):
            load_trace(write(tmp_path, "t.csv", f"{header}\n0,10,5\n1,{cell},5\n"))
    record = '{"arrival_time_s": 0, "prompt_tokens": 10, "output_tokens": 1e30}'
    with pytest.raises(TraceError, match=re.escape("line 1: field 'output_tokens': must be <= 1e+09 (got 1e+30)")):
        load_trace(write(tmp_path, "t.jsonl", record + "\n"))


def test_azure_iso_8601_timestamps_read_as_the_published_form(tmp_path):
    """``T``, ``Z`` and an offset, as other tools write Azure's times, are the same instants as the published
    trace's space-separated naive form (an offset is converted to UTC); a date alone is still a bad row."""
    iso = ["2023-11-16T18:17:04.03Z,1,2", "2023-11-16 18:17:05.5,1,2", "2023-11-16T19:17:06+01:00,1,2",
           "2023-11-16T18:17:07.25,1,2", "2023-11-16T18:17:08.1234567-00:00,1,2"]
    assert load_trace(azure(tmp_path, iso)).arrival_time_s.tolist() == pytest.approx([0, 1.47, 1.97, 3.22, 4.0934567])
    with pytest.raises(TraceError, match=r"line 3: field 'arrival_time_s' \(column 'TIMESTAMP'\): .* \(got '2023-11-17'\)"):
        load_trace(azure(tmp_path, ["2023-11-16T18:17:04Z,1,2", "2023-11-17,1,2"]))


def test_skip_bad_rows_counts_each_reason(tmp_path):
    rows = ["2023-11-16 18:15:46.0,374,44", "2023-11-16 18:15:47.0,abc,1", "2023-11-16 18:15:48.0,5,0",
            "2023-11-16 18:15:45.0,5,5", "2023-11-16 18:15:49.0,5,5,9", "2023-11-16 18:15:50.0,6,6"]
    w = load_trace(azure(tmp_path, rows), skip_bad_rows=True)
    assert list(w.prompt_tokens) == [374, 6]
    assert w.skipped_rows == 4
    assert w.skipped_reasons == {
        "prompt_tokens: missing or not a number": 1, "output_tokens: must be >= 1": 1,
        "arrival_time_s: timestamps out of order (earlier than a previous row)": 1,
        "line: wrong number of fields": 1}
    assert "4 rows skipped" in w.describe_skips()


def test_mangled_csv_line_is_an_error_with_its_line(tmp_path):
    path = azure(tmp_path, ["2023-11-16 18:15:46.0,374,44", "2023-11-16 18:15:49.0,5,5,9"])
    with pytest.raises(TraceError, match=r"line 3"):
        load_trace(path)


def test_blank_csv_lines_are_no_rows_and_keep_the_line_numbers(tmp_path):
    """A blank line (trailing or not, whitespace only) once failed the file as a row of missing values; a line of
    only commas is a row, whose missing values keep their error, on its own line."""
    header = "arrival_time_s,prompt_tokens,output_tokens"
    w = load_trace(write(tmp_path, "t.csv", f"{header}\n0,100,50\n0.5,200,60\n\n"))
    assert w.prompt_tokens.tolist() == [100, 200] and w.skipped_rows == 0
    crlf = write(tmp_path, "c.csv", f"{header}\r\n0,100,50\r\n \t \r\n\r\n0.5,200,60\r\n")
    assert load_trace(crlf, skip_bad_rows=True).prompt_tokens.tolist() == [100, 200]
    commas = write(tmp_path, "k.csv", f"{header}\n0,100,50\n   \n\n0.5,200,60\n,,\n1,3,4\n")
    with pytest.raises(TraceError, match=r"k\.csv: line 6: field 'arrival_time_s': missing or not a number"):
        load_trace(commas)
    w = load_trace(commas, skip_bad_rows=True)
    assert w.prompt_tokens.tolist() == [100, 200, 3]
    assert w.skipped_reasons == {"arrival_time_s: missing or not a number": 1}
    late = write(tmp_path, "l.csv", f"{header}\n0,100,50\n\n1,x,4\n")
    with pytest.raises(TraceError, match=r"l\.csv: line 4: field 'prompt_tokens'"):  # counted past the blank
        load_trace(late)


def test_each_request_keeps_the_line_or_row_its_errors_name(tmp_path):
    """``trace_row``: where in its file each request was read, counted as the errors count (a CSV or JSON Lines
    file's line, past blank lines; a Parquet file's row), so that results join back to the file once skipped
    rows have left the request ids counting only the rows kept. A cut or re-timing keeps each request's row;
    a generated workload has none."""
    header = "arrival_time_s,prompt_tokens,output_tokens"
    csv = write(tmp_path, "t.csv", f"{header}\n0,10,5\n1,x,5\n\n2,20,5\n3,0,5\n4,30,5\n")
    with pytest.raises(TraceError, match=r"t\.csv: line 3: field 'prompt_tokens'"):
        load_trace(csv)
    w = load_trace(csv, skip_bad_rows=True)
    assert w.prompt_tokens.tolist() == [10, 20, 30] and w.ids.tolist() == [0, 1, 2]
    assert w.trace_row.tolist() == [2, 5, 7]
    assert load_trace(csv, skip_bad_rows=True, num_requests=2, arrivals="constant:rate=1").trace_row.tolist() == [2, 5]
    good = json.dumps({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]})
    mooncake = write(tmp_path, "m.jsonl", f"{good}\n{good[:30]}\n\n{good.replace('600', '700')}\n")
    w = load_trace(mooncake, skip_bad_rows=True)
    assert w.prompt_tokens.tolist() == [600, 700] and w.trace_row.tolist() == [1, 4]
    parquet = tmp_path / "t.parquet"
    pd.DataFrame({"arrival_time_s": [0.0, 1.0, 2.0], "prompt_tokens": [10, 0, 30], "output_tokens": 5}).to_parquet(
        parquet)
    assert load_trace(parquet, skip_bad_rows=True).trace_row.tolist() == [1, 3]
    assert generate("fixed:prompt=10,output=5", "poisson:rate=2", 3).trace_row is None


def test_a_utf8_bom_starts_a_jsonl_file_as_it_does_a_csv_one(tmp_path):
    record = b'{"arrival_time_s": 0, "prompt_tokens": 100, "output_tokens": 50}\n'
    for name in ("t.jsonl", "no_extension"):  # extension-less: sniffed as JSON Lines past the mark
        w = load_trace(write(tmp_path, name, b"\xef\xbb\xbf" + record + record.replace(b"100", b"7")))
        assert w.prompt_tokens.tolist() == [100, 7]
    with pytest.raises(TraceError, match=r"b\.jsonl: line 2: truncated or invalid JSON"):  # lines still counted
        load_trace(write(tmp_path, "b.jsonl", b"\xef\xbb\xbf" + record + b"{\n"))


def test_jsonl_errors(tmp_path):
    good = json.dumps({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]})
    truncated = write(tmp_path, "t.jsonl", good + "\n" + good[:30] + "\n")
    with pytest.raises(TraceError, match=r"t.jsonl: line 2: truncated or invalid JSON"):
        load_trace(truncated)
    assert load_trace(truncated, skip_bad_rows=True).skipped_reasons == {"line: truncated or invalid JSON": 1}
    bad_hash = write(tmp_path, "h.jsonl", good + "\n" + good.replace("[0, 1]", '[0, "x"]') + "\n")
    with pytest.raises(TraceError, match=r"line 2: field 'prefix_hashes'"):
        load_trace(bad_hash)
    too_many = write(tmp_path, "m.jsonl", good.replace("[0, 1]", "[0, 1, 2]") + "\n")
    with pytest.raises(TraceError, match="more hashes"):
        load_trace(too_many)


def test_whole_file_problems(tmp_path):
    cases = {
        "empty.csv": "",
        "header_only.csv": "arrival_time_s,prompt_tokens,output_tokens\n",
        "blank.jsonl": "\n\n",
        "bad.parquet": b"PAR1 this is not parquet",
        "noise.csv": "x,y\n1,2\n",
    }
    for name, text in cases.items():
        with pytest.raises(TraceError, match=name.replace(".", r"\.")):
            load_trace(write(tmp_path, name, text))
    with pytest.raises(TraceError, match="no such file"):
        load_trace(tmp_path / "missing.csv")
    with pytest.raises(TraceError, match="unknown trace format 'nope'"):
        load_trace(write(tmp_path, "ok.csv", "arrival_time_s,prompt_tokens,output_tokens\n0,1,1\n"), format="nope")
    with pytest.raises(TraceError, match=r"line 1: field 'output_tokens': missing column 'GeneratedTokens'"):
        load_trace(write(tmp_path, "az.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.0,5\n"), format="azure")


def test_presets_fall_back_to_samples(monkeypatch, tmp_path):
    from workloads import load_preset

    monkeypatch.delenv("KVSIM_TRACES", raising=False)
    monkeypatch.delenv("KVSIM_SHARED_TRACES", raising=False)
    w = load_preset("azure-code")
    assert len(w) == 2000 and "shipped 2000-row sample" in w.source and "Splitwise" in w.source


@pytest.mark.parametrize("folder", ["nowhere", "empty"])
def test_a_traces_folder_that_lacks_the_trace_is_a_warning(monkeypatch, tmp_path, folder):
    """The variable asks for the full trace: falling back to the sample says so, naming the variable."""
    from workloads import load_preset

    (tmp_path / "empty").mkdir()
    monkeypatch.delenv("KVSIM_TRACES", raising=False)
    monkeypatch.setenv("KVSIM_SHARED_TRACES", str(tmp_path / folder))
    why = "is not a folder" if folder == "nowhere" else "has no AzureLLMInferenceTrace_code.csv"
    with pytest.warns(TraceWarning, match=rf"preset azure-code: \$KVSIM_SHARED_TRACES \(.*{folder}\) {why}, so the"):
        w = load_preset("azure-code")
    assert len(w) == 2000 and "shipped 2000-row sample" in w.source


@needs_shared
@pytest.mark.parametrize(("preset", "rows", "prompt", "output", "rate"), [
    ("azure-code", 8819, (2047.8, 1469, 7436, 7437), (27.9, 13, 251.5, 1899), 2.567),
    ("azure-conv", 19366, (1154.7, 1020, 4142, 14050), (211.1, 129, 601, 1000), 5.530),
    ("mooncake-conv", 12031, (12035.1, 6909, 85400.4, 126195), (342.6, 350, 1118.5, 2000), 3.401),
    ("sharegpt-etalon", 30731, (2340.0, 1730, 7433.7, 8141), (438.7, 415, 998, 1024), None),
])
def test_full_trace_statistics_match_the_shared_readme(preset, rows, prompt, output, rate):
    from workloads import load_preset

    stats = trace_stats(load_preset(preset))
    assert stats["rows"] == rows and stats["skipped_rows"] == 0
    for key, expected in (("prompt_tokens", prompt), ("output_tokens", output)):
        got = stats[key]
        assert [round(got["mean"], 1), got["p50"], round(got["p99"], 1), got["max"]] == list(expected)
    if rate is not None:
        assert round(stats["rate_rps"], 3) == rate
    if preset == "mooncake-conv":
        assert round(stats["prefix_reuse_share"], 3) == 0.366
