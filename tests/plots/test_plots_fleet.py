"""Fleet figures: per-replica memory and queue over time (also as `kvsim plot --kind replicas`), hit rate by
router, one replica's memory map."""

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from matplotlib.figure import Figure

from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.runner import run_config
from sim.plots import plot_hit_rate_by_router, plot_memory_map, plot_replicas_over_time
from sim.plots.memory_map import memory_snapshot


def test_replicas_over_time_draws_a_line_per_replica():
    result = run_config(SimConfig(num_requests=80, rate=6.0, kv_gib=2.0, replicas=3, memory_snapshots=0))
    fig = plot_replicas_over_time(result.steps)
    assert isinstance(fig, Figure)
    memory_ax, queue_ax = fig.axes
    assert len(memory_ax.lines) == len(queue_ax.lines) == 3
    with pytest.raises(ValueError, match="replica"):
        plot_replicas_over_time(result.steps.drop(columns="replica"))


def test_hit_rate_by_router_groups_bars():
    table = pd.DataFrame({"router": ["round-robin", "prefix-aware"] * 2, "replicas": [4, 4, 8, 8],
                          "prefix_hit_frac": [0.08, 0.17, 0.07, 0.26]})
    fig = plot_hit_rate_by_router(table, x="replicas")
    heights = sorted(round(p.get_height(), 2) for p in fig.axes[0].patches)
    assert heights == [0.07, 0.08, 0.17, 0.26]


def test_cli_plot_kind_replicas(tmp_path):
    run_dir = tmp_path / "fleet"
    runner = CliRunner()
    args = ["run", "--num-requests", "40", "--replicas", "2", "--router", "least-requests", "--out", str(run_dir)]
    assert runner.invoke(main, args).exit_code == 0
    assert "replica" in pd.read_parquet(run_dir / "requests.parquet").columns
    result = runner.invoke(main, ["plot", str(run_dir), "--kind", "replicas"])
    assert result.exit_code == 0, result.output
    assert (run_dir / "replicas.png").is_file()


def fleet_memory() -> pd.DataFrame:
    """Two replicas' snapshots of a 64-slot pool, both taken at t = 5 s (replica 1 fuller)."""
    def snapshot(replica, held):
        owners = [-1] * 64
        owners[:held] = [replica] * held
        return pd.DataFrame({"time_s": 5.0, "slot": range(64), "owner": owners, "replica": replica})
    return pd.concat([snapshot(0, 8), snapshot(1, 40)], ignore_index=True)


def test_memory_map_of_a_fleet_shows_one_replica_and_says_which():
    """Regression: the snapshots of every replica were taken for one pool's (a 'middle of 2N snapshots' of an
    unnamed replica, or an error where two replicas snapshotted at the same instant)."""
    memory = fleet_memory()
    assert memory_snapshot(memory).replica == (0, 2)
    assert (memory_snapshot(memory, replica=1).owners == 1).sum() == 40
    title = plot_memory_map(memory, replica=1).axes[0].get_title(loc="left")
    assert title.startswith("replica 1 of 2, t = 5.00 s")
    with pytest.raises(ValueError, match="no replica 3"):
        memory_snapshot(memory, replica=3)
    with pytest.raises(ValueError, match="of one replica"):
        memory_snapshot(memory.drop(columns="replica").iloc[:64], replica=0)


def test_cli_memory_map_takes_a_replica(tmp_path):
    run_dir = tmp_path / "fleet"
    runner = CliRunner()
    args = ["run", "--num-requests", "40", "--replicas", "2", "--router", "least-requests", "--out", str(run_dir)]
    assert runner.invoke(main, args).exit_code == 0
    result = runner.invoke(main, ["plot", str(run_dir), "--kind", "memory-map", "--replica", "1"])
    assert result.exit_code == 0, result.output
    assert (run_dir / "memory-map.png").is_file()
    result = runner.invoke(main, ["plot", str(run_dir), "--kind", "memory", "--replica", "1"])
    assert result.exit_code == 2 and "--replica applies to --kind memory-map" in result.output


def test_a_fleets_steps_are_binned_per_replica_and_added():
    """A fleet's steps table interleaves its replicas' rows; read as one timeline each row held until the next
    replica's row, so the batch and memory figures jumped between replicas. Binned per replica and added, two
    replicas running 3 and 5 requests (on pools of 100 and 300 slots, 50 and 60 used) are 8 running, 110 of 400."""
    from sim.plots.data import time_binned

    one = pd.DataFrame({"replica": 0, "time_s": np.arange(0, 10, 1.0), "duration_s": 1.0, "running": 3,
                        "used": 50, "capacity": 100})
    two = pd.DataFrame({"replica": 1, "time_s": np.arange(0.5, 10.5, 1.0), "duration_s": 1.0, "running": 5,
                        "used": 60, "capacity": 300})
    steps = pd.concat([one, two]).sort_values("time_s", kind="stable")
    binned = time_binned(steps, ["running", "used", "capacity"], max_points=5)
    inside = binned[(binned["time_s"] >= 1) & (binned["time_s"] + binned["bin_s"] <= 10)]
    assert len(inside) and np.allclose(inside["running"], 8) and np.allclose(inside["used"] / inside["capacity"],
                                                                             110 / 400)
