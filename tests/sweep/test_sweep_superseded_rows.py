"""A rerun of a grid after its trace was edited in place says that the results file still holds the old rows:
they have the same settings as the new ones, and only ``point_id`` tells them apart, so a table grouped by
settings would average a broken trace's results into the fixed one's without a word."""

from __future__ import annotations

import pandas as pd
from click.testing import CliRunner

from sim.cli import main

SECONDS = "arrival_time_s,prompt_tokens,output_tokens\n0,100,50\n0.5,200,60\n1.0,150,40\n"
MILLISECONDS = "arrival_time_s,prompt_tokens,output_tokens\n0,100,50\n500,200,60\n1000,150,40\n"


def sweep(trace, out, sizes="8,16"):
    return CliRunner().invoke(main, ["sweep", "--trace", str(trace), "--block-size", sizes, "--step-time", "0.01",
                                     "--workers", "1", "--quiet", "--out", str(out)], catch_exceptions=False)


def test_rows_of_an_edited_trace_are_named_in_a_warning(tmp_path):
    trace, out = tmp_path / "t.csv", tmp_path / "s.parquet"
    trace.write_text(MILLISECONDS)
    first = sweep(trace, out)
    assert first.exit_code == 0, first.output
    assert "Warning" not in first.output
    trace.write_text(SECONDS)  # the user fixes the units and reruns into the same file
    second = sweep(trace, out)
    assert second.exit_code == 0, second.output
    assert "2 points: 2 run (0 failed), 0 already done" in second.output
    assert "also keeps 2 row(s) with the same settings as this grid's points" in second.output
    table = pd.read_parquet(out)
    assert len(table) == 4 and table.groupby("block_size").size().tolist() == [2, 2]


def test_other_points_in_the_file_are_no_warning(tmp_path):
    """Rows of other settings (an earlier, smaller grid) are the file's ordinary history, and an unchanged
    rerun only skips its points."""
    trace, out = tmp_path / "t.csv", tmp_path / "s.csv"
    trace.write_text(SECONDS)
    assert sweep(trace, out, "8").exit_code == 0
    for result in (sweep(trace, out, "8,16"), sweep(trace, out, "8,16")):
        assert result.exit_code == 0, result.output
        assert "Warning" not in result.output
    assert len(pd.read_csv(out)) == 2
