"""The host tier's write policy end to end (``--offload-write-policy``): write-through stores every block as it
is computed, so a host larger than what the GPU evicts hits what write-back hits at more offload traffic, and
a host smaller than a prefill's blocks stores nothing; generated blocks are stored as decoding fills them, in the
same steps whether decode runs are skipped ahead or stepped; the flag's values, its summary key, and where it
does not apply."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from allocators.catalog import get_model
from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_memory_map, assert_same_step_totals, assert_same_summary
from tests.sim.test_sim_host_tier import BLOCK_BYTES, SMALL_GPU, evicting_workload, host_gib
from workloads.named import generate


def blocks(summary: dict, key: str) -> float:
    return summary[key] / BLOCK_BYTES


def test_a_roomy_host_hits_the_same_blocks_for_more_traffic():
    """The A, B, C workload of `test_sim_host_tier` (37 hashed blocks a request, 32 of them its group's prefix)
    with 81 host blocks: write-back offloads the 56 blocks B and C evict; write-through stores A's 37 and B's
    37 as they are computed and C's 5 own ones (its 32 prefix blocks are hits, and a request that loads host
    hits does not offer its hit blocks), 79 in all.
    Both find C's prefix: 144 tokens on the GPU, 368 on the host, 23 blocks loaded back."""
    w = evicting_workload()
    back = run_simulation(SimConfig(cpu_offload_gib=1.0, **SMALL_GPU), w)
    through = run_simulation(SimConfig(cpu_offload_gib=1.0, offload_write_policy="write_through", **SMALL_GPU), w)
    for r in (back, through):
        assert r.requests["gpu_hit_tokens"].tolist() == [0, 0, 144]
        assert r.requests["host_hit_tokens"].tolist() == [0, 0, 368]
        assert blocks(r.summary, "reload_bytes") == 23
    assert (blocks(back.summary, "offload_bytes"), blocks(through.summary, "offload_bytes")) == (56, 79)
    assert (back.summary["offload_write_policy"], through.summary["offload_write_policy"]) == (
        "write_back", "write_through")


def test_a_host_smaller_than_a_prefill_stores_nothing_when_written_through():
    """10 host blocks: write-back keeps the last 10 blocks the GPU evicted, A's h9..h18, and C hits them (160
    tokens). Written through, each request offers its 37 prompt blocks in the step that computes them, which
    would take 27 evictions from a host holding nothing outside the offer: vLLM stores a step's blocks all or
    none, so nothing is stored (and the 5 generated tokens fill no further block)."""
    w = evicting_workload()
    back = run_simulation(SimConfig(cpu_offload_gib=host_gib(10), **SMALL_GPU), w)
    through = run_simulation(SimConfig(cpu_offload_gib=host_gib(10), offload_write_policy="write_through",
                                       **SMALL_GPU), w)
    assert back.requests["host_hit_tokens"].tolist() == [0, 0, 160]
    assert through.requests["host_hit_tokens"].tolist() == [0, 0, 0]
    assert through.requests["gpu_hit_tokens"].tolist() == [0, 0, 144]
    assert through.summary["offload_bytes"] == 0


def test_generated_blocks_are_stored_as_decoding_fills_them():
    """Three turns of one session (100-token messages, 50-token outputs, block 16) on a GPU that evicts
    nothing: turn 1 holds 149 slots (9 full blocks: 6 of prompt, 3 generated), turn 2 299 (18) and turn 3 449
    (28). Write-through without ``offload_prompt_only`` stores each full block once: 28. With it (vLLM's
    default) a turn's prompt blocks only: 6, then 15 and 25 (a turn's output is stored as part of the next
    turn's prompt), so 25. Write-back stores none, as nothing is evicted."""
    w = generate("fixed:prompt=100,output=50", "constant:rate=0.001", 3, seed=0, turns=3, turn_gap_s=1000.0)
    for step_by_step in (False, True):
        for prompt_only, stored in ((False, 28), (True, 25)):
            r = run_simulation(SimConfig(kv_tokens=20_000, cpu_offload_gib=1.0, offload_write_policy="write_through",
                                         offload_prompt_only=prompt_only, step_by_step=step_by_step), w)
            assert r.requests["cached_tokens"].tolist() == [0, 144, 288]
            assert blocks(r.summary, "offload_bytes") == stored
    back = run_simulation(SimConfig(kv_tokens=20_000, cpu_offload_gib=1.0), w)
    assert back.summary["offload_bytes"] == 0


@pytest.mark.parametrize(("allocator", "tier"), [
    ("paged", {}), ("paged-cow", {}), ("radix", {}),
    ("radix", {"offload_store_threshold": 2}), ("radix", {"offload_eviction_policy": "arc"}),
    ("paged", {"offload_prompt_only": True}),
])
def test_fast_forward_equals_step_by_step_when_written_through(allocator, tier):
    """Sessions (generated blocks have hashes) on a small GPU and a 16-block host, where the order of stores
    decides what the host keeps: skipping decode runs ahead must store in the steps stepping does, with a
    store threshold (generated blocks are offered as decoding fills them, ``offload_prompt_only`` off) and under
    ARC too; with prompts only stored (vLLM's default) as well."""
    w = generate("lognormal:prompt_mean=300,prompt_cv=1,output_mean=120,output_cv=1,max_total=4000",
                 "poisson:rate=4", 120, seed=3, turns=4, think_time_s=1.0, system_prompt_len=200,
                 system_prompt_frac=0.5)
    options = dict(allocator=allocator, kv_tokens=6000, cpu_offload_gib=0.2, offload_write_policy="write_through",
                   debug_invariants=50, **{"offload_prompt_only": False, **tier})
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert len(fast.steps) < len(slow.steps)
    assert fast.summary["host_hit_tokens"] > 0 and fast.summary["host_tier_blocks"] == 16
    for column in ("cached_tokens", "gpu_hit_tokens", "host_hit_tokens", "preemptions"):
        assert fast.requests[column].tolist() == slow.requests[column].tolist(), column
    np.testing.assert_allclose(fast.requests["finished_s"], slow.requests["finished_s"], rtol=1e-9)
    assert_same_summary(fast.summary, slow.summary)
    assert_same_memory_map(fast, slow)
    assert_same_step_totals(fast, slow)


@pytest.mark.parametrize("allocator", ["radix", "paged-cow"])
def test_a_forked_sample_offers_its_prompt_in_the_step_stepping_does(allocator):
    """Parallel samples (n = 2) fork at the first token: the fork shares the prompt's hashed blocks but has
    not offered them to a write-through tier, so its first filled block offers them all (reused: the parent
    stored them), touching them in the host's order; a failed store leaves blocks unoffered the same way.
    Skipped ahead (radix), that fill used to be synced a step late, when the fork needed its next block (100
    requests on a 3,000-slot GPU and a 102-block host: 6,016,729,088 bytes offloaded against 5,815,402,496
    stepping)."""
    w = generate("lognormal:prompt_mean=300,prompt_cv=1,output_mean=150,output_cv=1,max_total=2048",
                 "poisson:rate=3", 100, seed=5, n=2)
    options = dict(allocator=allocator, model="llama-3-8b", kv_tokens=3000, cpu_offload_gib=0.2,
                   offload_write_policy="write_through")
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert len(fast.steps) < len(slow.steps)
    assert fast.summary["offload_bytes"] == slow.summary["offload_bytes"]
    assert_same_summary(fast.summary, slow.summary)
    assert_same_memory_map(fast, slow)
    assert_same_step_totals(fast, slow)


@pytest.mark.parametrize("allocator", ["paged", "radix", "paged-cow"])
def test_a_store_that_evicts_the_heads_host_hit_ends_a_decode_run(allocator):
    """The refused head of the queue hits 8 blocks on a 25-block host (ARC); a decoder filling a block stores
    it, and the store evicts the head's first host block: its hit drops to nothing, its first chunk (64 tokens,
    nothing reserved for the rest) needs 4 blocks instead of 12, and it fits. A decode run ends before a
    store that may evict while the head has a host hit (the policy picks what goes). Before, the run went past
    it (radix: 637 preemptions fast-forwarded against stepping's 638)."""
    w = generate("lognormal:prompt_mean=300,prompt_cv=1,output_mean=150,output_cv=1,max_total=2048",
                 "poisson:rate=4", 150, seed=1)
    options = dict(allocator=allocator, model="llama-3-8b", kv_tokens=1500, cpu_offload_gib=0.05,
                   offload_write_policy="write_through", offload_eviction_policy="arc",
                   long_prefill_token_threshold=64, scheduler_reserve_full_isl=False)
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert len(fast.steps) < len(slow.steps) / 2 and fast.summary["host_hit_tokens"] > 0
    assert fast.requests["preemptions"].tolist() == slow.requests["preemptions"].tolist()
    assert_same_summary(fast.summary, slow.summary)
    assert_same_memory_map(fast, slow)
    assert_same_step_totals(fast, slow)


TIER_SETTINGS = {"write-through": ("--cpu-offload-gib", "1", "--offload-write-policy", "write_through"),
                 "write-back": ("--cpu-offload-gib", "1"), "no tier": ()}
"""Three host tiers a write-through-only flag can meet (`summaries_by_tier`)."""


def summaries_by_tier(*flag: str) -> dict[str, dict]:
    """``kvsim run --json`` of three requests with ``flag``, behind each of `TIER_SETTINGS`: setting -> summary."""
    summaries = {}
    for setting, tier in TIER_SETTINGS.items():
        result = CliRunner().invoke(main, ["run", *tier, "--num-requests", "3", "--step-time", "0.01", "--json",
                                           *flag])
        assert result.exit_code == 0, result.output
        summaries[setting] = json.loads(result.stdout)
    return summaries


def test_the_flag_is_reported_and_named_where_it_does_nothing():
    common = ["--num-requests", "3", "--step-time", "0.01", "--json"]
    tiered = CliRunner().invoke(main, ["run", "--cpu-offload-gib", "1", "--offload-write-policy", "write_through",
                                       *common])
    assert tiered.exit_code == 0, tiered.output
    summary = json.loads(tiered.stdout)
    assert summary["offload_write_policy"] == "write_through" and "ignored_settings" not in summary
    alone = CliRunner().invoke(main, ["run", "--offload-write-policy", "write_through", *common])
    assert alone.exit_code == 0, alone.output
    summary = json.loads(alone.stdout)
    assert summary["offload_write_policy"] is None
    assert summary["ignored_settings"] == {
        "--offload-write-policy write_through": "this run has no host tier to write to"}


def test_a_bad_policy_is_a_one_line_error():
    result = CliRunner().invoke(main, ["run", "--cpu-offload-gib", "1", "--offload-write-policy", "write-around"])
    assert result.exit_code == 2 and "'write-around' is not one of 'write_back', 'write_through'" in result.output
    with pytest.raises(ValueError, match="^--offload-write-policy must be one of write_back, write_through, "
                                         "got 'lazy'$"):
        SimConfig(offload_write_policy="lazy")


def test_the_hybrid_pool_refuses_a_lru_tier():
    """Storing a sliding-window group's blocks as computed is not modelled: a one-line error, not a
    write-back run answering another question."""
    config = SimConfig(model="gpt-oss-20b", gpu="h100-80gb", step_time=0.01, cpu_offload_gib=1.0,
                       offload_write_policy="write_through")
    with pytest.raises(ValueError, match="write_through is not modelled for vLLM's hybrid KV cache manager"):
        run_simulation(config, evicting_workload())
    result = CliRunner().invoke(main, ["run", "--model", "gpt-oss-20b", "--gpu", "h100-80gb", "--num-requests", "2",
                                       "--cpu-offload-gib", "1", "--offload-write-policy", "write_through"])
    assert result.exit_code != 0 and result.output.strip().splitlines()[-1].startswith(
        "Error: --offload-write-policy write_through is not modelled")


def test_storing_generated_blocks_is_reported_and_named_where_it_does_nothing():
    s = summaries_by_tier("--no-offload-prompt-only")
    assert [s[k]["offload_prompt_only"] for k in TIER_SETTINGS] == [False, False, None]
    assert "ignored_settings" not in s["write-through"]
    assert s["write-back"]["ignored_settings"] == {
        "--no-offload-prompt-only": "it widens write-through stores to generated blocks (vLLM's offload_prompt_only); "
                                    "a write_back tier stores what the GPU evicts"}
    assert s["no tier"]["ignored_settings"] == {"--no-offload-prompt-only": "this run has no host tier to store to"}
    assert summaries_by_tier()["write-through"]["offload_prompt_only"] is True


def test_a_decode_run_stopped_by_a_preemption_holds_its_last_steps_stores():
    """Block size 1: every decoder's sync both fills a block (a write-through store) and needs a new one, and a
    request's two parallel samples sync at the same step. When the pool runs out at such a step, the first
    sample's sync is made and the second's refused, and the scheduler plans the step, preempting the request.
    Step by step, a step's stores are held until it is planned and a preempted sequence's are dropped (vLLM
    stores only what it schedules); the decode run had made the first sample's store at once. Before: 7,073
    blocks offloaded fast-forwarded against stepping's 7,070 (4 preemptions)."""
    w = generate("lognormal:prompt_mean=400,prompt_cv=1,output_mean=200,output_cv=1,max_total=2000",
                 "poisson:rate=6", 10, seed=8534, turns=2, think_time_s=0.01, n=2)
    options = dict(model="llama-3-8b", kv_tokens=2500, block_size=1, cpu_offload_gib=1.0,
                   offload_write_policy="write_through", offload_prompt_only=False, step_time=0.01)
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert len(fast.steps) < len(slow.steps) and fast.summary["preemptions"] > 0
    token_bytes = get_model("llama-3-8b").kv_bytes_per_token  # a block of one token
    assert fast.summary["offload_bytes"] == slow.summary["offload_bytes"] == 7070 * token_bytes
    assert_same_summary(fast.summary, slow.summary)
    assert_same_memory_map(fast, slow)
    assert_same_step_totals(fast, slow)
