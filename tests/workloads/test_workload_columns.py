"""Columns kvsim does not read: in a DataFrame or a canonical-format file, one that looks like a misspelled
field is an error naming the column and the field; any other is named in one `TraceWarning`. A misspelled
``prefix_len`` dropped unread once moved a run's prefix hit rate from 0.84 to 0.04 without a word."""

import json
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workloads import TraceError, load_trace, workload_from_frame, write_trace
from workloads.errors import TraceWarning
from workloads.presets import PRESETS, SAMPLES_DIR, load_preset, shared_traces_dir
from workloads.readers import containers
from workloads.readers.formats import check_unread_columns

BASE = pd.DataFrame({"arrival_time_s": np.arange(4) * 0.5, "prompt_tokens": 1200, "output_tokens": 100,
                     "prefix_group": 0})
MISSPELLED = [("prefix_length", "prefix_len"), ("session", "session_id"), ("max_token", "max_tokens"),
              ("priorty", "priority"), ("Priority", "priority"), ("think_time", "think_time_s"),
              ("max_new_tokens", "max_tokens"), ("prefix_lenght", "prefix_len")]
OWN_COLUMNS = ["model", "user", "num_tokens", "idx", "total_tokens", "conversation_id", "latency"]
"""Columns a user's table plausibly has for its own reasons: named in the warning, never refused."""


@contextmanager
def quiet() -> Iterator[None]:
    """A block in which any warning fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


@pytest.mark.parametrize("column, field", MISSPELLED)
def test_a_misspelled_frame_column_is_an_error_naming_it_and_the_field(column, field):
    with pytest.raises(TraceError, match=f"^<frame>: column '{column}': not a kvsim field, but close to "
                                         f"'{field}', which this trace does not have"):
        workload_from_frame(BASE.assign(**{column: 1}))


def test_the_correct_name_reads_the_value():
    w = workload_from_frame(BASE.assign(prefix_len=1024))
    assert set(w.prefix_len.tolist()) == {1024}


def test_other_columns_are_named_in_one_warning_and_change_nothing():
    frame = BASE.assign(**{c: 1 for c in OWN_COLUMNS})
    with pytest.warns(TraceWarning) as caught:
        w = workload_from_frame(frame)
    assert len(caught) == 1
    assert str(caught[0].message) == ("<frame>: column(s) 'model', 'user', 'num_tokens', 'idx', 'total_tokens', "
                                      "... are not kvsim fields and are not read")
    assert w.prompt_tokens.tolist() == [1200] * 4 and w.prefix_len.tolist() == [0] * 4


def test_a_field_the_frame_has_is_no_target_for_a_near_name():
    """``session`` next to a real ``session_id`` is a column of its own (warned), not a misspelling."""
    frame = BASE.assign(session_id=[1, 2, 3, 4], session=["a", "a", "b", "b"])
    with pytest.warns(TraceWarning, match="'session' are not kvsim fields"):
        w = workload_from_frame(frame)
    assert w.has_sessions


def write_canonical(tmp_path: Path, suffix: str, extra: str) -> Path:
    """A kvsim-format file of `BASE` with one more column ``extra`` (value 7) in the given container."""
    frame = BASE.assign(**{extra: 7})
    path = tmp_path / f"t{suffix}"
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    elif suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in frame.to_dict("records")))
    else:
        frame.to_parquet(path, index=False)
    return path


@pytest.mark.parametrize("suffix, where", [(".csv", "line 1: "), (".jsonl", "line 1: "), (".parquet", "")])
def test_a_misspelled_file_column_is_an_error_in_every_container(tmp_path, suffix, where):
    path = write_canonical(tmp_path, suffix, "prefix_lenght")
    with pytest.raises(TraceError, match=f"t\\{suffix}: {where}column 'prefix_lenght': not a kvsim field, but "
                                         "close to 'prefix_len'"):
        load_trace(path)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_another_file_column_is_a_warning_in_every_container(tmp_path, suffix):
    path = write_canonical(tmp_path, suffix, "model")
    with pytest.warns(TraceWarning, match=r"column\(s\) 'model' are not kvsim fields and are not read"):
        w = load_trace(path)
    assert len(w) == 4


def test_a_canonical_file_kvsim_wrote_reads_silently(tmp_path):
    w = workload_from_frame(BASE.assign(prefix_len=100, priority=[0, 1, 0, 1]))
    for suffix in (".csv", ".jsonl", ".parquet"):
        with quiet():
            back = load_trace(write_trace(w, tmp_path / f"w{suffix}"))
        assert back.prefix_len.tolist() == [100] * 4


def test_a_mapped_files_unmapped_columns_are_named_once(tmp_path):
    """With ``columns=`` the file is read as the canonical format: its other columns are checked the same way,
    and an unread timestamp keeps its own warning (which says where times come from) and is not named twice."""
    path = tmp_path / "mine.csv"
    path.write_text("t_s,created_time,input_len,output_len,model\n0,5,100,10,a\n1,6,120,12,b\n")
    with pytest.warns(TraceWarning) as caught:
        load_trace(path, columns="arrival_time_s=t_s,prompt_tokens=input_len,output_tokens=output_len")
    unread, times = sorted((str(w.message) for w in caught), key=lambda m: "timestamps" in m)
    assert len(caught) == 2
    assert "column(s) 'model' are not kvsim fields" in unread and "created_time" not in unread
    assert "'created_time' look like timestamps" in times
    path.write_text("t_s,input_len,output_len,max_token\n0,100,10,20\n")
    with pytest.raises(TraceError, match="line 1: column 'max_token': not a kvsim field, but close to 'max_tokens'"):
        load_trace(path, columns="arrival_time_s=t_s,prompt_tokens=input_len,output_tokens=output_len")


@pytest.mark.parametrize("header, hint", [
    ("arrival_time,prompt_tokens,output_tokens", "column 'arrival_time' is close to 'arrival_time_s', which format "
                                                 "kvsim (arrival times in seconds) requires; rename it to "
                                                 "'arrival_time_s' if that is what it holds, or map the columns "
                                                 "with --columns"),
    ("arrival_time_s,prompt_token,output_tokens", "column 'prompt_token' is close to 'prompt_tokens', which format "
                                                  "kvsim (arrival times in seconds) requires; rename it to "
                                                  "'prompt_tokens'"),
    ("timestamp,ContextTokens,GeneratedTokens", "column 'timestamp' is close to 'TIMESTAMP', which format azure "
                                               "(arrival times as datetimes) requires"),
    ("arrival_time,prompt_token,output_tokens", "columns 'arrival_time', 'prompt_token' are close to "
                                                "'arrival_time_s', 'prompt_tokens', which format kvsim"),
])
def test_a_near_miss_of_a_required_column_is_named(tmp_path, header, hint):
    """A misspelled required column got only the generic "unknown trace format", with no clue that one letter
    was all that was wrong; an optional field's got the "close to" hint."""
    path = tmp_path / "t.csv"
    path.write_text(f"{header}\n0,100,50\n")
    with pytest.raises(TraceError, match=rf"^\S*t\.csv: unknown trace format: {re.escape(hint)}"):
        load_trace(path)
    path.write_text("t,in,out\n0,100,50\n")  # nothing close: the generic message
    with pytest.raises(TraceError, match=r"unknown trace format: its columns \(t, in, out\) match none"):
        load_trace(path)


def test_a_near_miss_of_another_formats_column_names_its_units(tmp_path):
    """Mooncake's names would read these seconds as milliseconds: the hint says so, and offers the mapping."""
    path = tmp_path / "t.csv"
    path.write_text("timestamp,input_len,output_len\n0.5,100,50\n")
    with pytest.raises(TraceError, match=r"columns 'input_len', 'output_len' are close to 'input_length', "
                                         r"'output_length', which format mooncake \(arrival times in milliseconds\) "
                                         r"requires; rename them if that is what they hold, or map the columns"):
        load_trace(path)


def test_a_near_miss_is_named_when_the_format_is_given(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s,prompt_token,output_tokens\n0,100,50\n")
    with pytest.raises(TraceError, match=r"line 1: field 'prompt_tokens': missing column 'prompt_tokens' for format "
                                         r"kvsim .*; column 'prompt_token' is close to 'prompt_tokens': rename it"):
        load_trace(path, format="kvsim")


def trace_headers() -> dict[str, list[str]]:
    """The header of every shipped sample and, when ``$KVSIM_TRACES`` is set, every full shared trace."""
    folders = [SAMPLES_DIR] + ([shared_traces_dir()] if shared_traces_dir() is not None else [])
    headers = {}
    for folder in folders:
        for path in sorted(folder.iterdir()):
            head = path.read_bytes()[:1 << 16]
            if path.suffix == ".csv":
                headers[str(path)] = containers.csv_header(path, head)
            elif path.suffix == ".jsonl":
                headers[str(path)] = containers.jsonl_header(path, head)
    return headers


BURSTGPT = ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"]


def test_no_column_of_the_real_traces_looks_like_a_misspelled_field():
    """The real traces' columns, even read as extra columns of a canonical table that has only the required
    fields (the most fields left for a near name to match), are never taken for misspellings."""
    headers = trace_headers() | {"BurstGPT": BURSTGPT}
    assert len(headers) >= 5
    required = {f: f for f in ("arrival_time_s", "prompt_tokens", "output_tokens")}
    for name, header in headers.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TraceWarning)
            check_unread_columns(name, header + list(required), required)


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads_without_a_warning(name):
    """The named formats' own unread columns (Vidur's num_total_tokens and pd_ratio) are known to them: a
    shipped preset must not warn on every load. With ``$KVSIM_TRACES`` set this reads the full traces."""
    with quiet():
        w = load_preset(name, num_requests=20)
    assert len(w) == 20
