"""`kvsim plot` and `kvsim sweep` on files that are not what they expect: one ``Error:`` line naming the file
and what was expected, exit code 2, never a traceback (audit: a ``summary.json`` of ``[]``, a trace given as a
sweep table, an unrelated CSV as ``sweep --out``, a memory table whose error did not say which file)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.sweep.store import load_results

TRACE = "arrival_time_s,prompt_tokens,output_tokens\n0,100,50\n0.5,200,20\n1.0,50,10\n"


def _invoke(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_error_line(result) -> str:
    """The command failed as a usage error: exit 2, one ``Error:`` line, no traceback."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


def _run_dir(tmp_path, summary, memory: str | None = None):
    run = tmp_path / "run"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(summary))
    if memory is not None:
        (run / "memory.csv").write_text(memory)
    return run


@pytest.mark.parametrize("summary, got", [([], "an array"), ("paged", "a string"), (3, "a number")])
def test_plot_of_a_summary_that_is_not_an_object_names_the_file(tmp_path, summary, got):
    run = _run_dir(tmp_path, summary)
    line = _one_error_line(_invoke(["plot", run]))
    assert str(run / "summary.json") in line
    assert "expected a JSON object" in line and got in line


def test_plot_memory_map_names_the_memory_table_it_rejects(tmp_path):
    run = _run_dir(tmp_path, {"allocator": "paged"}, memory="a,b\n1,2\n")
    line = _one_error_line(_invoke(["plot", run, "--kind", "memory-map", "--out", tmp_path / "m.png"]))
    assert f"memory table {run / 'memory.csv'} lacks column(s)" in line
    assert "'time_s'" in line and "it has ['a', 'b']" in line


@pytest.mark.parametrize("kind, key", [("breakdown", "free_frac"), ("batch-sizes", "mean_running")])
def test_plot_names_the_summary_that_lacks_a_value_the_figure_draws(tmp_path, kind, key):
    # Beside a complete run, a summary without the value drew a bar with a gap; alone, the error named
    # "summaries" and listed sixty keys, not the file.
    from sim.plots.style import SHARES

    whole = {"allocator": "paged", "mean_running": 3.0, **{f"{s}_frac": 1 / len(SHARES) for s in SHARES}}
    good = _run_dir(tmp_path / "a", whole)
    bad = _run_dir(tmp_path / "b", {k: v for k, v in whole.items() if k != key} | {"allocator": "radix"})
    line = _one_error_line(_invoke(["plot", good, bad, "--kind", kind, "--out", tmp_path / "x.png"]))
    assert line == (f"Error: {bad / 'summary.json'}: no {key}, which the {kind!r} figure draws "
                    "(write a run directory with `kvsim run --out DIR`)")
    assert _invoke(["plot", good, "--kind", kind, "--out", tmp_path / "x.png"]).exit_code == 0


def test_plot_of_a_trace_says_it_is_not_a_sweep_table(tmp_path):
    trace = tmp_path / "ok.csv"
    trace.write_text(TRACE)
    line = _one_error_line(_invoke(["plot", trace, "--out", tmp_path / "x.png"]))
    assert line.startswith(f"Error: {trace}: not a kvsim sweep results table: no point_id column")
    assert "arrival_time_s, prompt_tokens, output_tokens" in line and "`kvsim sweep --out`" in line


def test_sweep_out_onto_a_csv_that_is_not_a_results_table_is_refused(tmp_path):
    trace, out = tmp_path / "ok.csv", tmp_path / "sw_bad.csv"
    trace.write_text(TRACE)
    out.write_text("garbage\n1\n")
    line = _one_error_line(_invoke(["sweep", "--trace", trace, "--allocator", "paged", "--workers", "1",
                                    "--quiet", "--out", out]))
    assert f"{out}: not a kvsim sweep results table: no point_id column (its columns: garbage)" in line
    assert out.read_text() == "garbage\n1\n"  # the user's file is left as it was
    assert not (tmp_path / "sw_bad.csv.parts").exists()


def test_a_parquet_table_without_point_id_is_named_too(tmp_path):
    table = tmp_path / "t.parquet"
    pd.DataFrame({"x": [1]}).to_parquet(table)
    with pytest.raises(ValueError, match=r"t\.parquet: not a kvsim sweep results table: no point_id column"):
        load_results(table)


def test_a_results_row_without_an_id_is_named_not_merged(tmp_path):
    # two empty ids would have become one "nan" row, the other dropped without a word
    table = tmp_path / "t.csv"
    table.write_text("point_id,status\nabc,ok\n,ok\n,ok\n")
    line = _one_error_line(_invoke(["plot", table, "--out", tmp_path / "x.png"]))
    assert f"{table}: row 2: point_id is empty" in line
