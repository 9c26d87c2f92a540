"""Running sweeps: rows in grid order, failures recorded, reruns skip finished points, executors agree."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from test_sweep_fakes import queue_point, slow_point

from sim.kernel.config import SimConfig
from sim.sweep.executors import run_tasks
from sim.sweep.grid import Grid, grid_from_flags
from sim.sweep.run import run_sweep
from sim.sweep.store import ResultStore, load_results

WALL = ["wall_time_s", "point_wall_s"]


def _grid(*tokens: str) -> Grid:
    return grid_from_flags(list(tokens), SimConfig)


def _comparable(table: pd.DataFrame) -> pd.DataFrame:
    return table.drop(columns=[c for c in WALL if c in table.columns])


def test_rows_follow_grid_order_with_config_and_summary(tmp_path):
    grid = _grid("--allocator", "paged,contiguous-max", "--block-size", "8,16", "--rate", "1,2")
    report = run_sweep(grid, tmp_path / "s.parquet", point_fn=queue_point)
    table = report.table
    assert len(table) == 8 and report.ran == 8 and report.failed == 0 and report.skipped == 0
    assert list(table["allocator"]) == ["paged"] * 4 + ["contiguous-max"] * 4
    assert list(table["block_size"]) == [8, 8, 16, 16] * 2
    assert list(table["rate"]) == [1.0, 2.0] * 4
    assert {"point_id", "status", "error", "kv_gib", "seed", "e2e_p50_s", "throughput_req_s"} <= set(table)
    assert (table["status"] == "ok").all() and table["error"].isna().all()
    assert table["point_id"].is_unique
    # the file on disk is the same table, parts merged away
    assert _comparable(pd.read_parquet(tmp_path / "s.parquet")).equals(_comparable(table))
    assert not (tmp_path / "s.parquet.parts").exists()
    # max_model_len is None everywhere, block_size an int column (not floats)
    assert table["block_size"].dtype == "int64"


def test_failed_and_invalid_points_are_recorded_and_the_sweep_goes_on(tmp_path):
    grid = _grid("--allocator", "broken,paged", "--max-num-seqs", "256,4096")
    report = run_sweep(grid, tmp_path / "s.parquet", point_fn=queue_point)
    table = report.table
    assert list(table["status"]) == ["failed", "failed", "ok", "failed"]
    assert table["error"][0] == "RuntimeError: simulated failure"
    assert "--max-num-batched-tokens (2048) must be >= --max-num-seqs" in table["error"][1]
    assert report.failed == 3 and report.ran == 4
    assert math.isnan(table["e2e_p50_s"][0]) and table["e2e_p50_s"][2] > 0


def test_rerun_skips_done_points_and_retries_failed(tmp_path):
    out = tmp_path / "s.parquet"
    calls: list[str] = []

    def counting(config):
        calls.append(config.allocator)
        return queue_point(config)

    run_sweep(_grid("--allocator", "paged,broken"), out, point_fn=counting)
    assert calls == ["paged", "broken"]
    calls.clear()
    report = run_sweep(_grid("--allocator", "paged,broken,contiguous-max"), out, point_fn=counting)
    assert calls == ["broken", "contiguous-max"]
    assert report.skipped == 1 and report.ran == 2
    assert list(report.table["allocator"]) == ["paged", "broken", "contiguous-max"]
    # a different grid later returns its own rows; the file keeps every row, the new grid's first
    report = run_sweep(_grid("--allocator", "contiguous-pow2,contiguous-max"), out, point_fn=counting)
    assert list(report.table["allocator"]) == ["contiguous-pow2", "contiguous-max"] and report.skipped == 1
    assert list(pd.read_parquet(out)["allocator"]) == ["contiguous-pow2", "contiguous-max", "paged", "broken"]


def test_interrupted_sweep_keeps_finished_points(tmp_path):
    out = tmp_path / "s.parquet"

    def interrupted(config):
        if config.seed == 2:
            raise KeyboardInterrupt
        return queue_point(config)

    with pytest.raises(KeyboardInterrupt):
        run_sweep(_grid("--seed", "0,1,2,3"), out, point_fn=interrupted)
    assert list(load_results(out)["seed"]) == [0, 1]
    calls: list[int] = []

    def counting(config):
        calls.append(config.seed)
        return queue_point(config)

    report = run_sweep(_grid("--seed", "0,1,2,3"), out, point_fn=counting)
    assert calls == [2, 3] and list(report.table["seed"]) == [0, 1, 2, 3]


def test_unmerged_parts_count_as_done(tmp_path):
    out = tmp_path / "s.parquet"
    run_sweep(_grid("--seed", "0,1"), out, point_fn=queue_point)
    store = ResultStore(out)
    row = pd.read_parquet(out).iloc[0].to_dict()
    row["mean_running"] = -1.0  # a newer part for the same point wins over the merged table
    store.append(row)
    assert store.rows()[row["point_id"]]["mean_running"] == -1.0
    report = run_sweep(_grid("--seed", "0,1"), out, point_fn=queue_point)
    assert report.skipped == 2 and report.table["mean_running"][0] == -1.0


def test_csv_table(tmp_path):
    report = run_sweep(_grid("--seed", "0,1"), tmp_path / "s.csv", point_fn=queue_point)
    assert len(report.table) == 2
    assert pd.read_csv(tmp_path / "s.csv")["seed"].tolist() == [0, 1]


def test_duplicate_points_are_run_once(tmp_path):
    calls: list[int] = []

    def counting(config):
        calls.append(config.seed)
        return queue_point(config)

    # two axes that name the same configuration twice (an axis value equal to the base's)
    grid = Grid({}, {"seed": (0, 1), "watermark": (0.01, 0.01)})
    report = run_sweep(grid, tmp_path / "t.parquet", point_fn=counting)
    assert len(report.table) == 2 and report.duplicates == 2 and calls == [0, 1]
    assert "2 duplicate point(s) merged" in report.line()


def test_process_workers_match_in_process(tmp_path):
    grid = _grid("--allocator", "paged,contiguous-max,broken", "--rate", "1,2,3")
    inline = run_sweep(grid, tmp_path / "a.parquet", point_fn=slow_point, workers=1).table
    pooled = run_sweep(grid, tmp_path / "b.parquet", point_fn=slow_point, workers=2).table
    pd.testing.assert_frame_equal(_comparable(inline), _comparable(pooled))


def test_dask_cluster_matches_local(tmp_path):
    distributed = pytest.importorskip("distributed")
    grid = _grid("--allocator", "paged,broken", "--block-size", "8,16", "--seed", "0,1")
    local = run_sweep(grid, tmp_path / "a.parquet", point_fn=queue_point, workers=1).table
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp", host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        remote = run_sweep(grid, tmp_path / "b.parquet", point_fn=queue_point, executor="dask",
                           scheduler=cluster.scheduler_address).table
    pd.testing.assert_frame_equal(_comparable(local), _comparable(remote))


def test_executor_arguments_are_checked():
    with pytest.raises(ValueError, match="unknown executor"):
        run_tasks(abs, [1], executor="slurm")
    with pytest.raises(ValueError, match="only used with the dask executor"):
        run_tasks(abs, [1], scheduler="tcp://127.0.0.1:8786")
    with pytest.raises(ValueError, match="at least 1"):
        run_tasks(abs, [1], workers=0)


def test_worker_errors_come_back_as_outcomes():
    outcomes = sorted(run_tasks(_reciprocal, [1, 0, 2], workers=2), key=lambda o: o.index)
    assert [o.result for o in outcomes] == [1.0, None, 0.5]
    assert outcomes[1].error == "ZeroDivisionError: division by zero"


def _reciprocal(x: int) -> float:
    return 1 / x


def test_bad_table_name_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="must end in .parquet or .csv"):
        ResultStore(tmp_path / "s.txt")


def test_progress_bar_counts_points_and_failures(tmp_path, capsys):
    run_sweep(_grid("--allocator", "paged,broken"), tmp_path / "s.parquet", point_fn=queue_point, progress=True)
    err = capsys.readouterr().err
    assert "2/2" in err and "failed=1" in err
