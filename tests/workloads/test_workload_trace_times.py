"""Regression: huge trace timestamps are rebased to the first arrival, so sub-step times keep their
precision; non-finite timestamps are a `TraceError` naming the file, line and field."""

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from workloads.errors import TraceError
from workloads.named import load_trace


def write_csv(path, times):
    rows = "".join(f"{t},100,10\n" for t in times)
    path.write_text("arrival_time_s,prompt_tokens,output_tokens\n" + rows)
    return path


def test_huge_arrivals_are_rebased_and_keep_precision(tmp_path):
    path = write_csv(tmp_path / "t.csv", ["1700000000000.0", "1700000000000.5"])
    w = load_trace(path)
    assert w.arrival_time_s.tolist() == [0.0, 0.5]
    assert "rebased by 1700000000000 s" in w.source
    r = run_simulation(SimConfig(trace=str(path), step_time=0.001, kv_tokens=10_000), w)
    assert r.requests["ttft_s"].tolist() == pytest.approx([0.001, 0.001], rel=1e-9)


def test_arrivals_near_the_float_limit_keep_their_latencies(tmp_path):
    path = write_csv(tmp_path / "t.csv", ["1e308", "1e308"])
    w = load_trace(path)
    r = run_simulation(SimConfig(step_time=0.01, kv_tokens=10_000), w)
    assert (r.requests["e2e_s"] > 0).all()
    assert r.requests["e2e_s"].tolist() == pytest.approx([0.1, 0.1])


def test_trace_starting_at_zero_is_unchanged(tmp_path):
    w = load_trace(write_csv(tmp_path / "t.csv", ["0", "0.25", "1.5"]))
    assert w.arrival_time_s.tolist() == [0.0, 0.25, 1.5]
    assert "rebased" not in w.source


@pytest.mark.parametrize("value", ["inf", "1e400", "nan"])
def test_non_finite_arrival_names_file_line_and_field(tmp_path, value):
    path = write_csv(tmp_path / "t.csv", ["0", value])
    with pytest.raises(TraceError, match=r"t\.csv: line 3: field 'arrival_time_s'"):
        load_trace(path)


def test_an_arrival_past_the_clock_after_the_first_names_file_line_and_field(tmp_path):
    """Timestamps count from the first arrival, within `MAX_ARRIVAL_S` of it: 1e30 s later was read, and run on a
    clock that no longer resolved a step. An epoch-sized first timestamp is no slip (rebased above)."""
    path = write_csv(tmp_path / "t.csv", ["1700000000", "1700000001", str(1700000000 + 1e9), "1e30"])
    with pytest.raises(TraceError, match=r"t\.csv: line 5: field 'arrival_time_s': more than 1e\+09 s \(about 32 "
                                         r"years\) after the first arrival \(got 1e\+30\)"):
        load_trace(path)
    w = load_trace(path, skip_bad_rows=True)
    assert w.arrival_time_s.tolist() == [0.0, 1.0, 1e9]
    assert w.skipped_reasons == {"arrival_time_s: more than 1e+09 s (about 32 years) after the first arrival": 1}


def test_rebasing_jsonl_and_parquet(tmp_path):
    import pandas as pd

    frame = pd.DataFrame({"arrival_time_s": [5e12, 5e12 + 0.25], "prompt_tokens": [10, 10],
                          "output_tokens": [5, 5]})
    frame.to_parquet(tmp_path / "t.parquet")
    frame.to_json(tmp_path / "t.jsonl", orient="records", lines=True)
    for name in ("t.parquet", "t.jsonl"):
        w = load_trace(tmp_path / name)
        np.testing.assert_array_equal(w.arrival_time_s, [0.0, 0.25])
