"""Every memory map joins the step row starting at its time, of its shares: none is left without its row where a
run (a fleet replica) ends with a map at its last instant, after its last row started."""

import dataclasses

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_memory_map
from tests.sim.test_memory_snapshots import map_shares, snapshot_keys
from workloads import Workload

CONFIG = SimConfig(kv_tokens=4000, memory_snapshots=6)


def orphans(result) -> list[tuple]:
    """The maps (their replica and time, or time) with no step row starting at their time."""
    memory, steps = result.memory, result.steps
    keys = snapshot_keys(memory)
    maps = memory[keys].drop_duplicates()
    joined = maps.merge(steps[keys].drop_duplicates(), on=keys, how="left", indicator=True)
    return [tuple(row) for row in joined.loc[joined["_merge"] == "left_only", keys].itertuples(index=False)]


def burst_then_late(late_prompt: int) -> Workload:
    """Twenty requests in the first second, then one at 100 s of ``late_prompt`` tokens."""
    return Workload(arrival_time_s=np.r_[np.linspace(0, 1, 20), 100.0],
                    prompt_tokens=np.r_[np.full(20, 200), late_prompt], output_tokens=np.full(21, 50), name="gap")


@pytest.mark.parametrize("workers", [1, 2])
def test_a_replica_idle_to_the_fleets_end_maps_its_idle_row(workers):
    """Replica 1 serves part of the burst, then idles to the fleet's end across every moment: its map of its idle
    pool was at that end, where no step row starts (its idle row starts where its last request left). It is now
    at the start of that idle row, of its shares: the pool the moments fell on, and the map nearest any instant
    of the stretch. The steps table is unchanged (one idle row to the end) and the summary counts one map a
    replica."""
    config = dataclasses.replace(CONFIG, replicas=2)
    fast = run_simulation(config, burst_then_late(200), workers=workers)
    slow = run_simulation(dataclasses.replace(config, step_by_step=True), burst_then_late(200), workers=workers)
    for r in (fast, slow):
        assert orphans(r) == []
        assert [states for states, _ in map_shares(r)] == [row for _, row in map_shares(r)]
        end = r.summary["sim_time_s"]  # the fleet's start is 0
        mine = r.steps[r.steps["replica"] == 1]
        idle = mine.iloc[-1]
        assert (idle["running"], idle["time_s"] + idle["duration_s"]) == (0, pytest.approx(end))
        assert (mine["duration_s"] > 0).all() and idle["time_s"] < 3.0  # no row added; idle since the burst
        assert r.memory.loc[r.memory["replica"] == 1, "time_s"].unique().tolist() == [idle["time_s"]]
        assert [s["memory_maps"] for s in r.summary["per_replica"]] == [1, 1] and r.summary["memory_maps"] == 2
    assert_same_memory_map(fast, slow)


def test_a_run_ending_as_its_last_request_is_refused_has_a_row_for_its_map():
    """The late request is refused on arrival (a prompt beyond max_model_len): the moments of the idle gap before
    it fall due there, where the run ends and no row started; the map of the idle pool now has an idle row of no
    duration at that time. The summary's shares are unchanged: the row lasts no time."""
    r = run_simulation(dataclasses.replace(CONFIG, max_model_len=1000), burst_then_late(3000))
    assert r.summary["rejected"] == 1 and r.summary["sim_time_s"] == 100.0
    assert orphans(r) == []
    assert [states for states, _ in map_shares(r)] == [row for _, row in map_shares(r)]
    assert r.steps[["time_s", "duration_s", "running"]].values[-1].tolist() == [100.0, 0.0, 0]
    assert r.steps["duration_s"].sum() == pytest.approx(100.0)
    tokens = r.memory[r.memory["state"] == "token"].groupby("time_s").size()
    assert 100.0 not in tokens.index  # the idle pool: every request done or refused


def test_a_fleet_replica_whose_last_request_is_refused_has_a_row_for_its_map():
    """On two replicas: round-robin hands the late request to a replica, which refuses it as it plans at 100 s and
    stops there, the fleet's end, its map of the moments the gap passed with an idle row of no duration; a router
    that reads replica state refuses it where it routes it, and the replicas idle since the burst map their idle
    pools at the start of their idle rows to that end. Every map has its row either way."""
    for router in ("round-robin", "least-requests"):
        config = dataclasses.replace(CONFIG, max_model_len=1000, replicas=2, router=router)
        r = run_simulation(config, burst_then_late(3000))
        assert r.summary["rejected"] == 1 and r.summary["sim_time_s"] == 100.0 and orphans(r) == []
        assert [states for states, _ in map_shares(r)] == [row for _, row in map_shares(r)]
        last_maps = r.memory.groupby("replica")["time_s"].max()
        last_rows = r.steps.groupby("replica").last()
        if router == "round-robin":  # replica 0 took the late request; replica 1 idles from the burst on
            assert last_maps.tolist() == [100.0, last_rows.loc[1, "time_s"]]
            assert last_rows[["time_s", "duration_s"]].values.tolist()[0] == [100.0, 0.0]
        else:
            assert (last_maps < 3.0).all() and (last_maps == last_rows["time_s"]).all()
