"""A column whose name states a time unit is not read as arrival times in another one: ``--columns
arrival_time_s=timestamp_ms`` (what an unknown-format error suggests) read milliseconds as seconds, a
3 req/s trace as 0.003 req/s, without a word."""

import json

import pytest
from click.testing import CliRunner

from sim.cli import main
from workloads import load_trace
from workloads.errors import TraceError, TraceWarning
from workloads.readers.formats import named_unit

SIZES = "prompt_tokens=input_len,output_tokens=output_len"


def write(tmp_path, time_column: str, scale: float) -> str:
    """31 requests at 3 req/s, their times in ``time_column`` as seconds x ``scale``."""
    path = tmp_path / "mytrace.csv"
    rows = "".join(f"{i / 3 * scale:.6f},{100 + i},{10 + i}\n" for i in range(31))
    path.write_text(f"{time_column},input_len,output_len\n{rows}")
    return str(path)


def test_a_milliseconds_column_mapped_as_seconds_is_an_error_naming_it(tmp_path):
    path = write(tmp_path, "timestamp_ms", 1000.0)
    result = CliRunner().invoke(main, ["trace", "stats", path, "--columns", f"arrival_time_s=timestamp_ms,{SIZES}"])
    assert result.exit_code != 0
    assert "column 'timestamp_ms'" in result.output and "milliseconds" in result.output
    assert "--trace-format mooncake" in result.output


def test_the_suggested_format_reads_it_in_milliseconds(tmp_path):
    path = write(tmp_path, "timestamp_ms", 1000.0)
    result = CliRunner().invoke(main, ["trace", "stats", path, "--trace-format", "mooncake", "--columns",
                                       f"arrival_time_s=timestamp_ms,{SIZES}", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rate_rps"] == pytest.approx(3.1, rel=0.01)


@pytest.mark.parametrize("column", ["arrivalTimeUs", "t_ns", "time (minutes)"])
def test_a_unit_kvsim_has_no_format_for_is_an_error(tmp_path, column):
    path = write(tmp_path, column, 1.0)
    with pytest.raises(TraceError, match="convert it to seconds"):
        load_trace(path, columns={"arrival_time_s": column, "prompt_tokens": "input_len",
                                  "output_tokens": "output_len"})


def test_a_seconds_column_read_as_milliseconds_is_an_error(tmp_path):
    path = write(tmp_path, "time_s", 1.0)
    with pytest.raises(TraceError, match="says seconds, but format mooncake reads it in milliseconds"):
        load_trace(path, format="mooncake", columns={"arrival_time_s": "time_s", "prompt_tokens": "input_len",
                                                     "output_tokens": "output_len"})


def test_the_advice_for_an_unread_milliseconds_column_keeps_its_unit(tmp_path):
    """The warning (and the missing-field error) that suggests a mapping must not suggest the misread."""
    path = write(tmp_path, "time_ms", 1000.0)
    with pytest.warns(TraceWarning, match=r"--trace-format mooncake --columns arrival_time_s=time_ms"):
        load_trace(path, columns={"prompt_tokens": "input_len", "output_tokens": "output_len"}, format="vidur")
    with pytest.raises(TraceError, match=r"--trace-format mooncake --columns arrival_time_s=time_ms"):
        load_trace(path, columns={"prompt_tokens": "input_len", "output_tokens": "output_len"})


def test_names_without_a_unit_and_the_formats_own_columns_read_as_before():
    assert [named_unit(c) for c in ("timestamp", "TIMESTAMP", "Timestamp", "arrival_time_s", "tms", "time")] == [
        None, None, None, "s", None, None]
    assert [named_unit(c) for c in ("TimestampMs", "t_msec", "time (ms)", "ts_us")] == ["ms", "ms", "ms", "us"]
