"""Inputs a reader once read without complaint into other numbers than the file's: each is now an error
naming the file, line and field, or (for a name) read as what it means."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workloads import TraceError, load_trace
from workloads.errors import TraceWarning
from workloads.named import load_named

HEADER = "arrival_time_s,prompt_tokens,output_tokens"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_rows_one_field_longer_than_the_header_are_an_error(tmp_path):
    """pandas would take the first column as an index and shift every field left: prompt 50, output 7."""
    path = write(tmp_path, "t.csv", f"{HEADER}\n0,100,50,7\n1,100,50,8\n")
    with pytest.raises(TraceError, match=r"t\.csv: line 2: more fields than the header names \(3\)"):
        load_trace(path)


def test_a_trailing_comma_on_every_row_loses_nothing(tmp_path):
    path = write(tmp_path, "t.csv", f"{HEADER}\n0,100,50,\n1,120,60,\n")
    w = load_trace(path)
    assert list(w.prompt_tokens) == [100, 120] and list(w.output_tokens) == [50, 60]


def test_a_column_named_twice_is_an_error(tmp_path):
    path = write(tmp_path, "t.csv", HEADER + ",prompt_tokens\n0,100,50,900\n")
    with pytest.raises(TraceError, match=r"t\.csv: line 1: column 'prompt_tokens' appears more than once"):
        load_trace(path)


def test_a_key_named_twice_in_a_jsonl_record_is_an_error(tmp_path):
    """`json` keeps a repeated key's last value: the record below ran with 7 prompt tokens without a word."""
    good = '{"arrival_time_s": 0, "prompt_tokens": 100, "output_tokens": 50}'
    path = write(tmp_path, "t.jsonl", good + '\n{"arrival_time_s": 1, "prompt_tokens": 100, "output_tokens": 50, '
                                      '"prompt_tokens": 7}\n' + good.replace("0,", "2,", 1) + "\n")
    with pytest.raises(TraceError, match=r"^\S*t\.jsonl: line 2: key 'prompt_tokens' appears more than once in the "
                                         r"JSON object \(add --skip-bad-rows to skip such rows\)$"):
        load_trace(path)
    w = load_trace(path, skip_bad_rows=True)
    assert w.prompt_tokens.tolist() == [100, 100] and w.skipped_reasons == {"line: a key repeated in a JSON object": 1}


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_file_that_is_not_utf8_is_an_error_naming_its_line(tmp_path, suffix):
    """Read with replacement characters, Latin-1 session ids ``café`` and ``cafè`` both became ``caf\ufffd``: two
    conversations merged into one."""
    rows = [(0, "conv-a"), (1, "café"), (2, "cafè")]
    if suffix == ".csv":
        text = f"{HEADER},session_id,turn\n" + "".join(f"{t},100,50,{s},0\n" for t, s in rows)
    else:
        text = "".join(json.dumps({"arrival_time_s": t, "prompt_tokens": 100, "output_tokens": 50, "session_id": s,
                                   "turn": 0}, ensure_ascii=False) + "\n" for t, s in rows)
    path, line = tmp_path / f"t{suffix}", 3 if suffix == ".csv" else 2  # café's line (CSV: after the header)
    path.write_bytes(text.encode("latin-1"))
    for skip in (False, True):  # no row is bad: the file's encoding is
        with pytest.raises(TraceError, match=rf"^\S*t{suffix}: line {line}: not valid UTF-8 \(byte 0xe9 at byte \d+\); "
                                             "save the file as UTF-8$"):
            load_trace(path, skip_bad_rows=skip)
    path.write_bytes(text.encode())
    assert len(set(load_trace(path).session_id.tolist())) == 3


@pytest.mark.parametrize("container", ["csv", "jsonl", "parquet"])
def test_a_boolean_is_not_a_token_count(tmp_path, container):
    if container == "csv":
        path = write(tmp_path, "t.csv", f"{HEADER}\n0,True,50\n")
    elif container == "jsonl":
        path = write(tmp_path, "t.jsonl", json.dumps({"arrival_time_s": 0, "prompt_tokens": True,
                                                        "output_tokens": 50}) + "\n")
    else:
        path = tmp_path / "t.parquet"
        pq.write_table(pa.table({"arrival_time_s": [0.0], "prompt_tokens": [True], "output_tokens": [50]}), path)
    with pytest.raises(TraceError, match=r"(line|row) 1?2?: field 'prompt_tokens': missing or not a number \(got True\)"):
        load_trace(path)


def test_a_boolean_think_time_is_not_one_second(tmp_path):
    path = write(tmp_path, "t.csv", f"{HEADER},session_id,turn,think_time_s\n0,100,50,1,0,\n1,200,50,1,1,true\n")
    with pytest.raises(TraceError, match=r"line 3: field 'think_time_s': not a number \(got True\)"):
        load_trace(path)


@pytest.mark.parametrize("field", ["n", "beam_width", "max_tokens", "prefix_len", "turn"])
def test_text_in_an_optional_number_is_an_error_not_its_default(tmp_path, field):
    path = write(tmp_path, "t.csv", f"{HEADER},{field}\n0,100,50,two\n")
    with pytest.raises(TraceError, match=rf"line 2: field '{field}': not a number \(got 'two'\)"):
        load_trace(path)


def test_text_session_ids_are_sessions(tmp_path):
    """A conversation id such as ``conv-a`` names a session, as text names a prefix group."""
    path = write(tmp_path, "t.csv", f"{HEADER},session_id,turn,think_time_s\n"
                                    "0,100,50,conv-a,0,\n1,100,50,conv-b,0,\n2,200,50,conv-a,1,0.5\n")
    w = load_trace(path)
    assert w.session_id[0] == w.session_id[2] != w.session_id[1]
    assert list(w.turn) == [0, 0, 1]


def test_a_number_among_azure_datetimes_is_an_error(tmp_path):
    path = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 18:15:46,374,44\n1700000001,396,109\n")
    with pytest.raises(TraceError, match=r"a\.csv: line 3: field 'arrival_time_s' \(column 'TIMESTAMP'\): not a "
                                         r"datetime \(YYYY-MM-DD HH:MM:SS\[\.fraction\], or ISO 8601 such as "
                                         r"YYYY-MM-DDTHH:MM:SS\[\.fraction\]Z\) \(got '1700000001'\)"):
        load_trace(path)
    w = load_trace(path, skip_bad_rows=True)
    assert len(w) == 1 and w.skipped_rows == 1


def test_a_repeated_request_id_is_an_error(tmp_path):
    path = write(tmp_path, "t.csv", f"id,{HEADER}\n1,0,100,50\n2,1,100,50\n1,2,100,50\n")
    with pytest.raises(TraceError, match=r"line 4: field 'id': repeats an earlier row's id \(got 1\)"):
        load_trace(path)
    w = load_trace(path, skip_bad_rows=True)
    assert list(w.ids) == [1, 2] and w.skipped_reasons == {"id: repeats an earlier row's id": 1}


def test_prefix_len_without_a_group_is_an_error(tmp_path):
    path = write(tmp_path, "t.csv", f"{HEADER},prefix_group,prefix_len\n0,100,50,7,20\n1,100,50,,20\n")
    with pytest.raises(TraceError, match=r"line 3: field 'prefix_len': given without prefix_group \(got 20\)"):
        load_trace(path)


def test_a_jsonl_key_that_starts_after_the_first_record_is_named(tmp_path):
    lines = [{"arrival_time_s": 0, "prompt_tokens": 100, "output_tokens": 7},
             {"arrival_time_s": 1, "prompt_tokens": 100, "output_tokens": 5, "n": 2}]
    path = write(tmp_path, "t.jsonl", "\n".join(json.dumps(line) for line in lines) + "\n")
    with pytest.warns(TraceWarning, match=r"key\(s\) 'n' are not in the first record and are not read"):
        w = load_trace(path)
    assert np.array_equal(w.n, [1, 1])


def test_a_file_a_spec_names_does_not_hint_at_skip_bad_rows(tmp_path):
    """``--skip-bad-rows`` reaches the command's own trace, not ``empirical:trace=FILE`` or ``trace:path=``."""
    path = write(tmp_path, "t.csv", f"{HEADER}\n0,100,50\n1,abc,50\n")
    with pytest.raises(TraceError) as caught:
        load_named(str(path))
    assert "skip-bad-rows" not in str(caught.value) and "fix or remove that row" in str(caught.value)
