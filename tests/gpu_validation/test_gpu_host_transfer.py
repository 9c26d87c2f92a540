"""`gpu_validation.host_transfer`: the transfer rows on CPU (a check of the code: no link is measured here), the
link fit on rows of known latency and bandwidth, and the summary lines the GPU run prints."""

from __future__ import annotations

import math

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


def test_times_that_do_not_grow_with_size_fit_no_link():
    """A CPU's copies can take longer small than large: the least-squares slope then goes negative, which once
    printed a link of -19 GB/s; now the link is NaN and the summary says it was not fitted."""
    rows = pd.DataFrame([{"pattern": "contiguous", "direction": "host-to-device", "timing": "eager", "bytes": b, "seconds": t,
                          "gb_s": b / t / 1e9} for b, t in ((16384, 8e-3), (65536, 4e-3), (262144, 2e-3))])
    fit = fit_link(rows).iloc[0]
    assert math.isnan(fit.gb_s) and math.isnan(fit.latency_s)
    assert describe(rows)[0].startswith("  host-to-device  link not fitted: copy times do not grow with their size")


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


def test_the_transfer_kernel_moves_each_block_to_its_slot_in_one_launch_per_layer_and_kv():
    """HiCache's pattern, under the Triton interpreter on CPU: every layer's K and V of the chosen blocks land in
    their destination slots, nothing else is written, and the row counts a launch per layer and K/V."""
    pytest.importorskip("triton")
    import numpy as np
    import torch

    from gpu_validation.host_transfer import per_layer

    gen = torch.Generator().manual_seed(0)
    src = torch.randint(0, 255, (2, 2, 6, 64), dtype=torch.uint8, generator=gen)  # layers, K/V, slots, bytes
    dst = torch.zeros(2, 2, 5, 64, dtype=torch.uint8)
    src_slots, dst_slots = np.array([4, 0, 2]), np.array([1, 3, 0])
    rows = per_layer("host-to-device", dst, src, src_slots, dst_slots, Timer("cpu", warmup=0, repeats=1))
    assert [(r["pattern"], r["timing"], r["copies"], r["bytes_per_copy"], r["error"]) for r in rows] == [
        ("per-layer", "eager", 4, 3 * 64, "")]
    for s, d in zip(src_slots, dst_slots, strict=True):
        assert torch.equal(dst[:, :, d], src[:, :, s])
    assert int(dst[:, :, [2, 4]].sum()) == 0


def test_a_kernel_that_cannot_run_gives_nan_rows_with_its_reason():
    import numpy as np
    import torch

    from gpu_validation.host_transfer import per_layer

    src, dst = torch.zeros(1, 2, 4, 12, dtype=torch.uint8), torch.zeros(1, 2, 4, 12, dtype=torch.uint8)  # 12 B rows
    rows = per_layer("device-to-host", dst, src, np.array([0]), np.array([1]), Timer("cpu", warmup=0, repeats=1))
    assert len(rows) == 1 and rows[0]["error"].startswith("ValueError: need contiguous caches")
    assert rows[0]["seconds"] != rows[0]["seconds"]  # NaN
