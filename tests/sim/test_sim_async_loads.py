"""``--offload-loads async``: host-tier hits loaded beside the steps, as vLLM's offloading connector loads them.
The loading request holds its hits' blocks and waits; no step is charged the load; the requests behind it run;
it is scheduled at the first step that starts after its load; a request hitting blocks being loaded waits for
that load; fast-forward equals step-by-step, in fleets too; bad combinations get a one-line error."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import workloads
from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.fleet import run_fleet
from sim.kernel.runner import run_simulation, write_result
from tests.sim.summaries import assert_same_fleet_run, assert_same_tiered_run
from tests.sim.test_sim_host_tier import MOONCAKE, RecordingCost, evicting_workload
from workloads import Workload

TIER = dict(cpu_offload_gib=1.0, kv_tokens=48 * 16)
"""47 usable blocks of opt-13b: B evicts 28 of A's blocks to the host, and C loads 23 of them back
(`test_sim_host_tier.SMALL_GPU`)."""


def with_a_short_request_beside_c() -> Workload:
    """`evicting_workload` plus D, a 64-token prompt of its own arriving with C (both fit beside each other)."""
    return Workload(arrival_time_s=np.array([0.0, 100.0, 200.0, 200.0]), prompt_tokens=np.array([600, 600, 600, 64]),
                    output_tokens=np.full(4, 5), prefix_group=np.array([0, 1, 0, 2]),
                    prefix_len=np.array([512, 512, 512, 0]), name="evicting+short")


def test_the_requests_behind_a_load_do_not_wait_for_it():
    """At t=200 C is placed with its hits and loads 23 host blocks beside the first step, which prefills D alone
    and is charged no load; C is scheduled at the next step (its 88 own tokens). With sync loads both prefill in
    one step that pays the load, so D's first token comes later. While it loads, C holds the blocks of its hits
    and nothing more (32: 9 GPU hits, 23 loaded; D 4 more), and the step row does not count it as waiting, as
    vLLM's ``num_requests_waiting`` does not (it counts it apart, as skipped)."""
    cost = RecordingCost()
    fast = run_simulation(SimConfig(offload_loads="async", **TIER), with_a_short_request_beside_c(), cost=cost)
    sync = run_simulation(SimConfig(**TIER), with_a_short_request_beside_c(), cost=RecordingCost())
    assert not any(kwargs["swap_slots"] for _, kwargs, _ in cost.calls)
    r, steps = fast.requests, fast.steps
    assert r["host_hit_tokens"].tolist() == sync.requests["host_hit_tokens"].tolist() == [0, 0, 368, 0]
    assert r["gpu_hit_tokens"].tolist() == sync.requests["gpu_hit_tokens"].tolist() == [0, 0, 144, 0]
    at_200 = steps[steps["time_s"] >= 200].head(2)
    assert at_200[["prefill_tokens", "reload_blocks", "running", "waiting"]].values.tolist() == [[64, 23, 1, 0],
                                                                                             [88, 0, 2, 0]]
    assert at_200["used_blocks"].iloc[0] == 32 + 4
    first, second = at_200["duration_s"].tolist()
    load = cost.transfer_time(swap_slots=368, swap_transfers=23)  # 23 blocks of 16 over PCIe, 80 calls each
    assert 0 < load < first  # landed within the first step: C goes in at the second
    assert r["first_token_s"].iloc[3] == pytest.approx(200 + first)
    assert r["first_token_s"].iloc[2] == pytest.approx(200 + first + second)
    assert r["first_token_s"].iloc[3] < sync.requests["first_token_s"].iloc[3] - load / 2


def test_a_request_alone_waits_for_its_load_in_an_idle_row():
    """C alone at t=200: nothing to step while its load runs, so a row of no steps of exactly the load's length
    (carrying C's hits and the blocks it loads, so the step table's hits add up to the summary's), then C's
    prefill. In the idle row C holds its 32 hit blocks and is not counted as waiting."""
    cost = RecordingCost()
    result = run_simulation(SimConfig(offload_loads="async", **TIER), evicting_workload(), cost=cost)
    load = cost.transfer_time(swap_slots=368, swap_transfers=23)
    at_200 = result.steps[result.steps["time_s"] >= 200].head(2)
    assert at_200["num_steps"].tolist() == [0, 1] and at_200["prefill_tokens"].tolist() == [0, 88]
    assert at_200[["running", "waiting", "used_blocks"]].iloc[0].tolist() == [0, 0, 32]
    assert at_200["duration_s"].iloc[0] == pytest.approx(load)
    assert at_200[["gpu_hit_tokens", "host_hit_tokens", "reload_blocks"]].values.tolist() == [[144, 368, 23], [0, 0, 0]]
    assert result.steps["host_hit_tokens"].sum() == result.summary["host_hit_tokens"] == 368
    assert result.requests["first_token_s"].iloc[2] == pytest.approx(200 + load + at_200["duration_s"].iloc[1])


def whole_prompts(arrivals: list[float], groups: list[int]) -> Workload:
    """Requests whose whole prompt is their group's 512-token prefix (32 blocks, none partly filled), 5 output
    tokens each: a prompt another request computed before is known to its last block."""
    n = len(arrivals)
    return Workload(arrival_time_s=np.array(arrivals), prompt_tokens=np.full(n, 512), output_tokens=np.full(n, 5),
                    prefix_group=np.array(groups), prefix_len=np.full(n, 512), name="whole prompts")


def test_a_whole_prompt_on_the_host_is_loaded_to_its_end_and_recomputes_its_last_token():
    """A (group 0), B (group 1), C (group 0 again), each alone, whole 512-token prompts: A frees 33 blocks, its
    partly filled last one to the head of the free queue, its 32 hashed ones to the tail behind the 14 it never
    used; B takes the 1 + 14 and 18 of A's, b31 down to b14, which go to the host. vLLM's connector looks the
    host up to the end of C's prompt (its GPU lookup stops a block short), so C loads all 18, holds 32 blocks
    and, once loaded, computes its last token alone (vLLM sets its computed tokens one short): 511 tokens
    cached, 287 of them from the host. Sync loads stop a block short on the host too: 17 blocks loaded, 16
    tokens computed, 496 cached."""
    w = whole_prompts([0.0, 100.0, 200.0], [0, 1, 0])
    fast = run_simulation(SimConfig(offload_loads="async", **TIER), w)
    sync = run_simulation(SimConfig(**TIER), w)
    assert fast.requests[["cached_tokens", "gpu_hit_tokens", "host_hit_tokens"]].values.tolist()[2] == [511, 224, 287]
    assert sync.requests[["cached_tokens", "gpu_hit_tokens", "host_hit_tokens"]].values.tolist()[2] == [496, 224, 272]
    at_200 = fast.steps[fast.steps["time_s"] >= 200].head(3)
    assert at_200[["num_steps", "prefill_tokens", "reload_blocks", "used_blocks"]].values.tolist() == [
        [0, 0, 18, 32], [1, 1, 0, 32], [4, 0, 0, 33]]  # the load, its last token in a block it holds, decodes
    # the row waiting for the load shows its blocks, not a charge: the load runs beside the steps
    assert (at_200[["reload_slots", "reload_transfers"]] == 0).all().all()
    at_200 = sync.steps[sync.steps["time_s"] >= 200].head(1)
    assert at_200[["prefill_tokens", "reload_blocks", "reload_slots", "reload_transfers"]].values.tolist() == [
        [16, 17, 17 * 16, 17]]  # charged to the step that computes
    assert fast.steps["host_hit_tokens"].sum() == fast.summary["host_hit_tokens"] == 287
    # vLLM's connector counts the 18 blocks it loads, the last token too: 288 of the 288 past C's 224 GPU tokens
    assert (fast.summary["external_prefix_cache_queries"], fast.summary["external_prefix_cache_hits"]) == (
        512 + 512 + 288, 288)
    assert (sync.summary["external_prefix_cache_queries"], sync.summary["external_prefix_cache_hits"]) == (
        512 + 512 + 288, 272)
    assert fast.summary["prefix_cache_hits"] == sync.summary["prefix_cache_hits"] == 224


def test_a_whole_prompt_cached_on_the_gpu_loads_its_last_block_from_a_write_through_host():
    """The same prompt twice, 100 s apart, nothing evicted: the GPU lookup stops a block short of the prompt's
    end, and the write-through host holds that last block (stored when the first request computed it), so the
    second request loads it beside the steps and recomputes one token, as vLLM does: 511 cached, 15 of them
    from the host. Sync: the last block is computed (16 tokens), 496 cached."""
    w = whole_prompts([0.0, 100.0], [0, 0])
    options = dict(cpu_offload_gib=1.0, offload_write_policy="write_through")
    fast = run_simulation(SimConfig(offload_loads="async", **options), w)
    sync = run_simulation(SimConfig(**options), w)
    assert fast.requests[["cached_tokens", "gpu_hit_tokens", "host_hit_tokens"]].values.tolist()[1] == [511, 496, 15]
    assert sync.requests[["cached_tokens", "gpu_hit_tokens", "host_hit_tokens"]].values.tolist()[1] == [496, 496, 0]
    assert (fast.summary["prefix_cache_hits"], fast.summary["external_prefix_cache_hits"]) == (496, 16)
    at_100 = fast.steps[fast.steps["time_s"] >= 100].head(2)
    assert at_100[["num_steps", "prefill_tokens", "reload_blocks"]].values.tolist() == [[0, 0, 1], [1, 1, 0]]


def test_a_request_hitting_blocks_being_loaded_waits_for_that_load():
    """C and C2 share A's prefix and arrive with D (16 tokens of its own). C loads the 23 host blocks; C2, whose
    host hits are those blocks, is not loaded a second time: it waits in the queue (D behind it goes in), and
    once C's load is done (within the first step) it hits all 32 blocks on the GPU and prefills beside C.
    Before that C's loaded blocks are not cached, so nothing computes on KV that is not in yet."""
    twins = Workload(arrival_time_s=np.array([0.0, 100.0, 200.0, 200.0, 200.0]),
                     prompt_tokens=np.array([600, 600, 600, 600, 16]), output_tokens=np.full(5, 5),
                     prefix_group=np.array([0, 1, 0, 0, 2]), prefix_len=np.array([512, 512, 512, 512, 0]),
                     name="twins")
    result = run_simulation(SimConfig(offload_loads="async", **TIER), twins, cost=RecordingCost())
    r, steps = result.requests, result.steps
    at_200 = steps[steps["time_s"] >= 200].head(2)
    assert at_200[["prefill_tokens", "running", "waiting", "reload_blocks"]].values.tolist() == [[16, 1, 0, 23],
                                                                                                 [176, 3, 0, 0]]
    assert r[["gpu_hit_tokens", "host_hit_tokens"]].values.tolist()[2:] == [[144, 368], [512, 0], [0, 0]]
    assert r["first_token_s"].iloc[3] == r["first_token_s"].iloc[2] > r["first_token_s"].iloc[4]
    assert steps["reload_blocks"].sum() == 23


def test_a_request_that_does_not_fit_beside_a_loading_one_waits_for_it():
    """E (400 tokens, 25 blocks) arrives with C, which holds 32 of the 47 blocks while it loads, with nothing
    running: E is not refused as if the pool were empty; it runs once C has finished, as with sync loads."""
    w = Workload(arrival_time_s=np.array([0.0, 100.0, 200.0, 200.0]), prompt_tokens=np.array([600, 600, 600, 400]),
                 output_tokens=np.full(4, 5), prefix_group=np.array([0, 1, 0, 3]),
                 prefix_len=np.array([512, 512, 512, 0]), name="evicting+long")
    fast = run_simulation(SimConfig(offload_loads="async", **TIER), w, cost=RecordingCost())
    sync = run_simulation(SimConfig(**TIER), w, cost=RecordingCost())
    assert not fast.requests["rejected"].any()
    at_200 = fast.steps[fast.steps["time_s"] >= 200]
    assert at_200[["running", "waiting", "used_blocks"]].iloc[0].tolist() == [0, 1, 32]  # E, not C
    assert fast.requests["first_token_s"].tolist() == pytest.approx(sync.requests["first_token_s"].tolist())


def test_a_load_is_admitted_only_into_blocks_the_prefills_in_flight_do_not_need():
    """C1 (620 tokens, 39 blocks) and C2 (336) have their 320-token prefixes (20 blocks each) on the host; R (16
    tokens) arrives with them, behind them. C1 is admitted for its 20 hit blocks and loads; C2's 20 do not fit
    in the free blocks beyond the 19 C1 still needs (27 free, vLLM 0.33's reservation for prefills in flight), so
    C2 waits, and R behind it: an idle step while C1 loads, then C1, then R, then C2. Nobody is refused."""
    w = Workload(arrival_time_s=np.array([0.0, 0.0, 100.0, 200.0, 200.0, 200.0]),
                 prompt_tokens=np.array([336, 336, 700, 620, 336, 16]), output_tokens=np.array([5, 5, 5, 5, 5, 1]),
                 prefix_group=np.array([0, 1, 2, 0, 1, 3]), prefix_len=np.array([320, 320, 0, 320, 320, 0]),
                 name="two loads")
    result = run_simulation(SimConfig(offload_loads="async", step_time=1.0, **TIER), w)
    r = result.requests
    assert not r["rejected"].any() and r["host_hit_tokens"].tolist()[3:] == [320, 320, 0]
    assert r["first_token_s"].tolist()[3:] == [202.0, 208.0, 207.0]
    first = result.steps[result.steps["time_s"] >= 200].iloc[0]
    assert (first["num_steps"], first["duration_s"], first["used_blocks"]) == (0, 1.0, 20)


@pytest.mark.parametrize("policy,gib", [("write_back", 4.0), ("write_through", 16.0)])
def test_fast_forward_equals_step_by_step_with_async_loads(policy, gib):
    """(A write-through host smaller than the GPU's cache holds what the GPU holds: 16 GiB to see host hits.)"""
    w = workloads.load_trace(MOONCAKE).head(300)
    options = dict(model="llama-3-8b", gpu="h200", kv_tokens=60_000, cpu_offload_gib=gib, debug_invariants=100,
                   offload_loads="async", offload_write_policy=policy)
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert fast.summary["host_hit_tokens"] > 0 and len(fast.steps) < len(slow.steps)
    assert_same_tiered_run(fast, slow)
    for column in ("gpu_hit_tokens", "host_hit_tokens"):  # every admission's hits are in some row
        assert fast.steps[column].sum() == fast.summary[column], column
    sync = run_simulation(SimConfig(**{**options, "offload_loads": "sync"}), w)
    assert fast.summary["host_hit_tokens"] == sync.summary["host_hit_tokens"]


def test_a_decode_run_ends_where_a_spill_lets_the_head_load_its_hit():
    """The refused head hits 480 tokens on the GPU; a decoder's growth evicts two of its blocks, which the
    write-back tier takes. With loads beside the steps a head with a host hit is placed into blocks for its hits
    alone, computing nothing while they load, so the cut (2 blocks, no more than the run took) lets it in at
    that step. Before, the run went on past it and the head loaded one block more from the host: 3,776 host hit
    tokens fast-forwarded against stepping's 3,760."""
    w = workloads.load_preset("azure-conv", num_requests=80, rate=15, seed=4996)
    options = dict(model="llama-3-8b", gpu="h100-80gb", kv_tokens=4000, cpu_offload_gib=0.2,
                   scheduler_reserve_full_isl=False, offload_loads="async")
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert fast.summary["host_hit_tokens"] == slow.summary["host_hit_tokens"] == 3760
    assert len(fast.steps) < len(slow.steps) / 5
    assert_same_tiered_run(fast, slow)


FLEET = dict(model="qwen3-8b", gpu="h200", kv_tokens=40_000, cpu_offload_gib=4.0, offload_loads="async",
             debug_invariants=50)


@pytest.mark.parametrize("router", ["round-robin", "least-kv", "prefix-aware"])
def test_each_replica_of_a_fleet_loads_beside_its_steps(router):
    """Three replicas, each with its own host tier and copy stream: fast-forward equals step by step (routers
    that read replica state see its loading requests as queued), and one replica is the single engine."""
    w = workloads.load_trace(MOONCAKE).head(300)
    config = SimConfig(replicas=3, router=router, **FLEET)
    fast = run_fleet(config, w)
    slow = run_fleet(dataclasses.replace(config, step_by_step=True), w)
    assert fast.summary["host_hit_tokens"] > 0 and fast.summary["preemptions"] > 0
    assert_same_fleet_run(fast, slow)


def test_one_replica_loading_beside_its_steps_is_the_single_engine():
    w = workloads.load_trace(MOONCAKE).head(300)
    single = run_simulation(SimConfig(**FLEET), w)
    fleet = run_fleet(SimConfig(**FLEET), w)
    assert single.summary["host_hit_tokens"] > 0
    for name in ("requests", "steps", "memory"):
        pd.testing.assert_frame_equal(getattr(fleet, name).drop(columns="replica"), getattr(single, name))


def test_a_fleet_loading_beside_its_steps_writes_the_same_files_from_worker_processes(tmp_path):
    w = workloads.load_trace(MOONCAKE).head(300)
    config = SimConfig(replicas=3, router="round-robin", **{**FLEET, "debug_invariants": 0})
    one, two = run_simulation(config, w), run_simulation(config, w, workers=2)
    assert one.summary["host_hit_tokens"] > 0
    for result in (one, two):
        result.summary.pop("wall_time_s")
    files = [{p.name: p.read_bytes() for p in write_result(r, tmp_path / str(n), "csv")} for n, r in enumerate((one, two))]
    assert files[0] == files[1]


@pytest.mark.parametrize("args,message", [
    (["--allocator", "radix", "--cpu-offload-gib", "1"], "--offload-loads async is vLLM's offloading connector"),
    (["--no-chunked-prefill", "--cpu-offload-gib", "1"], "chunked prefill off"),
    (["--cpu-offload-gib", "0"], "--offload-loads async loads host-tier hits: it needs --cpu-offload-gib > 0"),
    (["--cpu-offload-gib", "1", "--model", "mistral-7b"], "a model vLLM serves without its hybrid KV cache manager"),
])
def test_async_loads_outside_vllms_setting_are_refused_in_one_line(args, message):
    """(The model's layers are known once the pool is being built, after the run's description line.)"""
    result = CliRunner().invoke(main, ["run", "--preset", "mooncake-conv", "--num-requests", "5", "--offload-loads",
                                       "async", *args])
    assert result.exit_code != 0
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], result.output


def test_a_write_back_host_evicts_no_block_a_load_is_reading(monkeypatch):
    """A write-back host of 4 opt-13b blocks (0.05 GiB) behind a 3,000-token GPU cache, 400 azure-conv requests
    at 6 req/s: the blocks a load reads are pinned from the lookup that finds them (the admission's own
    allocation spills the GPU blocks it evicts to the host) until the load lands, so every load starts with its
    blocks on the host and no spill or swap-out evicts one meanwhile (SGLang HiCache's host eviction passes over
    nodes being loaded). Before, 207 of the 290 blocks loaded were gone when their load started and 60 more went
    while it ran; the hits are the same (every load was counted when it started), the bytes spilled fewer (a
    spill that finds no unpinned block is dropped). Fast-forward still equals step by step."""
    from allocators.host_tier import HostTier
    from sim.kernel.host_loads import HostLoads
    from sim.kernel.scheduler import Scheduler

    seen = {"tier": None, "loads": None, "started": 0, "gone": 0}
    init, start, offload_many, swap_out = Scheduler.__init__, HostLoads.start, HostTier.offload_many, HostTier.swap_out

    def watched_init(self, memory, *args, **kwargs):
        init(self, memory, *args, **kwargs)
        seen["tier"], seen["loads"] = memory.host_tier, self.loads

    def watched_start(self, group, hashes, now, blocks=None):
        seen["started"] += len(hashes)
        seen["gone"] += sum(1 for h in hashes if h not in seen["tier"])
        start(self, group, hashes, now, blocks)

    def evicting(method):
        def watched(self, *args):
            loading = {h for h in seen["loads"].being_loaded if h in self}
            done = method(self, *args)
            seen["gone"] += sum(1 for h in loading if h not in self)
            return done
        return watched

    monkeypatch.setattr(Scheduler, "__init__", watched_init)
    monkeypatch.setattr(HostLoads, "start", watched_start)
    monkeypatch.setattr(HostTier, "offload_many", evicting(offload_many))
    monkeypatch.setattr(HostTier, "swap_out", evicting(swap_out))
    options = dict(kv_tokens=3000, cpu_offload_gib=0.05, offload_loads="async", preset="azure-conv",
                   num_requests=400, rate=6.0, seed=0)
    w = workloads.load_preset("azure-conv", num_requests=400, rate=6.0, seed=0)
    fast = run_simulation(SimConfig(debug_invariants=1, **options), w)  # every row: a pinned hash is cached
    assert (seen["started"], seen["gone"]) == (290, 0)
    assert fast.summary["host_tier_blocks"] == 4 and fast.summary["host_hit_tokens"] == 4640
    assert fast.summary["offload_spills_dropped"] > 0  # the spills that found every host block pinned, counted
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert_same_tiered_run(fast, slow)
    assert slow.summary["offload_spills_dropped"] == fast.summary["offload_spills_dropped"]
