"""A fleet whose arrivals are released by requests leaving (closed-loop users, session turns with a think time):
each release comes from whichever replica finished the request, is routed at its time, and the fast-forward
still equals step by step; one replica is the single engine."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.kernel.config import SimConfig
from sim.kernel.fleet import run_fleet
from sim.kernel.fleet_parallel import parallel_note, runs_in_parallel
from sim.kernel.routers import ROUTERS
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_memory_map, assert_same_step_totals, assert_same_summary
from tests.soak import examples
from workloads import ClosedLoop, Workload
from workloads.named import generate

TURNS = "lognormal:prompt_mean=300,prompt_cv=1,output_mean=100,output_cv=1,max_total=3000"


def closed_loop(count: int, users: int, think_time_s: float, seed: int = 1) -> Workload:
    """``count`` requests from ``users`` users, every fifth sharing a 128-token prefix; the 40th longer than
    the 2048-token ``max_model_len`` of the configurations below (rejected on arrival, its user released)."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(150, 900, count)
    prompt[39] = 2500
    groups = np.where(np.arange(count) % 5 == 0, np.arange(count) % 2, -1)
    w = Workload(arrival_time_s=np.zeros(count), prompt_tokens=prompt, output_tokens=rng.integers(5, 300, count),
                 prefix_group=groups, prefix_len=np.full(count, 128), name="closed")
    return w.select(np.arange(count), closed_loop=ClosedLoop(users=users, think_time_s=think_time_s))


def sessions(think_time_s: float, count: int = 90) -> Workload:
    return generate(TURNS, "poisson:rate=2", count, seed=4, turns=3, think_time_s=think_time_s,
                    system_prompt_len=128, system_prompt_frac=0.5)


CONFIG = SimConfig(kv_tokens=3000, prefix_caching=True, max_model_len=2048)


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("think_time_s", [0.0, 0.5])
def test_one_replica_is_the_single_engine(think_time_s, asynchronous):
    """With one replica the fleet routes each release at its time and gives the single run, table for table
    (the rejected request included: its user's next request follows its arrival by the think time); under async
    scheduling too, where a finish is heard of once the next step is planned (`InFlight.tell_clients`)."""
    w = closed_loop(80, users=6, think_time_s=think_time_s)
    config = dataclasses.replace(CONFIG, async_scheduling=asynchronous)
    single = run_simulation(config, w)
    fleet = run_fleet(config, w)
    assert single.requests["rejected"].sum() == 1
    for name in ("requests", "steps"):
        pd.testing.assert_frame_equal(getattr(fleet, name).drop(columns="replica"), getattr(single, name))


@pytest.mark.parametrize("router", [*ROUTERS, "dp-lb, one API server"])
@pytest.mark.parametrize("workload", ["closed, no think time", "closed, 0.3 s", "two users, no think time",
                                      "sessions, 0.01 s"])
def test_fast_forward_equals_step_by_step(router, workload):
    """A replica's decode run ends where another replica could still release an arrival (the end of that
    replica's row in flight plus the shortest think time; an idle replica woken by a release counts from
    then), so what each router sees and each replica admits is the same as step by step. ``dp-lb`` runs as
    vLLM's default, one API server per replica, and with one."""
    w = {"closed, no think time": lambda: closed_loop(90, users=9, think_time_s=0.0),
         "two users, no think time": lambda: closed_loop(90, users=2, think_time_s=0.0),
         "closed, 0.3 s": lambda: closed_loop(90, users=9, think_time_s=0.3),
         "sessions, 0.01 s": lambda: sessions(0.01)}[workload]()
    servers = 1 if router == "dp-lb, one API server" else None
    config = dataclasses.replace(CONFIG, replicas=3, router=router.split(",")[0], api_server_count=servers)
    fast = run_fleet(config, w)
    slow = run_fleet(dataclasses.replace(config, step_by_step=True), w)
    assert len(fast.steps) < len(slow.steps)
    assert fast.requests["replica"].tolist() == slow.requests["replica"].tolist()
    assert fast.requests["cached_tokens"].tolist() == slow.requests["cached_tokens"].tolist()
    assert fast.requests["rejected"].tolist() == slow.requests["rejected"].tolist()
    for column in ("arrival_s", "admitted_s", "first_token_s", "finished_s"):
        np.testing.assert_allclose(fast.requests[column], slow.requests[column], rtol=1e-9)
    assert_same_summary(fast.summary, slow.summary, skip=("wall_time_s", "per_replica"))
    assert_same_memory_map(fast, slow)
    assert_same_step_totals(fast, slow)


@settings(max_examples=examples(20), deadline=None)
@given(seed=st.integers(0, 2**20), sessions_not_users=st.booleans(), think=st.sampled_from([0.0, 0.01, 0.4]),
       replicas=st.integers(2, 4), router=st.sampled_from(list(ROUTERS)),
       step_time=st.sampled_from([None, 0.02]), allocator=st.sampled_from(["paged", "radix", "contiguous-max"]),
       api_servers=st.sampled_from([None, 1, 2]), asynchronous=st.booleans())
# two replicas report at one step end an ulp apart, the ulp on opposite sides in the two modes, at the instant
# a DP coordinator's publish falls due: it must see both reports or neither (`DPCoordinator._advance`)
@example(seed=364084, sessions_not_users=False, think=0.01, replicas=2, router="dp-lb", step_time=0.02,
         allocator="contiguous-max", api_servers=1, asynchronous=False)
# one user, no think time: each request arrives at its last one's finish rounded to the nanosecond, which the two
# modes compute an ulp apart; that finish must count as before the arrival in both (its connection closed, its
# API server's in-flight count down: `APIServers._least_loaded`, `Replica.in_flight`)
@example(seed=0, sessions_not_users=False, think=0.0, replicas=3, router="dp-lb", step_time=0.02, allocator="paged",
         api_servers=2, asynchronous=False)
def test_fast_forward_equals_step_by_step_on_random_fleets(seed, sessions_not_users, think, replicas, router,
                                                           step_time, allocator, api_servers, asynchronous):
    """The same on random small fleets, a fixed step time among them: every replica's row ends then fall on
    the same few instants, the ties the release rules are for. ``dp-lb`` with vLLM's default API servers (one
    per replica), one or two; async scheduling where modelled (``paged``)."""
    if sessions_not_users:
        w = generate(TURNS, "poisson:rate=3", 40, seed=seed, turns=3, think_time_s=think, system_prompt_len=128,
                     system_prompt_frac=0.5)
    else:
        w = closed_loop(45, users=1 + seed % 8, think_time_s=think, seed=seed)
    config = dataclasses.replace(CONFIG, replicas=replicas, router=router, step_time=step_time, allocator=allocator,
                                 prefix_caching=allocator != "contiguous-max", seed=seed,
                                 api_server_count=api_servers if router == "dp-lb" else None,
                                 async_scheduling=asynchronous and allocator == "paged")
    fast = run_fleet(config, w)
    slow = run_fleet(dataclasses.replace(config, step_by_step=True), w)
    assert fast.requests["replica"].tolist() == slow.requests["replica"].tolist()
    assert fast.requests["rejected"].tolist() == slow.requests["rejected"].tolist()
    for column in ("arrival_s", "admitted_s", "first_token_s", "finished_s"):
        np.testing.assert_allclose(fast.requests[column], slow.requests[column], rtol=1e-9, atol=1e-9)


def test_closed_loop_users_are_shared_by_the_fleet():
    """Six users over three replicas: never more than six requests in the system, every replica serves some,
    and each request after the first six arrives the think time after one that left (the earliest free user)."""
    users, think = 6, 0.25
    w = closed_loop(60, users=users, think_time_s=think)
    w = w.select(np.flatnonzero(w.prompt_tokens <= 2048), closed_loop=w.closed_loop)  # no rejection
    r = run_fleet(dataclasses.replace(CONFIG, replicas=3, router="least-requests"), w).requests
    assert r["finished_s"].notna().all() and set(r["replica"]) == {0, 1, 2}
    arrivals, finishes = r["arrival_s"].to_numpy(), r["finished_s"].to_numpy()
    assert (arrivals[:users] == 0.0).all()
    expected = np.sort(finishes + think)[:len(w) - users]
    np.testing.assert_allclose(np.sort(arrivals[users:]), expected, rtol=0, atol=5e-10)
    in_system = [(arrivals <= t).sum() - (finishes <= t).sum() for t in np.unique(arrivals)]
    assert max(in_system) == users


def test_session_turns_follow_their_previous_turn_on_any_replica():
    """Each later turn arrives its think time after its previous turn ended, wherever that ran; the
    prefix-aware router sends it where its conversation is cached, so it hits more than round-robin does."""
    w = sessions(2.0)
    config = dataclasses.replace(CONFIG, replicas=4, kv_tokens=20_000)
    aware = run_fleet(dataclasses.replace(config, router="prefix-aware"), w).requests
    blind = run_fleet(dataclasses.replace(config, router="round-robin"), w).requests
    later = np.flatnonzero(w.turn > 0)
    previous = np.array([np.flatnonzero((w.session_id == w.session_id[i]) & (w.turn == w.turn[i] - 1))[0]
                         for i in later])
    for r in (aware, blind):
        np.testing.assert_allclose(r["arrival_s"].to_numpy()[later], r["finished_s"].to_numpy()[previous] + 2.0,
                                   rtol=0, atol=5e-10)
    same = aware["replica"].to_numpy()[later] == aware["replica"].to_numpy()[previous]
    assert same.mean() > 0.9
    assert aware["cached_tokens"].sum() > 1.5 * blind["cached_tokens"].sum()


def test_workers_do_not_split_a_closed_loop_fleet():
    """Round-robin reads no replica state, but released arrivals come from every replica's completions: the
    fleet runs in one process (a note says so), with the results of ``workers=1``."""
    w = closed_loop(40, users=4, think_time_s=0.1)
    config = dataclasses.replace(CONFIG, replicas=2)
    assert runs_in_parallel(config, 2) and not runs_in_parallel(config, 2, w)
    assert "one process" in parallel_note(config, 2, w)
    one = run_simulation(config, w)
    with pytest.warns(UserWarning, match="so the fleet runs in one process"):
        two = run_simulation(config, w, workers=2)
    pd.testing.assert_frame_equal(one.requests, two.requests)
