"""vLLM's admission control at its API server (``--max-num-queued-reqs``, ``--max-num-queued-tokens``): each request
checked on arrival against the requests in flight and the prompt tokens still awaiting a first token, turned away
(reported rejected, HTTP 503) past the limit; stepped and skipped ahead alike."""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.queue_limits import QueueLimits
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_requests, assert_same_summary
from workloads import Workload
from workloads.workload import ClosedLoop


def group(index: int, prompt: int = 100, num_seqs: int = 1, row: int | None = None):
    return SimpleNamespace(index=index, row=index if row is None else row, num_seqs=num_seqs, prompt=prompt)


def test_requests_in_flight_are_those_whose_last_output_is_not_back():
    limits = QueueLimits(2, None)
    a, b = group(0), group(1)
    assert limits.refuses(a, 0.0, 1) is None and limits.refuses(b, 0.0, 1) is None
    assert limits.refuses(group(2), 0.0, 1) == ("turned away by the API server (HTTP 503): 2 requests in flight and "
                                                "1 more exceed max_num_queued_reqs 2")
    limits.first_token(a, 0.5)  # a first token frees no seat
    limits.left(a, 1.0)
    assert limits.refuses(group(3), 0.9, 1) is not None  # before a's end
    assert limits.refuses(group(4), 1.0, 1) is None
    assert limits.refuses(group(5, num_seqs=2), 1.0, 2) is not None  # n samples take n seats


def test_prompt_tokens_count_until_the_first_token_and_the_newcomer_s_do_not():
    limits = QueueLimits(None, 100)
    a, b = group(0, prompt=80), group(1, prompt=500)
    assert limits.refuses(a, 0.0, 1) is None
    assert limits.refuses(b, 0.0, 1) is None  # 80 < 100: its own 500 are not counted
    assert limits.refuses(group(2, prompt=1), 0.0, 1) == ("turned away by the API server (HTTP 503): 580 prompt "
                                                          "tokens awaiting their first tokens reach "
                                                          "max_num_queued_tokens 100")
    limits.first_token(b, 2.0)
    assert limits.refuses(group(3), 2.0, 1) is None  # 80 left
    limits.left(a, 3.0)  # finished without a first token counted yet: its prompt leaves with it
    assert limits.sent_tokens - limits.freed_tokens[-1] == 100  # only group 3's


def test_a_fanned_out_request_s_children_share_its_verdict():
    limits = QueueLimits(3, None)
    assert limits.refuses(group(0), 0.0, 1) is None
    children = [group(i, row=7) for i in (1, 2, 3)]
    assert all(limits.refuses(c, 0.0, 3) is not None for c in children)  # 1 + 3 > 3: all three turned away
    assert limits.verdicts == {}
    assert limits.refuses(group(4), 0.0, 1) is None


def poisson(seed: int = 4, rate: float = 40.0, n: int = 300, samples: int = 1) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(arrival_time_s=np.cumsum(rng.exponential(1 / rate, n)), prompt_tokens=rng.integers(50, 2000, n),
                    output_tokens=rng.integers(5, 300, n), n=np.full(n, samples), name="poisson")


CONFIG = SimConfig(model="llama-3-8b", gpu="a100-40gb", memory_snapshots=0)


def in_flight(requests, t: float, column: str = "finished_s") -> int:
    """Sequences of accepted requests arrived by ``t`` whose ``column`` time is after ``t``."""
    ok = requests[~requests["rejected"]]
    return int(ok["num_seqs"][(ok["arrival_s"] <= t) & (ok[column] > t)].sum())


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_no_request_is_sent_past_the_limit_and_none_turned_away_below_it(async_scheduling):
    config = replace(CONFIG, max_num_queued_reqs=24, async_scheduling=async_scheduling)
    fast = run_simulation(config, poisson())
    slow = run_simulation(replace(config, step_by_step=True), poisson())
    assert_same_requests(fast, slow)
    assert_same_summary(fast.summary, slow.summary)
    q = fast.requests
    assert 0 < q["rejected"].sum() < len(q)
    for t, refused in zip(q["arrival_s"], q["rejected"], strict=True):
        seen = in_flight(q, t) - (0 if refused else 1)  # those in flight when it came, itself left out
        assert (seen + 1 > 24) == refused
    assert list(fast.summary["rejected_reasons"]) == [
        "turned away by the API server (HTTP 503): N requests in flight and N more exceed max_num_queued_reqs 24"]


def test_the_token_limit_holds_prompts_until_their_first_tokens():
    config = replace(CONFIG, max_num_queued_tokens=6000, max_num_batched_tokens=512)
    fast = run_simulation(config, poisson())
    slow = run_simulation(replace(config, step_by_step=True), poisson())
    assert_same_requests(fast, slow)
    q = fast.requests
    assert 0 < q["rejected"].sum() < len(q)
    ok = q[~q["rejected"]]
    for t, refused in zip(q["arrival_s"], q["rejected"], strict=True):
        waiting = ok[(ok["arrival_s"] < t) & (ok["first_token_s"] > t)]["prompt_tokens"].sum()
        assert (waiting >= 6000) == refused


def test_fanned_out_samples_are_sent_or_turned_away_together():
    result = run_simulation(replace(CONFIG, max_num_queued_reqs=20, parallel_sampling="fan-out"),
                            poisson(samples=4, n=120))
    q = result.requests  # one row a request, its children folded
    assert 0 < q["rejected"].sum() < len(q)
    assert set(q["num_seqs"]) == {4}


def test_a_closed_loop_user_turned_away_sends_its_next_request():
    """30 users and room for 10: a user turned away thinks and sends its next request, so every row is sent
    (none waits for an answer that never comes) and the run ends."""
    workload = Workload(arrival_time_s=np.zeros(200), prompt_tokens=np.full(200, 400), output_tokens=np.full(200, 100),
                        closed_loop=ClosedLoop(users=30, think_time_s=0.05), name="users")
    q = run_simulation(replace(CONFIG, max_num_queued_reqs=10), workload).requests
    assert len(q) == 200 and 0 < q["rejected"].sum() < 200
    assert q["arrival_s"].notna().all()
    ok = q[~q["rejected"]]
    assert max(int(((ok["arrival_s"] <= t) & (ok["finished_s"] > t)).sum()) for t in ok["arrival_s"]) <= 10


def test_independent_replicas_each_keep_their_own_count():
    config = replace(CONFIG, max_num_queued_reqs=8, replicas=3, router="round-robin")
    q = run_simulation(config, poisson(rate=60)).requests
    assert q["rejected"].sum() > 0
    ok = q[~q["rejected"]]
    peak = max(int(((ok["arrival_s"] <= t) & (ok["finished_s"] > t)).sum()) for t in ok["arrival_s"])
    assert 8 < peak <= 24


@pytest.mark.parametrize("changes", [dict(data_parallel_size=2), dict(replicas=2, router="dp-lb"),
                                     dict(prefill_replicas=1, decode_replicas=1)])
def test_servers_kvsim_does_not_model_are_refused(changes):
    with pytest.raises(ValueError, match="--max-num-queued-reqs and --max-num-queued-tokens"):
        replace(CONFIG, max_num_queued_tokens=1000, **changes)
