"""A fleet whose router reads no replica state, run in worker processes (`sim.kernel.fleet_parallel`): the
tables and summary are byte for byte those of the one-process fleet; other routers run in one process with a
note; a bad worker count is a one-line error."""

import json

import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.fleet_parallel import parallel_note, replica_groups, runs_in_parallel
from sim.kernel.runner import run_simulation, write_result
from tests.sim.test_sim_fleet import shared_prefixes


def _files(result, out):
    """Every file `write_result` writes, as bytes; the summary without its wall-clock time."""
    result.summary.pop("wall_time_s")
    return {p.name: p.read_bytes() for p in write_result(result, out, "csv")}


@pytest.mark.parametrize("router", ["round-robin", "random"])
def test_parallel_fleet_is_byte_identical(router, tmp_path):
    """Guards the parallel path's exactness: routing (the same random draws), the split of replicas among
    workers, and the merge of requests, steps, memory snapshots and summaries give the files of workers=1."""
    w = shared_prefixes(240, 25.0)
    config = SimConfig(kv_tokens=5000, prefix_caching=True, memory_snapshots=3, replicas=5, router=router,
                       cpu_offload_gib=0.2)  # 16 host blocks of OPT-13B's 13 MB (0.01 GiB held none)
    assert runs_in_parallel(config, 3)
    one = run_simulation(config, w)
    assert one.summary["rejected"] + one.summary["completed"] == 240 and len(one.memory) > 0
    assert one.summary["prefix_hit_frac"] > 0
    expected = _files(one, tmp_path / "one")
    for workers in (2, 3):
        assert _files(run_simulation(config, w, workers=workers), tmp_path / str(workers)) == expected


def test_replica_groups_are_contiguous_and_fixed():
    assert replica_groups(5, 2) == [[0, 1, 2], [3, 4]]
    assert replica_groups(3, 8) == [[0], [1], [2]]


def test_state_reading_router_runs_in_one_process_with_a_note():
    """--workers with least-requests is not an error: the fleet runs in one process and stderr says why."""
    config = SimConfig(replicas=2, router="least-requests")
    assert not runs_in_parallel(config, 2)
    assert "runs in one process" in parallel_note(config, 2)
    assert parallel_note(SimConfig(replicas=2), 2) is None and parallel_note(config, 1) is None
    args = ["run", "--num-requests", "30", "--replicas", "2", "--router", "least-requests", "--json"]
    base = CliRunner().invoke(main, args)
    parallel = CliRunner().invoke(main, [*args, "--workers", "2"])
    assert base.exit_code == parallel.exit_code == 0, parallel.output
    assert "least-requests reads it at every arrival, so the fleet runs in one process" in parallel.stderr
    drop = lambda out: {k: v for k, v in json.loads(out).items() if k != "wall_time_s"}  # noqa: E731
    assert drop(parallel.stdout) == drop(base.stdout)


@pytest.mark.parametrize("value", ["0", "-2"])
@pytest.mark.parametrize("command", ["run", "compare"])
def test_bad_worker_counts_are_one_line_errors(command, value):
    result = CliRunner().invoke(main, [command, "--num-requests", "5", "--workers", value])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: --workers must be a positive integer, got {value}"
