"""`kvsim plan`: the replica search finds what a loop over every N finds, with far fewer simulations."""

import dataclasses
import json

import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.commands.plan import format_plan
from sim.kernel.config import SimConfig
from sim.sweep.point import simulate_point
from sim.sweep.replicas import search_replicas
from sim.sweep.slo import SloTarget

TARGET = SloTarget({"ttft_p99_s": 1.0})


def threshold_point(needed: int):
    """A fake simulator: the target holds from ``needed`` replicas on."""
    def point(config):
        ok = config.replicas >= needed
        return {"requests": 10, "completed": 10, "rejected": 0, "ttft_p99_s": 0.5 if ok else 5.0,
                "replicas": config.replicas}
    return point


@pytest.mark.parametrize("needed", [1, 2, 3, 5, 8, 13, 37, 64])
def test_search_finds_the_threshold_with_few_simulations(needed):
    row = search_replicas(threshold_point(needed), SimConfig(), TARGET, max_replicas=64)
    assert row["status"] == "ok" and row["replicas"] == needed
    assert row["summary"]["replicas"] == needed
    assert row["simulations"] <= 2 * 6 + 1
    assert all(ok == (n >= needed) for n, ok in row["probes"])


def test_a_probe_too_short_for_steady_state_is_warned_of():
    """As the rate search does: a fleet that met the target only because the probe's arrivals stopped before
    its queues could grow (completions behind arrivals) carries a warning; one that keeps up does not."""
    def fleet(throughput):
        return lambda config: {"requests": 1000, "completed": 1000, "rejected": 0, "ttft_p99_s": 0.5,
                               "e2e_p50_s": 2.0, "throughput_req_s": throughput}
    behind = search_replicas(fleet(6.0), SimConfig(rate=8.0), TARGET)
    assert behind["replicas"] == 1 and "completions (6 req/s) fell behind arrivals (8 req/s)" in behind["warning"]
    assert search_replicas(fleet(8.0), SimConfig(rate=8.0), TARGET)["warning"] is None
    assert search_replicas(fleet(6.0), SimConfig(), TARGET)["warning"] is None  # no rate to compare with


def test_search_reports_when_even_the_most_replicas_fail():
    row = search_replicas(threshold_point(100), SimConfig(), TARGET, max_replicas=10)
    assert row["status"] == "above-max" and row["replicas"] is None
    assert [n for n, _ in row["probes"]] == [1, 2, 4, 8, 10]


def test_search_equals_a_brute_force_loop_on_the_simulator():
    """The real simulator on a small case: the first N whose run meets the target, tried one by one."""
    config = SimConfig(preset="sharegpt-paper", num_requests=120, rate=12.0, kv_gib=2.0, router="least-requests",
                       memory_snapshots=0)
    target = SloTarget({"ttft_p99_s": 0.5})
    brute = next(n for n in range(1, 17)
                 if target.check(simulate_point(dataclasses.replace(config, replicas=n))) is None)
    assert brute > 2  # a case where the search has something to find
    row = search_replicas(simulate_point, config, target, max_replicas=16)
    assert row["replicas"] == brute
    assert row["simulations"] < brute


def test_cli_plan_json_per_router(tmp_path):
    args = ["plan", "--preset", "sharegpt-paper", "--num-requests", "60", "--rate", "8", "--kv-gib", "2",
            "--memory-snapshots", "0", "--router", "round-robin,least-requests", "--ttft-p99", "1",
            "--max-replicas", "8", "--workers", "1", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["router"] for r in rows] == ["round-robin", "least-requests"]
    for row in rows:
        assert row["status"] == "ok" and 1 <= row["replicas"] <= 8
        assert row["summary"]["ttft_p99_s"] <= 1
        assert row["summary"].get("replicas", 1) == row["replicas"]
    table = CliRunner().invoke(main, args[:-1])
    assert table.exit_code == 0, table.output
    assert "round-robin" in table.output and "replicas" in table.output


def test_cli_plan_refuses_a_replica_count():
    result = CliRunner().invoke(main, ["plan", "--replicas", "2", "--ttft-p99", "1", "--workers", "1"])
    assert result.exit_code == 2
    assert "do not give --replicas" in result.output


def test_cli_plan_warns_of_a_bound_written_in_milliseconds():
    """The warning reaches the command line as one ``Warning:`` line, before anything is simulated."""
    result = CliRunner().invoke(main, ["plan", "--ttft-p99", "500", "--max-replicas", "0", "--workers", "1"])
    assert result.exit_code == 2
    assert ("Warning: --ttft-p99 500 bounds ttft_p99_s at 500 s; the bounds are in seconds: if you meant 500 ms, "
            "give 0.5") in result.stderr.splitlines()


def test_the_plan_table_shows_preempted_re_hits_beside_the_hit_rate():
    """On a workload with no shared prefix the hit rate is preempted requests re-hitting their own blocks: the
    table says how many of the hit tokens those are."""
    row = {"router": "round-robin", "status": "ok", "replicas": 2, "simulations": 3,
           "summary": {"ttft_p99_s": 0.9, "prefix_hit_frac": 0.059, "preempted_hit_tokens": 12345}}
    header, line = format_plan([row], ["router"]).splitlines()
    cells = dict(zip(header.split(), line.split(), strict=False))
    assert cells["prefix_hit_frac"] == "0.059" and cells["preempted_hit_tokens"] == "12345"


@pytest.mark.parametrize("as_json", [False, True])
def test_a_failed_search_fails_the_plan(as_json):
    """A router the grid cannot run (a typo) fails its search: the table (or JSON) still shows every row, the
    failed one with no replica count (not the grid's 1), and the command exits 1 with one Error line, as
    `kvsim slo` and `kvsim sweep` do."""
    args = ["plan", "--preset", "sharegpt-paper", "--num-requests", "40", "--rate", "4", "--kv-gib", "2",
            "--memory-snapshots", "0", "--router", "round-robin,foo", "--ttft-p99", "5", "--max-replicas", "4",
            "--workers", "1"] + (["--json"] if as_json else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[-1].startswith("Error: 1 of 2 searches failed: 1 x ValueError: --router must")
    if as_json:
        rows = json.loads(result.stdout)
        assert [(r["router"], r["status"], r["replicas"]) for r in rows][1] == ("foo", "failed", None)
