"""When the memory-map snapshots are taken: spread over the arrivals (open loop) or over the requests (arrivals
released by requests leaving, whose span is not known before the run); and what they show: the step row starting
at their instant, slot for slot its memory shares."""

import dataclasses

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from sim.kernel.snapshot_schedule import SnapshotSchedule
from tests.sim.summaries import assert_same_memory_map
from workloads import ClosedLoop, Workload
from workloads.named import generate

CONFIG = SimConfig(kv_tokens=4000, memory_snapshots=6)
SHARES_OF_STATES = {"token_states": ["token"], "reservation": ["reserved"], "internal_frag": ["internal_frag"],
                    "external_frag": ["overhead", "external_frag"], "free": ["free"]}
"""The step row's memory columns and the map states that make each up."""


def snapshot_keys(memory) -> list[str]:
    """The columns that tell one snapshot from another: its time, and a fleet's replica."""
    return ["replica", "time_s"] if "replica" in memory else ["time_s"]


def map_shares(result) -> list[tuple[dict, dict]]:
    """Per snapshot (of each replica): the slots of each state, summed as `SHARES_OF_STATES`, and the memory
    columns of the step row starting at its instant; every map has one (a fleet replica's map of its idle pool
    at the fleet's end: the idle row of no duration there)."""
    pairs = []
    memory, steps = result.memory, result.steps
    for key, rows in memory.groupby(snapshot_keys(memory)):
        counts = rows["state"].value_counts()
        mine = steps[steps["replica"] == key[0]] if "replica" in steps else steps
        at = mine[mine["time_s"] == key[-1]]
        assert len(at), f"the map at {key} has no step row starting at its time"
        row = at.iloc[0]
        slots = {share: int(counts.reindex(states, fill_value=0).sum())
                 for share, states in SHARES_OF_STATES.items()}
        pairs.append((slots, {share: int(row[share]) for share in SHARES_OF_STATES}))
    return pairs


@pytest.mark.parametrize("allocator, options", [
    ("contiguous-max", {}), ("contiguous-pow2", {}), ("contiguous-oracle", {"placement": "first-fit"}),
    ("paged", {}), ("paged", {"replicas": 2, "kv_tokens": 2500}), ("paged-cow", {}), ("vattention", {}),
    ("radix", {}),
    ("paged", {"model": "test-hybrid", "gpu": "h100-80gb", "kv_tokens": 1500}),
    ("contiguous-oracle", {"model": "test-hybrid", "gpu": "h100-80gb", "kv_tokens": 1500,  # ring-buffer slabs
                           "placement": "first-fit"}),
    ("contiguous-max", {"model": "test-hybrid", "gpu": "h100-80gb", "max_model_len": 2048}),
])
def test_a_map_counts_the_step_rows_shares(allocator, options, hybrid_model):
    """Every map's states, slot for slot, are the memory columns of the step row starting at its instant: while
    a request waits that memory cannot take, the free slots the breakdown counts as external fragmentation are
    ``external_frag`` in the map, ``free`` only while nobody waits; and the map is of the pool as that row holds
    it, its step planned (admissions, prefill chunks, growth). A burst that queues, then a few requests alone;
    the fast-forward and step by step alike."""
    rng = np.random.default_rng(0)
    w = Workload(arrival_time_s=np.r_[np.linspace(0, 1, 40), np.linspace(40, 100, 4)],
                 prompt_tokens=rng.integers(100, 800, 44), output_tokens=rng.integers(20, 300, 44), name="burst")
    config = SimConfig(**{"kv_tokens": 5000, "memory_snapshots": 8, "allocator": allocator, "step_time": 0.02}
                       | options)
    fast, slow = run_simulation(config, w), run_simulation(dataclasses.replace(config, step_by_step=True), w)
    for result in (fast, slow):
        pairs = map_shares(result)
        assert [states for states, _ in pairs] == [row for _, row in pairs]
    waits = fast.memory.groupby(snapshot_keys(fast.memory))["state"].value_counts().unstack()
    assert ((waits["external_frag"] > 0) & (waits["free"] == 0)).any()  # a map taken while a request waits
    assert ((waits["external_frag"] == 0) & (waits["free"] > 0)).any()  # and one while nobody does
    assert_same_memory_map(fast, slow)


def snapshot_times(result) -> list[float]:
    return sorted(set(result.memory["time_s"]))


def test_a_closed_loop_is_snapshotted_over_its_requests():
    """Regression: a closed loop's arrival times are all 0, so every snapshot fell at the start (one table of
    an empty pool)."""
    rng = np.random.default_rng(0)
    w = Workload(arrival_time_s=np.zeros(300), prompt_tokens=rng.integers(50, 500, 300),
                 output_tokens=rng.integers(20, 300, 300), name="closed")
    w = w.select(np.arange(300), closed_loop=ClosedLoop(users=8, think_time_s=0.2))
    r = run_simulation(CONFIG, w)
    times = snapshot_times(r)
    assert len(times) == r.summary["memory_snapshots"] == r.summary["memory_maps"] == 6
    arrivals = np.sort(r.requests["arrival_s"].to_numpy())
    for k, t in enumerate(times):  # at the first row starting once 43, 86, ... 258 requests have arrived
        assert arrivals[int(np.ceil(300 * (k + 1) / 7)) - 1] <= t < r.requests["finished_s"].max()
    tokens = r.memory[r.memory["state"] == "token"].groupby("time_s").size()
    assert len(tokens) == 6 and (tokens > 0).all()


def test_a_batch_arriving_at_once_is_snapshotted_as_its_requests_leave():
    """Regression: an open-loop workload whose requests all arrive at 0 (an offline batch) has no arrival span,
    so every moment fell at the start and the one snapshot showed an empty pool."""
    rng = np.random.default_rng(0)
    w = Workload(arrival_time_s=np.zeros(200), prompt_tokens=rng.integers(50, 800, 200),
                 output_tokens=rng.integers(20, 400, 200), name="batch")
    config = dataclasses.replace(CONFIG, kv_tokens=20000)
    fast, slow = run_simulation(config, w), run_simulation(dataclasses.replace(config, step_by_step=True), w)
    times = snapshot_times(fast)
    assert len(times) == fast.summary["memory_snapshots"] == 6
    finished = np.sort(fast.requests["finished_s"].to_numpy())
    for k, t in enumerate(times):  # at the first row starting once 29, 58, ... 172 requests have left
        assert finished[int(np.ceil(200 * (k + 1) / 7)) - 1] <= t < finished[-1]
    tokens = fast.memory[fast.memory["state"] == "token"].groupby("time_s").size()
    assert len(tokens) == 6 and (tokens > 0).all()
    assert np.allclose(times, snapshot_times(slow), rtol=1e-12)
    fleet = run_simulation(dataclasses.replace(config, replicas=2), w)  # each replica over its own requests
    assert fleet.memory.groupby("replica")["time_s"].nunique().tolist() == [6, 6]
    assert fleet.summary["memory_snapshots"] == 6 and fleet.summary["memory_maps"] == 12  # both replicas' maps


def test_session_turns_released_by_think_time_are_snapshotted_on_every_replica():
    w = generate("lognormal:prompt_mean=300,prompt_cv=1,output_mean=100,output_cv=1,max_total=3000",
                 "poisson:rate=2", 120, seed=1, turns=3, think_time_s=1.0)
    r = run_simulation(dataclasses.replace(CONFIG, replicas=2, router="prefix-aware"), w)
    per_replica = r.memory.groupby("replica")["time_s"].nunique()
    assert per_replica.tolist() == [6, 6] and r.summary["memory_snapshots"] == 6
    assert max(snapshot_times(r)) > 0.5 * r.requests["finished_s"].max()


def test_moments_one_row_passes_make_one_snapshot():
    """Open loop, a burst then one request 100 s later: the moments spread over the span fall in the idle gap,
    which one idle row covers, so they make one snapshot (the summary counts the moments)."""
    w = Workload(arrival_time_s=np.r_[np.linspace(0, 1, 20), 100.0], prompt_tokens=np.full(21, 200),
                 output_tokens=np.full(21, 50), name="gap")
    r = run_simulation(CONFIG, w)
    times = snapshot_times(r)
    assert len(times) == r.summary["memory_maps"] < r.summary["memory_snapshots"] == 6
    assert times[-1] >= 100.0


def test_a_single_requests_run_makes_one_map():
    """Every moment falls within the one request's run, which a prefill row and one decode run cover: the first
    moment waits for the end of the prefill row, the rest pass inside the decode run's row."""
    w = Workload(arrival_time_s=np.zeros(1), prompt_tokens=np.full(1, 200), output_tokens=np.full(1, 50),
                 name="one")
    r = run_simulation(CONFIG, w)
    assert r.summary["memory_snapshots"] == 6 and r.summary["memory_maps"] == len(snapshot_times(r)) == 1


@pytest.mark.parametrize("workers", [1, 2])
def test_a_fleet_counts_each_replicas_maps(workers):
    """Each replica snapshots its own pool: the fleet's memory_maps is the maps its table holds, every replica's,
    and each per-replica summary counts its own; two processes (``workers``) count as one does. The burst and
    gap of `test_moments_one_row_passes_make_one_snapshot` on two replicas: replica 0 takes the late request
    and one map at it; replica 1 is idle from the burst's end to the run's, across every moment, and takes one
    map of its idle pool, at the start of the idle row that holds it to the fleet's end (it was at that end,
    where no row starts)."""
    w = Workload(arrival_time_s=np.r_[np.linspace(0, 1, 20), 100.0], prompt_tokens=np.full(21, 200),
                 output_tokens=np.full(21, 50), name="gap")
    r = run_simulation(dataclasses.replace(CONFIG, replicas=2), w, workers=workers)
    maps = r.memory.groupby("replica")["time_s"].nunique().reindex(range(2), fill_value=0).tolist()
    assert [s["memory_maps"] for s in r.summary["per_replica"]] == maps == [1, 1]
    assert r.summary["memory_maps"] == 2 and r.summary["memory_snapshots"] == 6
    idle = r.memory[r.memory["replica"] == 1]
    last = r.steps[r.steps["replica"] == 1].iloc[-1]  # its idle row to the fleet's end, which the map shows
    assert last["time_s"] + last["duration_s"] == pytest.approx(r.summary["sim_time_s"])  # (its start is 0)
    assert idle["time_s"].unique().tolist() == [last["time_s"]] and last["running"] == 0
    assert idle["state"].value_counts()[["overhead", "free"]].tolist() == [16, 3984]  # the null block, the rest
    assert (last["external_frag"], last["free"]) == (16, 3984)


def test_schedule_moments():
    by_time = SnapshotSchedule(3, 10, 2.0, 6.0, by_arrivals=False)  # at 3, 4 and 5 s
    assert [by_time.due(t, 0) for t in (2.5, 3.0, 3.5, 5.5, 9.0)] == [False, True, False, True, False]
    # the row starting at 5.5 s passed 4 and 5 s: one snapshot for both
    by_count = SnapshotSchedule(3, 10, 0.0, 0.0, by_arrivals=True)  # once 3, 5 and 8 requests have arrived
    assert [by_count.due(1.0, n) for n in (2, 3, 4, 9)] == [False, True, False, True]


def test_a_small_batch_keeps_its_last_snapshots_off_the_empty_pool():
    """A batch of fewer requests than snapshots: snapshot k once ceil(5 (k + 1) / 13) have left put the last
    moments after the last request left, on an empty pool (one snapshot of five); they now come once all but one
    have left."""
    rng = np.random.default_rng(0)
    w = Workload(arrival_time_s=np.zeros(5), prompt_tokens=rng.integers(100, 800, 5),
                 output_tokens=rng.integers(20, 300, 5), name="batch")
    r = run_simulation(dataclasses.replace(CONFIG, memory_snapshots=12), w)
    tokens = r.memory[r.memory["state"] == "token"].groupby("time_s").size().reindex(snapshot_times(r), fill_value=0)
    assert len(tokens) == 4 and (tokens > 0).all()
    assert max(snapshot_times(r)) < r.requests["finished_s"].max()


def test_a_moment_at_the_start_is_the_first_rows():
    """A moment at the run's start (a single request: no arrival span, every moment at the start; a closed loop
    whose first moment falls among its users arriving together) is matched to the first row as any moment is to
    the first row starting at or after it: the map at the start, as that row counts memory once its step is
    planned, so it shows the prompt being prefilled, not the empty pool. It used to wait for the end of the
    first row (a map at the second row's time, labelled after the moment it stood for). A run whose requests
    are all refused at the start shows its (empty) pool at the start, with an idle row of no duration there."""
    one = Workload(arrival_time_s=np.zeros(1), prompt_tokens=np.array([1500]), output_tokens=np.array([100]))
    r = run_simulation(CONFIG, one)
    assert snapshot_times(r) == [0.0] == [r.steps["time_s"].iloc[0]] and r.steps["prefill_tokens"].iloc[0] == 1500
    assert (r.memory["state"] == "token").sum() == 1500 == r.steps["token_states"].iloc[0]  # the prompt, computed
    assert [states for states, _ in map_shares(r)] == [row for _, row in map_shares(r)]
    rng = np.random.default_rng(0)
    w = Workload(arrival_time_s=np.zeros(40), prompt_tokens=rng.integers(50, 500, 40),
                 output_tokens=rng.integers(20, 300, 40), name="closed")
    closed = run_simulation(CONFIG, w.select(np.arange(40), closed_loop=ClosedLoop(users=16, think_time_s=0.2)))
    assert snapshot_times(closed)[0] == 0.0
    tokens = closed.memory[closed.memory["state"] == "token"].groupby("time_s").size()
    assert len(tokens) == len(snapshot_times(closed)) and (tokens > 0).all()
    refused = run_simulation(CONFIG, dataclasses.replace(one, prompt_tokens=np.array([5000])))
    assert refused.summary["rejected"] == 1 and snapshot_times(refused) == [0.0]
    assert refused.steps[["time_s", "duration_s", "free"]].values.tolist() == [[0.0, 0.0, 3984]]  # a null block
    assert [states for states, _ in map_shares(refused)] == [row for _, row in map_shares(refused)]


def test_departures_moments_count_exactly():
    """Snapshot k of n once ceil(arrived (k + 1) / (n + 1)) have left, in whole numbers: 77 x 9 / 11 is 63, which
    the share 9 / 11 times 77 rounded up to 64."""
    schedule = SnapshotSchedule(10, 77, 0.0, 0.0, by_arrivals=False, by_departures=True)
    due = [left for left in range(1, 77) if schedule.due(1.0, 77, 77, left)]
    assert due == [-(-77 * (k + 1) // 11) for k in range(10)] and 63 in due and 64 not in due
