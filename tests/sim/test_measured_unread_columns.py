"""A measured table's trace-format columns that the replay does not read are not dropped in silence: the trace
readers' ``prefix_hashes`` (a measured table's ``hash_ids``) is refused, naming the rename, and a ``priority``
column other than 0 is warned of (the replay is first come, first served)."""

import warnings

import pytest

from sim.measured import read_measured
from workloads.errors import TraceError, TraceWarning

HEADER = "arrival_time_s,prompt_tokens,output_tokens,ttft_s,e2e_s"
ROWS = ["0.0,1024,20,0.08,0.9", "0.5,1024,20,0.05,0.8", "1.0,1024,20,0.05,0.8"]


def _table(tmp_path, column: str, cells: list[str]):
    path = tmp_path / "measured.csv"
    path.write_text(f"{HEADER},{column}\n" + "".join(f"{row},{cell}\n" for row, cell in zip(ROWS, cells, strict=True)))
    return path


def test_prefix_hashes_is_refused_with_the_name_to_use(tmp_path):
    path = _table(tmp_path, "prefix_hashes", ["0 1", "0 1", "0 2"])
    with pytest.raises(TraceError, match=r"measured.csv: column prefix_hashes: a measured run's block hashes are "
                                         r"its hash_ids column .*: rename it hash_ids"):
        read_measured(path)


def test_the_same_hashes_as_hash_ids_are_replayed(tmp_path):
    run = read_measured(_table(tmp_path, "hash_ids", ["0 1", "0 1", "0 2"]))
    assert run.frame["hash_ids"].tolist() == [(0, 1), (0, 1), (0, 2)]


def test_a_priority_column_is_warned_of(tmp_path):
    with pytest.warns(TraceWarning, match=r"measured.csv: column priority is not read: the replay schedules first "
                                          r"come, first served"):
        run = read_measured(_table(tmp_path, "priority", ["0", "-5", ""]))
    assert len(run.frame) == 3


@pytest.mark.parametrize("cells", [["0", "0", "0"], ["", "", ""]])
def test_priorities_of_zero_or_blank_say_nothing(tmp_path, cells):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_measured(_table(tmp_path, "priority", cells))
