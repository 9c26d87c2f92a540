"""`workload_to_frame` and `workload_from_frame` as a notebook uses them: a frame written to Parquet by pandas
and read back (list cells come back as numpy arrays, empty hashes as None or NaN) is the same workload, and
bad rows can be skipped from Python as from the command line."""

import numpy as np
import pandas as pd
import pytest

from workloads import TraceError, generate, load_preset, workload_from_frame, workload_to_frame

BASE = pd.DataFrame({"arrival_time_s": [0.0, 1.0, 2.0], "prompt_tokens": [600, 700, 800],
                     "output_tokens": [10, 20, 30]})


def same_requests(a, b) -> bool:
    return list(a) == list(b) and a.closed_loop == b.closed_loop and a.prefix_hash_tokens == b.prefix_hash_tokens


@pytest.mark.parametrize("workload", [
    load_preset("mooncake-conv", num_requests=20),  # prefix hashes
    generate("fixed:prompt=300,output=50", "poisson:rate=4", 12, turns=3, turn_gap_s=0.5, system_prompt_len=100,
             system_prompt_frac=0.5),  # sessions of several turns, think times NaN, nullable prefix groups
    generate("fixed:prompt=300,output=50", "closed:users=3,think_s=0.5", 6, n=2),  # closed loop, n
], ids=["hashes", "sessions", "closed-loop"])
def test_a_frame_round_trips_through_pandas_parquet(tmp_path, workload):
    path = tmp_path / "w.parquet"
    workload_to_frame(workload).to_parquet(path)
    back = workload_from_frame(pd.read_parquet(path))
    assert same_requests(back, workload)


def test_hash_cells_may_be_arrays_tuples_lists_or_missing():
    cells = [np.array([1, 2]), np.nan, (3,)]
    for missing in (np.nan, None, pd.NA, ()):
        cells[1] = missing
        w = workload_from_frame(BASE.assign(prefix_hashes=cells))
        assert [r.prefix_hashes for r in w] == [(1, 2), (), (3,)]
    w = workload_from_frame(BASE.assign(prefix_hashes=[[np.int64(4)], [5, 6], None]))
    assert [r.prefix_hashes for r in w] == [(4,), (5, 6), ()]


def test_text_hash_cells_may_sit_beside_lists():
    """A column the CSV reader left as text ("1 2") that a notebook then filled in part with lists."""
    w = workload_from_frame(BASE.assign(prefix_hashes=pd.Series(["1 2", [1, 3], np.array([4])], dtype=object)))
    assert [r.prefix_hashes for r in w] == [(1, 2), (1, 3), (4,)]


@pytest.mark.parametrize("cell", [np.array([1.5]), [-1], {"a": 1}, [True], 7])
@pytest.mark.parametrize("first", [(1,), "1"])
def test_a_bad_hash_cell_names_its_row(cell, first):
    cells = [first, (2,), cell]
    with pytest.raises(TraceError, match="^<frame>: row 3: field 'prefix_hashes'"):
        workload_from_frame(BASE.assign(prefix_hashes=pd.Series(cells, dtype=object)))


def test_bad_rows_can_be_skipped_and_are_counted():
    bad = BASE.assign(output_tokens=[10, 0, 30])
    with pytest.raises(TraceError, match=r"^<frame>: row 2: field 'output_tokens': must be >= 1 \(got 0\) "
                                         r"\(pass skip_bad_rows=True to skip such rows\)$"):
        workload_from_frame(bad)
    w = workload_from_frame(bad, skip_bad_rows=True)
    assert w.prompt_tokens.tolist() == [600, 800] and w.trace_row.tolist() == [1, 3]  # rows as the error counts
    assert (w.skipped_rows, w.skipped_reasons) == (1, {"output_tokens: must be >= 1": 1})


def test_workload_wide_errors_carry_no_skip_hint():
    """Skipping rows cannot mend a value every row shares: that error says nothing about skip_bad_rows."""
    with pytest.raises(TraceError, match=r"closed_loop_users': must be the same on every row.*\(got 3\)$"):
        workload_from_frame(BASE.assign(closed_loop_users=[2, 2, 3]), skip_bad_rows=True)
