"""`gpu_validation.host_transfer`: the transfer rows on CPU (a check of the code: no link is measured here), the
link fit on rows of known latency and bandwidth, and the summary lines the GPU run prints."""

from __future__ import annotations

import pandas as pd
import pytest

from allocators.catalog import get_model
from gpu_validation.host_transfer import describe, fit_link, host_transfers, main
from gpu_validation.timing import Timer


def test_every_pattern_and_direction_is_timed_on_cpu():
    rows = host_transfers(get_model("llama-3-8b"), device="cpu", timer=Timer("cpu", warmup=0, repeats=1))
    assert set(rows.pattern) == {"contiguous", "per-block"}
    assert set(rows.direction) == {"host-to-device", "device-to-host"}
    blocks = rows[rows.pattern == "per-block"]
    # one call per block, layer and K/V; a call moves one layer's K (or V) of a 16-token block: 16 x 8 x 128 x 2 B
    assert sorted(set(blocks.copies)) == [64, 256] and set(blocks.bytes_per_copy) == {32768}
    assert set(blocks.timing) == {"eager", "foreach"}  # graphs only on a GPU
    assert (rows.seconds > 0).all() and (rows["bytes"] == rows.copies * rows.bytes_per_copy).all()
    assert rows.gb_s.round(6).equals((rows["bytes"] / rows.seconds / 1e9).round(6))


def test_the_link_fit_recovers_a_known_latency_and_bandwidth():
    sizes = [2**k for k in range(15, 29, 2)]
    rows = pd.DataFrame([{"pattern": "contiguous", "direction": d, "bytes": b,
                          "seconds": lat + b / (gb * 1e9), "gb_s": b / (lat + b / (gb * 1e9)) / 1e9}
                         for d, lat, gb in (("host-to-device", 8e-6, 53.0), ("device-to-host", 5e-6, 55.0))
                         for b in sizes])
    fits = fit_link(rows).set_index("direction")
    assert fits.loc["host-to-device", "latency_s"] == pytest.approx(8e-6)
    assert fits.loc["host-to-device", "gb_s"] == pytest.approx(53.0)
    assert fits.loc["device-to-host", "gb_s"] == pytest.approx(55.0)
    assert fits.loc["device-to-host", "largest_copy_gb_s"] < 55.0


def test_a_copy_that_could_not_be_captured_is_reported_not_hidden(tmp_path, capsys):
    rows = pd.DataFrame([
        {"pattern": "per-block", "direction": "host-to-device", "timing": "cuda-graph", "copies": 4096,
         "bytes_per_copy": 32768, "bytes": 4096 * 32768, "seconds": float("nan"), "gb_s": float("nan"),
         "seconds_per_copy": float("nan"), "error": "CUDA graph capture failed (x)"}])
    assert describe(rows) == ["  host-to-device  per block, cuda-graph not timed: CUDA graph capture failed (x)"]
    out = tmp_path / "t.csv"
    assert main([str(out), "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "host-to-device  link" in printed and "per 32 KiB call" in printed and len(pd.read_csv(out)) == 14
