"""Sweeps and SLO searches through the real simulator (small workloads, so each point takes milliseconds)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.kernel.config import SimConfig
from sim.sweep.grid import grid_from_flags
from sim.sweep.run import run_sweep

SUMMARY_KEYS = ["allocator", "requests", "completed", "rejected", "preemptions", "sim_time_s", "wall_time_s",
                "throughput_tok_s", "throughput_req_s", "mean_running", "max_running",
                "normalized_latency_s_per_tok", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "e2e_p50_s",
                "token_states_frac", "reservation_frac", "internal_frag_frac", "external_frag_frac", "free_frac",
                "block_usage_frac", "token_occupancy_frac", "shared_saved_frac"]
GRID = ["--allocator", "paged,contiguous-max", "--block-size", "16,32", "--seed", "0,1", "--num-requests", "40",
        "--rate", "4", "--memory-snapshots", "0"]


def _comparable(table: pd.DataFrame) -> pd.DataFrame:
    return table.drop(columns=["wall_time_s", "point_wall_s"])


def test_cli_sweep_with_two_workers_equals_one(tmp_path):
    runner = CliRunner()
    one = runner.invoke(main, ["sweep", *GRID, "--workers", "1", "--quiet", "--out", str(tmp_path / "a.parquet")])
    two = runner.invoke(main, ["sweep", *GRID, "--workers", "2", "--quiet", "--out", str(tmp_path / "b.parquet")])
    assert one.exit_code == 0 and two.exit_code == 0, one.output + two.output
    assert "8 points: 8 run (0 failed)" in two.output
    a, b = pd.read_parquet(tmp_path / "a.parquet"), pd.read_parquet(tmp_path / "b.parquet")
    pd.testing.assert_frame_equal(_comparable(a), _comparable(b))
    assert set(SUMMARY_KEYS) <= set(a.columns) and (a["status"] == "ok").all()
    assert (a["completed"] == 40).all()
    # contiguous-max ignores the block size, paged does not: the sweep sees the difference
    paged = a[a["allocator"] == "paged"]
    assert paged["internal_frag_frac"].nunique() > 1


def test_dask_cluster_matches_local_executor(tmp_path):
    distributed = pytest.importorskip("distributed")
    grid = grid_from_flags(GRID, SimConfig)
    local = run_sweep(grid, tmp_path / "a.parquet", workers=1).table
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        remote = run_sweep(grid, tmp_path / "b.parquet", executor="dask", scheduler=cluster.scheduler_address).table
    pd.testing.assert_frame_equal(_comparable(local), _comparable(remote))


def test_cli_slo_finds_a_bracketed_rate():
    result = CliRunner().invoke(main, [
        "slo", "--allocator", "paged,contiguous-max", "--num-requests", "100", "--memory-snapshots", "0",
        "--normalized-latency", "0.1", "--rate-max", "64", "--tolerance", "0.2", "--workers", "1", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["allocator"]: row for row in json.loads(result.output)}
    slab = rows["contiguous-max"]
    assert slab["status"] == "ok" and slab["rate_ok"] < slab["rate_fail"] <= slab["rate_ok"] * 1.2
    assert slab["normalized_latency_s_per_tok_at_ok"] <= 0.1
    assert slab["fail_reason"].startswith("normalized_latency_s_per_tok=")
    assert slab["simulations"] == len(json.loads(slab["probes"]))
    # paged memory batches more requests than max-length slabs, so it sustains a higher rate
    assert rows["paged"]["status"] in ("ok", "above-max")
    assert rows["paged"]["sustained_rate"] > slab["rate_fail"]
