"""A CSV header with spaces around its names (``arrival_time_s, prompt_tokens``, as people type it) reads as the
names it spells: the header check stripped them and the pandas frame did not, so a column it found was "could
not be read". The trace readers and the measured-run reader share the one CSV reader (`csv_frame`)."""

import pytest

from sim.measured import read_measured
from workloads import TraceError, load_trace


def test_names_with_spaces_around_them_read_as_the_names(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s, prompt_tokens , output_tokens, prefix_hashes\n0.0, 1024, 5, 7\n0.5, 1024, 6, 7 8\n")
    w = load_trace(path)
    assert list(w.prompt_tokens) == [1024, 1024] and list(w.output_tokens) == [5, 6]
    # the hash column is still read as text under its stripped name: "7" is one hash, not the number 7
    assert [r.prefix_hashes for r in w] == [(7,), (7, 8)]


def test_a_name_given_twice_once_stripped_is_an_error(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s,prompt_tokens, prompt_tokens,output_tokens\n0,10,10,5\n")
    with pytest.raises(TraceError, match=r"t\.csv: line 1: column 'prompt_tokens' appears more than once"):
        load_trace(path)


def test_the_measured_reader_reads_the_same_header(tmp_path):
    """Its `hash_ids` column, named with a space before it, was dropped unread."""
    path = tmp_path / "m.csv"
    path.write_text("arrival_time_s, prompt_tokens, output_tokens, ttft_s, e2e_s, hash_ids\n"
                    "0.0,1024,5,0.1,0.5,7\n0.5,1024,7,0.1,0.6,7 8\n")
    frame = read_measured(path).frame
    assert list(frame["prompt_tokens"]) == [1024, 1024]
    assert [tuple(h) for h in frame["hash_ids"]] == [(7,), (7, 8)]
