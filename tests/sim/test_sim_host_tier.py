"""The host-memory KV tier end to end (``--cpu-offload-gib``): hits recovered by hand, hits split by tier in the
summary, the per-request and per-step columns, reloads charged in step time, fast-forward equal to
step-by-step, swapped KV parked in the tier, and the flag's bad values."""

import json
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

import workloads
from allocators.catalog import get_gpu, get_model
from allocators.host_tier import HostTier
from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.cost_profiles import make_step_cost
from sim.kernel.memory import KVMemory
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_fast_forward_equals_stepping, assert_same_tiered_run
from workloads import Workload
from workloads.presets import SAMPLES_DIR

MOONCAKE = SAMPLES_DIR / "conversation_trace.jsonl"
BLOCK_BYTES = get_model("opt-13b").kv_bytes_per_token * 16  # 12.5 MiB: opt-13b's KV for a block of 16


def host_gib(blocks: int) -> float:
    """The --cpu-offload-gib that holds exactly ``blocks`` blocks of opt-13b at block size 16."""
    return blocks * BLOCK_BYTES / 2**30


def evicting_workload() -> Workload:
    """A (prefix group 0), B (group 1), C (group 0 again), each alone: 600-token prompts whose first 512 tokens
    (32 blocks) are their group's, 5 output tokens (38 blocks at the end)."""
    return Workload(arrival_time_s=np.array([0.0, 100.0, 200.0]), prompt_tokens=np.full(3, 600),
                    output_tokens=np.full(3, 5), prefix_group=np.array([0, 1, 0]), prefix_len=np.full(3, 512),
                    name="evicting")


SMALL_GPU = dict(kv_tokens=48 * 16, step_time=0.01)
"""48 blocks, 47 usable: one request's 38 blocks fit, two do not.

By hand: every full block of a prompt is hashed (vLLM hashes them all), 37 a request: 32 of its group's
prefix, then 5 of its own. A frees its 38 blocks; its partial last one goes to the head of the free queue, its
37 hashed ones to the tail, chain end first (b36 .. b0), behind the 9 blocks A never used. B takes 38 blocks:
the 1 + 9, then 28 of A's hashed ones, b36 down to b9, which are evicted (to the host, in that order). C finds
b0..b8 still cached on the GPU (144 tokens) and the rest of its group's 512-token prefix, h9..h31 (368 tokens),
only on the host; it evicts 28 of B's blocks in turn."""


def test_a_host_tier_recovers_the_hits_a_small_gpu_loses():
    w = evicting_workload()
    gpu_only = run_simulation(SimConfig(**SMALL_GPU), w)
    assert gpu_only.requests["cached_tokens"].tolist() == [0, 0, 144]
    tiered = run_simulation(SimConfig(cpu_offload_gib=1.0, **SMALL_GPU), w)
    r, s = tiered.requests, tiered.summary
    assert r["cached_tokens"].tolist() == [0, 0, 512]
    assert r["gpu_hit_tokens"].tolist() == [0, 0, 144] and r["host_hit_tokens"].tolist() == [0, 0, 368]
    assert (s["gpu_hit_tokens"], s["host_hit_tokens"], s["miss_tokens"]) == (144, 368, 600 + 600 + 88)
    assert s["prefix_hit_frac"] == pytest.approx(512 / 1800)
    assert s["host_tier_blocks"] == 81  # 1 GiB / 12.5 MiB
    # B evicted 28 of A's blocks, C 28 of B's; C loaded 23 back
    assert (s["offload_bytes"], s["reload_bytes"]) == (56 * BLOCK_BYTES, 23 * BLOCK_BYTES)
    # with unlimited GPU memory nothing is evicted: the same hits, all on the GPU
    big = run_simulation(SimConfig(kv_tokens=20_000, step_time=0.01), w)
    assert big.summary["gpu_hit_tokens"] == s["gpu_hit_tokens"] + s["host_hit_tokens"]


def test_host_hits_are_vllms_external_prefix_cache_hits():
    """vLLM counts what its KV connector loads apart from its prefix cache's hits: C's 144 GPU tokens are
    ``prefix_cache_hits`` (of 1,800 looked up), its 368 host tokens ``external_prefix_cache_hits``, of the
    1,656 tokens the GPU did not hold (600 + 600 + 456); ``prefix_hit_frac`` counts both."""
    s = run_simulation(SimConfig(cpu_offload_gib=1.0, **SMALL_GPU), evicting_workload()).summary
    assert (s["prefix_cache_queries"], s["prefix_cache_hits"]) == (1800, 144)
    assert (s["external_prefix_cache_queries"], s["external_prefix_cache_hits"]) == (1656, 368)
    assert s["prefix_cache_hit_rate"] == pytest.approx(144 / 1800)
    assert s["prefix_hit_frac"] == pytest.approx(512 / 1800)
    untiered = run_simulation(SimConfig(**SMALL_GPU), evicting_workload()).summary
    assert (untiered["external_prefix_cache_queries"], untiered["external_prefix_cache_hits"]) == (0, 0)


def test_a_small_host_tier_keeps_the_most_recently_evicted_blocks():
    """10 host blocks keep the last 10 offloaded, h18..h9 (B evicted h36 first): C hits h0..h8 on the GPU and
    h9..h18 on the host, 19 blocks."""
    tiered = run_simulation(SimConfig(cpu_offload_gib=host_gib(10), **SMALL_GPU), evicting_workload())
    assert tiered.summary["host_tier_blocks"] == 10
    assert tiered.requests["gpu_hit_tokens"].tolist() == [0, 0, 144]
    assert tiered.requests["host_hit_tokens"].tolist() == [0, 0, 160]


def test_the_step_columns_split_hits_by_tier():
    steps = run_simulation(SimConfig(cpu_offload_gib=1.0, **SMALL_GPU), evicting_workload()).steps
    row = steps[steps["host_hit_tokens"] > 0]
    assert len(row) == 1
    assert row[["gpu_hit_tokens", "host_hit_tokens", "reload_blocks", "prefill_tokens"]].values.tolist() == [
        [144, 368, 23, 88]]
    # the load it charges: 23 blocks of 16 slots, a copy call each
    assert row[["reload_slots", "reload_transfers"]].values.tolist() == [[368, 23]]
    assert steps["reload_slots"].sum() == 368 and steps["reload_transfers"].sum() == 23
    assert steps["gpu_hit_tokens"].sum() + steps["host_hit_tokens"].sum() == 512


class RecordingCost:
    """The default profile's roofline for opt-13b on an A100, remembering every step it priced."""

    def __init__(self):
        self.cost = make_step_cost(None, get_model("opt-13b"), get_gpu("a100-40gb"))
        self.calls = []

    def __getattr__(self, name):
        return getattr(self.cost, name)

    def step_time(self, *args, **kwargs):
        t = self.cost.step_time(*args, **kwargs)
        self.calls.append((args, kwargs, t))
        return t


def test_reloads_are_charged_in_the_step_time():
    """The step that loads C's 23 host blocks pays their bytes over PCIe plus a copy latency per block, layer
    and K/V, on top of what the same step costs without them."""
    cost = RecordingCost()
    result = run_simulation(SimConfig(cpu_offload_gib=1.0, kv_tokens=48 * 16), evicting_workload(), cost=cost)
    loads = [(args, kwargs, t) for args, kwargs, t in cost.calls if kwargs["swap_slots"]]
    assert len(loads) == 1
    args, kwargs, t = loads[0]
    assert (args[4], kwargs["swap_slots"]) == (23, 368)  # swap transfers, slots moved
    without = cost.cost.step_time(*args[:4], 0, *args[5:], **kwargs | {"swap_slots": 0})
    reload_s = 368 * 819200 / 25e9 + 23 * 2 * 40 * 3.6e-6  # bytes at 25 GB/s PCIe + 3.6 us x 80 copies a block
    assert t - without == pytest.approx(reload_s, rel=1e-9)
    row = result.steps[result.steps["host_hit_tokens"] > 0]
    assert row["duration_s"].item() == t
    assert row[["reload_transfers", "reload_slots"]].values.tolist() == [[args[4], kwargs["swap_slots"]]]


def test_radix_reloads_a_load_with_one_transfer_per_layer():
    """SGLang's HiCache moves a load with one transfer kernel per layer, so radix pays the copy latency once per
    load, not once per page: the same 23 blocks as `paged` above, 1 transfer instead of 23."""
    cost = RecordingCost()
    steps = run_simulation(SimConfig(cpu_offload_gib=1.0, kv_tokens=48 * 16, allocator="radix"), evicting_workload(),
                           cost=cost).steps
    loads = [(args, kwargs, t) for args, kwargs, t in cost.calls if kwargs["swap_slots"]]
    assert [(args[4], kwargs["swap_slots"]) for args, kwargs, _ in loads] == [(1, 368)]
    loaded = steps[steps["reload_blocks"] > 0]
    assert loaded[["reload_blocks", "reload_slots", "reload_transfers"]].values.tolist() == [[23, 368, 1]]
    args, kwargs, t = loads[0]
    without = cost.cost.step_time(*args[:4], 0, *args[5:], **kwargs | {"swap_slots": 0})
    assert t - without == pytest.approx(368 * 819200 / 25e9 + 2 * 40 * 3.6e-6, rel=1e-9)


def test_fast_forward_equals_step_by_step_with_a_tier():
    w = workloads.load_trace(MOONCAKE).head(300)
    options = dict(model="llama-3-8b", gpu="h200", kv_tokens=60_000, cpu_offload_gib=4.0, debug_invariants=100)
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert fast.summary["host_hit_tokens"] > 0 and fast.summary["reload_bytes"] > 0
    assert len(fast.steps) < len(slow.steps)
    assert_same_tiered_run(fast, slow)


def test_unlimited_host_memory_hits_what_unlimited_gpu_memory_hits():
    """The Mooncake conversation sample: a small GPU pool (60,000 slots, no preemption) with a host tier too
    large to evict anything finds every hit the same trace finds with the whole H200 as KV memory, only split
    between the tiers."""
    w = workloads.load_trace(MOONCAKE).head(300)
    config = dict(model="llama-3-8b", gpu="h200")
    big = run_simulation(SimConfig(**config), w).summary
    tiered = run_simulation(SimConfig(kv_tokens=60_000, cpu_offload_gib=1000.0, **config), w).summary
    gpu_only = run_simulation(SimConfig(kv_tokens=60_000, **config), w).summary
    assert big["host_hit_tokens"] == 0 and big["preemptions"] == tiered["preemptions"] == 0
    assert tiered["gpu_hit_tokens"] + tiered["host_hit_tokens"] == big["gpu_hit_tokens"]
    assert tiered["host_hit_tokens"] > 0
    assert gpu_only["gpu_hit_tokens"] < big["gpu_hit_tokens"]


def test_the_tier_is_off_by_default_and_ignored_without_prefix_caching():
    w = evicting_workload()
    for config in (SimConfig(**SMALL_GPU), SimConfig(prefix_caching=False, cpu_offload_gib=1.0, **SMALL_GPU),
                   SimConfig(allocator="contiguous-max", cpu_offload_gib=1.0, kv_tokens=20_000, step_time=0.01)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            s = run_simulation(config, w).summary
        assert [str(c.message) for c in caught] == [f"{config.allocator}: {flag} ignored: {why}"
                                                    for flag, why in s.get("ignored_settings", {}).items()]
        assert (s["host_hit_tokens"], s["offload_bytes"], s["reload_bytes"], s["host_tier_blocks"]) == (0, 0, 0, 0)
        assert s["gpu_hit_tokens"] == s["cached_prompt_tokens"] and s["miss_tokens"] == s["prefill_tokens"]
        assert s["offload_write_policy"] is None and s["offload_eviction_policy"] is None  # no tier to describe


@pytest.mark.parametrize("model", ["llama-3-8b", "gpt-oss-20b"])  # gpt-oss: a hybrid pool parks group blocks
def test_swapped_kv_is_parked_in_the_host_tier(model):
    """With --preemption swap and a tier, preempted KV takes host blocks instead of the --swap-space-gib space:
    a tier too small for any victim makes every preemption recompute, whatever the swap space. (gpt-oss's window
    layers hold little KV: it needs many short requests at once to preempt.)"""
    if model == "llama-3-8b":
        w, kv_tokens = workloads.load_trace(MOONCAKE).head(60), 12_000
    else:
        w, kv_tokens = workloads.load_preset("sharegpt-demo", num_requests=120, rate=20), 4_000
    options = dict(model=model, gpu="h200", kv_tokens=kv_tokens, preemption="swap", debug_invariants=10)
    swap = run_simulation(SimConfig(**options), w)
    assert swap.steps["swap_blocks"].sum() > 0
    with pytest.warns(UserWarning, match="less than one host block"):  # zero host blocks, and said so
        tiny = run_simulation(SimConfig(cpu_offload_gib=1e-6, **options), w)
    assert tiny.summary["host_tier_blocks"] == 0 and tiny.steps["swap_blocks"].sum() == 0
    roomy = run_simulation(SimConfig(cpu_offload_gib=64.0, **options), w)
    assert roomy.steps["swap_blocks"].sum() > 0 and roomy.summary["completed"] == swap.summary["completed"]


def held_hashes(alloc, seq_ids) -> set[int]:
    """The prefix-cache keys of the blocks these sequences hold (a hybrid pool: in every group)."""
    hashed = alloc._cache.block_hash
    tables = [table for seq_id in seq_ids for table in (
        alloc.block_tables(seq_id) if hasattr(alloc, "block_tables") else (alloc.block_table(seq_id),))]
    return {hashed[b] for table in tables for b in table if hashed[b] is not None}


def spy_on_parked_spills(monkeypatch) -> dict[str, list[int]]:
    """Watch a run's swaps into the host tier and its write-back spills: ``spilled``, the spilled hashes that a
    request parked on the host holds (read as it is swapped out), and ``stored``, those of them the tier stored."""
    seen: dict[str, list[int]] = {"spilled": [], "stored": []}
    held: dict[int, set[int]] = {}
    parked: dict[int, set[int]] = {}
    swap_group, park, unpark, offload_many = KVMemory.swap_group, KVMemory.park, KVMemory.unpark, HostTier.offload_many

    def swap_group_spy(self, group, pending):
        held[group.index] = held_hashes(self._alloc, group.seq_ids)
        return swap_group(self, group, pending)

    def park_spy(self, key, *args):
        on_host = park(self, key, *args)
        if on_host is not None:
            parked[key] = held[key]
        return on_host

    def unpark_spy(self, key):
        del parked[key]
        unpark(self, key)

    def offload_many_spy(self, block_hashes):
        on_host = [h for h in block_hashes if any(h in hashes for hashes in parked.values())]
        new = [h for h in on_host if h not in self]
        moved = offload_many(self, block_hashes)
        seen["spilled"] += on_host
        seen["stored"] += [h for h in new if h in self]
        return moved

    for cls, name, spy in ((KVMemory, "swap_group", swap_group_spy), (KVMemory, "park", park_spy),
                           (KVMemory, "unpark", unpark_spy), (HostTier, "offload_many", offload_many_spy)):
        monkeypatch.setattr(cls, name, spy)
    return seen


@pytest.mark.parametrize("model, kv_tokens", [("llama-3-8b", 12_000), ("gpt-oss-20b", 5_000)])  # pools that swap
def test_a_swapped_requests_hashed_blocks_are_not_offloaded_while_parked(monkeypatch, model, kv_tokens):
    """The Mooncake sample under swap with a write-back tier: the allocation that preempts a victim reuses at
    once the blocks the preemption freed, spilling their hashes, whose KV the swap has just parked on the host.
    None of them is stored a second time (the paged pool stored 93 of them, the hybrid pool 48), in the
    fast-forward as step by step, which agree."""
    w = workloads.load_trace(MOONCAKE).head(60)
    options = dict(model=model, gpu="h200", kv_tokens=kv_tokens, preemption="swap", cpu_offload_gib=64.0,
                   debug_invariants=10)
    for step_by_step in (False, True):
        seen = spy_on_parked_spills(monkeypatch)
        run = run_simulation(SimConfig(step_by_step=step_by_step, **options), w)
        assert run.steps["swap_blocks"].sum() > 0 and len(seen["spilled"]) > 0
        assert seen["stored"] == []
        monkeypatch.undo()
    fast = run_simulation(SimConfig(**options), w)
    assert_same_tiered_run(fast, run_simulation(SimConfig(step_by_step=True, **options), w))


def spy_on_swaps(monkeypatch) -> tuple[list[tuple], list]:
    """Watch a run's swap-outs into the host tier and its swap-ins: ``out``, each swap-out's `GroupSwap`, the
    blocks `KVMemory.park` says the host held already, and the test's own count of them, read before the call:
    the victim's hashes the tier caches, and those it does not cache that another swapped request parks;
    ``back``, each swap-in's `GroupSwap`."""
    swaps, out, back = {}, [], []
    swap_group, park, unpark = KVMemory.swap_group, KVMemory.park, KVMemory.unpark

    def swap_group_spy(self, group, pending):
        swaps[group.index] = swap = swap_group(self, group, pending)
        return swap

    def park_spy(self, key, slots, block_hashes=frozenset()):
        tier = self.host_tier
        cached = sum(1 for h in block_hashes if h in tier)
        parked = sum(1 for h in block_hashes if h not in tier and h in tier._parked_block)
        on_host = park(self, key, slots, block_hashes)
        assert on_host is not None
        out.append((swaps[key], on_host, cached, parked))
        return on_host

    def unpark_spy(self, key):
        back.append(swaps[key])
        unpark(self, key)

    for name, spy in (("swap_group", swap_group_spy), ("park", park_spy), ("unpark", unpark_spy)):
        monkeypatch.setattr(KVMemory, name, spy)
    return out, back


def assert_swaps_charge_only_what_they_copy(run, out, back) -> None:
    """Each swap-out's blocks the host held already are those the test counted, and the steps' swap transfers
    and slots are each swap-out's blocks less those, plus every swap-in's blocks in full (the GPU needs them all
    back)."""
    assert all(on_host == cached + parked for _, on_host, cached, parked in out)
    assert run.steps["swap_blocks"].sum() == sum(s.transfers - n for s, n, *_ in out) + sum(s.transfers for s in back)
    assert run.steps["swap_slots"].sum() == sum(s.slots - n * 16 for s, n, *_ in out) + sum(s.slots for s in back)


MOONCAKE_SWAP = dict(model="llama-3-8b", gpu="a100-40gb", kv_tokens=12_000, max_num_batched_tokens=8192,
                     preemption="swap", cpu_offload_gib=64.0, debug_invariants=10)
"""The Mooncake sample under swap beside a roomy host tier: the first 60 requests preempt 6 times (30 prompts are
rejected: too long), the first 200 15 times."""


@pytest.mark.parametrize("allocator", ["paged", "radix"])
def test_a_swap_out_copies_no_block_the_host_tier_caches_already(monkeypatch, allocator):
    """The Mooncake sample under swap with a roomy write-back tier: some victims hold full blocks whose hashes
    the tier caches (spilled by an earlier eviction; 84 blocks over 6 swaps, up to 44 in one). Their KV is on
    the host already, so the swap-out takes those host blocks instead of copying them."""
    w = workloads.load_trace(MOONCAKE).head(60)
    out, back = spy_on_swaps(monkeypatch)
    run = run_simulation(SimConfig(allocator=allocator, **MOONCAKE_SWAP), w)
    assert len(out) == len(back) == 6  # every victim swapped back in
    shared = [on_host for _, on_host, *_ in out]
    assert sum(shared) == 84 and max(shared) == 44
    assert_swaps_charge_only_what_they_copy(run, out, back)


@pytest.mark.parametrize("allocator, policy", [("paged", "lru"), ("paged-cow", "arc")])
def test_a_swap_out_into_a_write_through_tier_copies_no_block_it_stores_already(monkeypatch, allocator, policy):
    """The same with a write-through tier, which stores blocks as they are computed: 1,443 of the 1,472 blocks
    the 6 victims hold are on the host when they are swapped out, and are not copied again (they stay cached,
    kept from eviction while parked): 1,501 swap transfers in all (before: 2,944, every block out and in). The
    fast-forward parks the same blocks as step by step."""
    w = workloads.load_trace(MOONCAKE).head(60)
    options = dict(allocator=allocator, offload_write_policy="write_through", offload_eviction_policy=policy,
                   **MOONCAKE_SWAP)
    out, back = spy_on_swaps(monkeypatch)
    run = run_simulation(SimConfig(**options), w)
    assert len(out) == len(back) == 6
    assert sum(s.transfers for s, *_ in out) == 1472 and sum(on_host for _, on_host, *_ in out) == 1443
    assert_swaps_charge_only_what_they_copy(run, out, back)
    assert run.steps["swap_blocks"].sum() == 1501
    monkeypatch.undo()
    assert_fast_forward_equals_stepping(SimConfig(**options), w)


def test_two_swapped_requests_parking_one_hash_share_its_host_block(monkeypatch):
    """200 Mooncake requests preempt 15 times under a write-back tier; 32 of the blocks the victims hold carry a
    hash another swapped request parks already (a shared conversation prefix). vLLM v0's prefix-caching CPU
    allocator keeps one block a hash (`HostTier.swap_out`), so those share its host block and are not copied:
    5,477 swap transfers (before: 5,509). Fast-forward and step by step agree."""
    w = workloads.load_trace(MOONCAKE).head(200)
    options = dict(allocator="paged", **MOONCAKE_SWAP)
    out, back = spy_on_swaps(monkeypatch)
    run = run_simulation(SimConfig(**options), w)
    assert len(out) == 15 and sum(parked for *_, parked in out) == 32
    assert_swaps_charge_only_what_they_copy(run, out, back)
    assert run.steps["swap_blocks"].sum() == 5477
    monkeypatch.undo()
    assert_fast_forward_equals_stepping(SimConfig(**options), w)


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_bad_cpu_offload_gib_is_a_one_line_error(value):
    result = CliRunner().invoke(main, ["run", "--cpu-offload-gib", value, "--num-requests", "2"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"Error: --cpu-offload-gib must be a finite number of GiB >= 0, got {float(value)!r}"]


def test_run_takes_the_flag_and_vllms_name_and_reports_the_tier():
    common = ["--num-requests", "3", "--step-time", "0.01", "--json"]
    a = CliRunner().invoke(main, ["run", "--cpu-offload-gib", "1", *common])
    b = CliRunner().invoke(main, ["run", "--kv-offloading-size", "1", *common])
    assert a.exit_code == b.exit_code == 0, a.output + b.output
    sa, sb = json.loads(a.stdout), json.loads(b.stdout)
    assert sa["host_tier_blocks"] == sb["host_tier_blocks"] == 81
    for key in ("prefix_hit_frac", "gpu_hit_tokens", "host_hit_tokens", "miss_tokens", "offload_bytes",
                "reload_bytes"):
        assert key in sa


@pytest.mark.parametrize(("model", "tp", "copies"), [("llama-3-8b", 8, 1), ("llama-3-8b", 16, 2),
                                                    ("deepseek-v3", 8, 8)])
def test_a_host_block_holds_every_gpus_copy_of_its_kv(model, tp, copies):
    """vLLM's CPU offloading keeps each tensor-parallel rank's own KV (``kv_offloading_size`` is the sum over
    ranks), so KV the GPUs replicate (8 KV heads on 16 GPUs: two copies; MLA's latent on every GPU) takes host
    memory once per copy: 8 GiB holds half (an eighth) as many blocks, and each offload moves as many more bytes."""
    w = workloads.load_trace(MOONCAKE).head(60)
    s = run_simulation(SimConfig(model=model, gpu="h200", tensor_parallel=tp, kv_tokens=20_000, cpu_offload_gib=8.0,
                                 step_time=0.01), w).summary
    block_bytes = get_model(model).kv_bytes_per_token * copies * 16
    assert s["host_tier_blocks"] == 8 * 2**30 // block_bytes
    assert s["offload_bytes"] > 0 and s["offload_bytes"] % block_bytes == 0


def test_every_replica_of_a_fleet_has_its_own_tier():
    w = workloads.load_trace(MOONCAKE).head(300)
    s = run_simulation(SimConfig(model="llama-3-8b", gpu="h200", kv_tokens=30_000, cpu_offload_gib=4.0, replicas=2,
                                 router="prefix-aware"), w).summary
    assert s["host_tier_blocks"] == 2 * 2048  # 4 GiB of 2 MiB blocks, per replica
    for key in ("gpu_hit_tokens", "host_hit_tokens", "miss_tokens", "offload_bytes", "reload_bytes"):
        assert s[key] == sum(r[key] for r in s["per_replica"]), key
    assert s["host_hit_tokens"] > 0


# vLLM's dense window retention (``--prefix-cache-retention-interval None``): the window group caches every full
# block, so the tier holds what the GPU drops of both groups (under 0, vLLM 0.33's default, C would hit nothing:
# A's window group cached only its prompt's last blocks)
HYBRID_GPU = dict(model="gpt-oss-20b", gpu="h100-80gb", step_time=0.01, prefix_cache_retention_interval=None)
"""gpt-oss-20b: a sliding-window group (window 128) and a full group of 12 layers each, so a host block holds one
group block, half a token's KV: 24 KiB x 16 = 384 KiB."""
HYBRID_BLOCK_BYTES = get_model("gpt-oss-20b").kv_bytes_per_token // 2 * 16


def test_a_hybrid_pool_loads_from_the_host_what_its_gpu_lost():
    """The A, B, C workload on vLLM's hybrid pool of gpt-oss-20b. With room for everything C hits its group's
    512-token prefix. In a pool of 1,024 tokens (128 blocks of 16, shared by the two groups) B evicts most of
    A's blocks, and the GPU alone keeps a hit of 96 tokens. With a host tier the hit is the whole prefix again:
    96 tokens the GPU gives and 416 the tier adds. Of the 40 group blocks that hit needs (the full group's 32,
    the window group's last 8) the GPU still holds 35: 5 are loaded back."""
    w = evicting_workload()
    unlimited = run_simulation(SimConfig(kv_tokens=20_000, **HYBRID_GPU), w).requests
    gpu_only = run_simulation(SimConfig(kv_tokens=1024, **HYBRID_GPU), w).requests
    tiered = run_simulation(SimConfig(kv_tokens=1024, cpu_offload_gib=1.0, **HYBRID_GPU), w)
    assert unlimited["cached_tokens"].tolist() == [0, 0, 512] and gpu_only["cached_tokens"].tolist() == [0, 0, 96]
    r, s = tiered.requests, tiered.summary
    assert r["gpu_hit_tokens"].tolist() == [0, 0, 96] and r["host_hit_tokens"].tolist() == [0, 0, 416]
    assert s["host_tier_blocks"] == 2**30 // HYBRID_BLOCK_BYTES
    assert tiered.steps["reload_blocks"].sum() == 5 and s["reload_bytes"] == 5 * HYBRID_BLOCK_BYTES
    assert s["offload_bytes"] % HYBRID_BLOCK_BYTES == 0 and s["offload_bytes"] > 0


def test_a_hybrid_pools_reloads_are_charged_for_group_blocks():
    """The step that loads C's 5 group blocks moves 5 x 16 group slots, half a token's KV each."""
    cost = RecordingCost()
    config = SimConfig(kv_tokens=1024, cpu_offload_gib=1.0, **(HYBRID_GPU | {"step_time": None}))
    run_simulation(config, evicting_workload(), cost=cost)
    loads = [(args, kwargs) for args, kwargs, _ in cost.calls if kwargs["swap_slots"]]
    assert [(args[4], kwargs["swap_slots"]) for args, kwargs in loads] == [(5, 80)]


@pytest.mark.parametrize(("retention", "host_hits"), [(0, False), (None, True)])
def test_a_hybrid_pool_with_a_tier_fast_forwards_as_it_steps(retention, host_hits):
    """Under vLLM 0.33's default window retention (0) no hit of these 100 requests needs a window block the
    GPU lost (its window groups cache few), under dense retention (None) some do; either way the fast-forward
    ends where stepping does."""
    w = workloads.load_trace(MOONCAKE).head(100)
    options = dict(model="gpt-oss-20b", gpu="h200", kv_tokens=30_000, cpu_offload_gib=1000.0, debug_invariants=50,
                   prefix_cache_retention_interval=retention)
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert (fast.summary["host_hit_tokens"] > 0) == host_hits and len(fast.steps) < len(slow.steps)
    assert_same_tiered_run(fast, slow)
