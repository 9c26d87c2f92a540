"""``prefix_hashes`` in a CSV cell are whole numbers separated by spaces (``0 1 2``); a JSON list there
(``"[1, 2]"``, what pandas' ``to_csv`` writes for a list) is refused, not guessed at, and the error says which
form a text cell takes: it said only "not a list of non-negative integers", which a JSON list looks like."""

import re

import pandas as pd
import pytest

from workloads import TraceError, load_trace, workload_from_frame

TEXT_FORM = "not non-negative integers separated by spaces (a text cell holds 0 1 2, not a JSON list [0, 1, 2])"
HEADER = "arrival_time_s,prompt_tokens,output_tokens,prefix_hashes"


def test_a_json_list_in_a_csv_cell_names_the_form_expected(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame({"arrival_time_s": [0.0], "prompt_tokens": [1024], "output_tokens": [3],
                  "prefix_hashes": [[1, 2]]}).to_csv(path, index=False)
    with pytest.raises(TraceError, match=r"t\.csv: line 2: field 'prefix_hashes': " + re.escape(TEXT_FORM)):
        load_trace(path)
    path.write_text(f'{HEADER}\n0,1024,3,"[1, 2]"\n1,1024,3,1 2\n')
    skipped = load_trace(path, skip_bad_rows=True)
    assert skipped.skipped_reasons == {f"prefix_hashes: {TEXT_FORM}": 1} and skipped[0].prefix_hashes == (1, 2)


def test_a_list_cell_keeps_the_list_wording(tmp_path):
    """JSON Lines and a DataFrame's list cells take lists: there the reason is about the list."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_time_s": 0, "prompt_tokens": 1024, "output_tokens": 3, "prefix_hashes": [1, -2]}\n')
    with pytest.raises(TraceError, match="field 'prefix_hashes': not a list of non-negative integers"):
        load_trace(path)
    frame = pd.DataFrame({"arrival_time_s": [0.0, 1.0], "prompt_tokens": [1024, 1024], "output_tokens": [3, 3],
                          "prefix_hashes": ["1 2", "[1, 2]"]})
    with pytest.raises(TraceError, match=r"row 2: field 'prefix_hashes': not non-negative integers separated"):
        workload_from_frame(frame)


def test_space_separated_hashes_read_as_before(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER}\n0,1024,3,1 2\n")
    assert load_trace(path)[0].prefix_hashes == (1, 2)
