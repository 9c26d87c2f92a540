"""Routers: each one's choice on hand-made replica states, prefix-aware routing against round-robin and
least-requests on whole workloads (the Mooncake conversation sample, synthetic conversations, no prefixes), and
session affinity on a fleet."""

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import workloads
from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.routers import ROUTERS, make_router
from sim.kernel.runner import run_simulation
from sim.kernel.sequence_group import SequenceGroup
from workloads.named import generate
from workloads.presets import SAMPLES_DIR

MOONCAKE = SAMPLES_DIR / "conversation_trace.jsonl"


@dataclass
class FakeReplica:
    load: int = 0
    free_slots: int = 1000
    pending_prefill: int = 0
    cached: int = 0
    held_tokens: int = 0

    def cached_tokens(self, group) -> int:
        return self.cached


GROUP = SequenceGroup(0, 0, 0.0, 1000, 10)


def choose(name, replicas, seed=0, **settings):
    return make_router(name, rng=np.random.default_rng(seed), **settings).choose(GROUP, replicas)


def test_round_robin_cycles_and_random_is_seeded():
    replicas = [FakeReplica() for _ in range(3)]
    router = make_router("round-robin", rng=np.random.default_rng(0))
    assert [router.choose(GROUP, replicas) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    draws = [make_router("random", rng=np.random.default_rng(4)) for _ in range(2)]
    picks = [[r.choose(GROUP, replicas) for _ in range(50)] for r in draws]
    assert picks[0] == picks[1] and set(picks[0]) == {0, 1, 2}


def test_least_requests_and_least_kv():
    replicas = [FakeReplica(load=3, free_slots=10), FakeReplica(load=1, free_slots=50),
                FakeReplica(load=1, free_slots=90)]
    assert choose("least-requests", replicas) == 1  # tie on load: the lower number
    assert choose("least-kv", replicas) == 2
    replicas[0].free_slots = 90
    assert choose("least-kv", replicas) == 2  # tie on free memory: fewer requests


def test_prefix_aware_scoring_rule():
    """cost = uncached prompt + load_weight x pending prefill; ties to fewer requests, then the lower number."""
    hit = FakeReplica(load=5, cached=800, pending_prefill=300)
    cold = FakeReplica(load=1, cached=0, pending_prefill=0)
    assert choose("prefix-aware", [cold, hit]) == 1  # 200 + 300 < 1000 + 0
    hit.pending_prefill = 900  # overload: 200 + 900 > 1000
    assert choose("prefix-aware", [cold, hit]) == 0
    assert choose("prefix-aware", [cold, hit], load_weight=0.0) == 1  # longest prefix only
    a, b = FakeReplica(load=4), FakeReplica(load=2)
    assert choose("prefix-aware", [a, b]) == 1  # equal cost: fewer requests
    assert choose("prefix-aware", [FakeReplica(), FakeReplica()]) == 0


def test_kv_cost_scoring_rule():
    """Dynamo's cost: w x (uncached prompt + pending prefill) + held KV + pending prefill; ties as above."""
    hit = FakeReplica(load=2, cached=800, held_tokens=900)
    cold = FakeReplica(load=2, cached=0, held_tokens=0)
    assert choose("kv-cost", [cold, hit]) == 0  # 1000 + 0 < 200 + 900: the decode load outweighs the hit
    assert choose("prefix-aware", [cold, hit]) == 1  # which prefix-aware does not see
    assert choose("kv-cost", [cold, hit], kv_overlap_score_weight=2.0) == 1  # 2000 > 400 + 900
    hit.held_tokens, hit.pending_prefill = 100, 400  # 2 x (200 + 400) + 100 + 400 = 1700 < 2000
    assert choose("kv-cost", [cold, hit], kv_overlap_score_weight=2.0) == 1
    assert choose("kv-cost", [cold, hit]) == 0  # 600 + 500 > 1000
    assert choose("kv-cost", [cold, hit], kv_overlap_score_weight=0.0) == 0  # load only
    assert choose("kv-cost", [FakeReplica(load=3), FakeReplica(load=1)]) == 1  # equal cost: fewer requests


def test_session_affinity_keeps_a_session_where_its_first_turn_went():
    sessions = np.array([7, 7, -1, 9, 7, 9])
    router = make_router("session-affinity", rng=np.random.default_rng(0), sessions=sessions)
    replicas = [FakeReplica(load=2), FakeReplica(load=0), FakeReplica(load=1)]

    def route(index):
        return router.choose(SequenceGroup(index, index, 0.0, 100, 10), replicas)

    assert route(0) == 1  # session 7's first turn: the fewest requests
    replicas[1].load = 5
    assert route(1) == 1  # its next turn follows it, loaded or not
    assert route(2) == 2  # outside sessions: the fewest requests
    assert route(3) == 2 and route(4) == 1 and route(5) == 2
    no_sessions = make_router("session-affinity", rng=np.random.default_rng(0))
    assert no_sessions.choose(GROUP, replicas) == 2  # a workload without sessions: least-requests


def test_session_affinity_on_a_fleet_sends_every_turn_to_its_first_turns_replica():
    w = generate("lognormal:prompt_mean=300,prompt_cv=1,output_mean=100,output_cv=1,max_total=3000",
                 "poisson:rate=4", 200, seed=2, turns=4, think_time_s=1.0, system_prompt_len=256,
                 system_prompt_frac=0.5)
    r = run_simulation(SimConfig(replicas=3, router="session-affinity", kv_tokens=20_000), w).requests
    first = {s: rep for s, t, rep in zip(w.session_id, w.turn, r["replica"], strict=True) if t == 0}
    assert all(rep == first[s] for s, rep in zip(w.session_id, r["replica"], strict=True))
    assert set(r["replica"]) == {0, 1, 2}
    blind = run_simulation(SimConfig(replicas=3, router="least-requests", kv_tokens=20_000), w).summary
    assert run_simulation(SimConfig(replicas=3, router="session-affinity", kv_tokens=20_000), w).summary[
        "prefix_hit_frac"] > blind["prefix_hit_frac"] + 0.1


def test_unknown_router_is_a_one_line_error():
    with pytest.raises(ValueError, match="--router must be one of round-robin, random"):
        SimConfig(router="sticky")
    result = CliRunner().invoke(main, ["run", "--replicas", "2", "--router-load-weight", "-1", "--num-requests",
                                       "5"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith("Error: --router-load-weight must be")
    result = CliRunner().invoke(main, ["run", "--replicas", "2", "--router", "kv-cost",
                                       "--router-kv-overlap-score-weight", "nan", "--num-requests", "5"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith("Error: --router-kv-overlap-score-weight must be")
    assert set(ROUTERS) == {"round-robin", "random", "least-requests", "least-kv", "prefix-aware", "kv-cost",
                            "session-affinity", "dp-lb"}


def _compare(w, routers, **options):
    out = {}
    for router in routers:
        result = run_simulation(SimConfig(prefix_caching=True, memory_snapshots=0, router=router, **options), w)
        out[router] = (result.summary["prefix_hit_frac"], float(result.requests["ttft_s"].mean()), result.summary)
    return out


def test_prefix_aware_beats_round_robin_on_the_mooncake_sample():
    """Conversation turns sent where their earlier turns' KV is cached: more hits, less prefill, sooner
    first tokens (the sample's first 500 requests at their own timestamps, 4 replicas)."""
    w = workloads.load_trace(MOONCAKE).head(500)
    out = _compare(w, ["round-robin", "prefix-aware"], model="qwen3-8b", gpu="h200", replicas=4)
    (rr_hit, rr_ttft, rr), (pa_hit, pa_ttft, pa) = out["round-robin"], out["prefix-aware"]
    assert pa["completed"] == rr["completed"] > 450
    assert pa_hit > 1.5 * rr_hit
    assert pa_ttft < 0.95 * rr_ttft


def test_prefix_aware_beats_round_robin_on_synthetic_conversations():
    w = generate("lognormal:prompt_mean=600,prompt_cv=1,output_mean=200,output_cv=1,max_total=8000",
                 "poisson:rate=30", 800, seed=0, system_prompt_len=512, system_prompt_frac=0.5, turns=6,
                 turn_gap_s=2.0)  # (20 s left 654 of 654 conversations at 1.2 turns: the arrivals end at 26 s)
    out = _compare(w, ["round-robin", "prefix-aware"], model="llama-3-8b", gpu="a100-80gb", replicas=4)
    (rr_hit, rr_ttft, _), (pa_hit, pa_ttft, _) = out["round-robin"], out["prefix-aware"]
    assert pa_hit > rr_hit + 0.05
    assert pa_ttft < 0.9 * rr_ttft


def test_prefix_aware_is_no_worse_than_least_requests_without_shared_prefixes():
    """Nothing to hit: prefix-aware balances pending prefill tokens, least-requests request counts."""
    w = generate("lognormal:prompt_mean=600,prompt_cv=1.5,output_mean=200,output_cv=1,max_total=8000",
                 "poisson:rate=30", 800, seed=1)
    out = _compare(w, ["least-requests", "prefix-aware"], model="llama-3-8b", gpu="a100-80gb", replicas=4)
    (lr_hit, lr_ttft, lr), (pa_hit, pa_ttft, pa) = out["least-requests"], out["prefix-aware"]
    assert lr_hit == pa_hit == 0.0
    assert pa["completed"] == lr["completed"] == len(w)
    assert pa_ttft <= 1.05 * lr_ttft


def test_kv_cost_spreads_what_prefix_aware_herds():
    """Sessions sharing a 1,024-token system prompt on 4 replicas: prefix-aware sends new sessions where the
    prompt is cached until that replica's prompt queue outweighs the hit, however much it decodes (load
    imbalance 1.74); kv-cost counts the KV each replica holds and spreads them (1.08), still hitting far more
    than least-requests."""
    from sim.reproduce.reuse import sessions_workload

    w = sessions_workload(300, turns=4, think_time_s=10.0, rate=4.0, system_prompt_len=1024)
    out = _compare(w, ["least-requests", "prefix-aware", "kv-cost"], model="qwen3-8b", gpu="h200", kv_gib=16,
                   max_num_batched_tokens=8192, allocator="radix", replicas=4)
    (lr_hit, _, _), (pa_hit, _, pa), (kv_hit, _, kv) = out["least-requests"], out["prefix-aware"], out["kv-cost"]
    assert pa["load_imbalance"] > 1.5 and kv["load_imbalance"] < 1.15
    assert pa_hit > kv_hit > lr_hit + 0.15


def test_least_kv_counts_the_prompts_already_routed_to_a_replica():
    """A burst of twelve requests behind one long-running request: free blocks alone are the same for every
    request of the burst (none is placed before the next is routed), which sent all twelve to one replica; the
    prompts routed and not yet in memory count against it, so the burst alternates as least-requests does."""
    rows = [dict(arrival_time_s=0.0, prompt_tokens=200, output_tokens=3000)]
    rows += [dict(arrival_time_s=1.0, prompt_tokens=300, output_tokens=300)] * 12
    workload = workloads.workload_from_frame(pd.DataFrame(rows))
    config = SimConfig(model="llama-2-7b", kv_tokens=4000, replicas=2, router="least-kv")
    assert run_simulation(config, workload).requests.replica.tolist() == [0] + [1, 0] * 6
