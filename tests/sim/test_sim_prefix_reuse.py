"""Prefix reuse through the simulator: every prefix-caching allocator hits a trace's whole theoretical reuse
with unlimited memory (GPU, or a small GPU behind an unlimited host tier, on vLLM's hybrid pool too), `radix`
and `paged` agree on block-aligned prefixes while `radix` at block size 1 also hits the unaligned rest,
``--scheduling-policy lpm`` admits the longest cached prefix first, the same in fast-forward and step by step,
and `radix` spills to and reloads from the host tier as `paged` does."""

import numpy as np
import pytest

import workloads
from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_memory_map, assert_same_step_totals, assert_same_summary
from workloads import Workload
from workloads.named import generate
from workloads.presets import SAMPLES_DIR

CACHING = ["paged", "radix"]
MOONCAKE = SAMPLES_DIR / "conversation_trace.jsonl"
UNIT = 64  # tokens per trace hash (Mooncake's hash_ids cover 512)


def hashed_trace(count: int = 40, seed: int = 3) -> tuple[Workload, list[list[int]]]:
    """Requests far apart (each finishes before the next arrives) whose hash ids follow a few conversation
    trees: each request copies a random earlier request's first units and then diverges."""
    rng = np.random.default_rng(seed)
    ids: list[list[int]] = []
    prompts = []
    fresh = 10_000
    for i in range(count):
        units = int(rng.integers(1, 9))
        if i and rng.random() < 0.8:
            parent = ids[int(rng.integers(0, i))]
            keep = int(rng.integers(0, len(parent) + 1))
            row = parent[:keep] + list(range(fresh, fresh + units))
        else:
            row = list(range(fresh, fresh + units))
        fresh += units
        ids.append(row)
        prompts.append(int(rng.integers((len(row) - 1) * UNIT + 1, len(row) * UNIT + 1)))  # the last unit partial
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in ids])])
    w = Workload(arrival_time_s=np.arange(count) * 100.0, prompt_tokens=np.array(prompts),
                 output_tokens=np.full(count, 7), hash_offsets=offsets, hash_values=np.concatenate(ids),
                 prefix_hash_tokens=UNIT, name="hashed")
    return w, ids


def theoretical_hits(ids: list[list[int]], prompts: list[int], block_size: int) -> list[int]:
    """Per request: the longest prefix it shares with any earlier one (equal hash ids, each covering UNIT
    tokens, bounded by both prompts), whole blocks only, never its last prompt token."""
    hits = []
    for i, row in enumerate(ids):
        best = 0
        for j in range(i):
            units = 0
            while units < min(len(row), len(ids[j])) and row[units] == ids[j][units]:
                units += 1
            best = max(best, min(units * UNIT, prompts[i], prompts[j]))
        hits.append(min(best, prompts[i] - 1) // block_size * block_size)
    return hits


@pytest.mark.parametrize("allocator", CACHING)
@pytest.mark.parametrize("block_size", [1, 16])
def test_unlimited_memory_hits_the_whole_theoretical_reuse(allocator, block_size):
    w, ids = hashed_trace()
    expected = theoretical_hits(ids, w.prompt_tokens.tolist(), block_size)
    assert sum(expected) > 3000  # the trace really shares prefixes
    r = run_simulation(SimConfig(allocator=allocator, kv_tokens=200_000, block_size=block_size,
                                 memory_snapshots=0), w)
    assert r.requests["cached_tokens"].tolist() == expected
    assert r.summary["cached_prompt_tokens"] == sum(expected)


def system_prompt(prefix_len: int) -> Workload:
    """Ten requests far apart, 600-token prompts sharing their first ``prefix_len`` tokens."""
    return Workload(arrival_time_s=np.arange(10) * 100.0, prompt_tokens=np.full(10, 600),
                    output_tokens=np.full(10, 5), prefix_group=np.zeros(10, int),
                    prefix_len=np.full(10, prefix_len))


def cached(allocator: str, block_size: int, w: Workload) -> int:
    return run_simulation(SimConfig(allocator=allocator, block_size=block_size, kv_tokens=20_000,
                                    memory_snapshots=0), w).summary["cached_prompt_tokens"]


def test_radix_matches_paged_on_aligned_prefixes_and_hits_the_unaligned_rest_at_block_size_1():
    aligned, unaligned = system_prompt(512), system_prompt(500)
    # 512 = 32 blocks of 16: nine requests hit all of it, in both designs
    assert cached("paged", 16, aligned) == cached("radix", 16, aligned) == 9 * 512
    # 500 = 31 blocks of 16 + 4 tokens: blocks of 16 hit 496, token-granular pages all 500
    assert cached("paged", 16, unaligned) == cached("radix", 16, unaligned) == 9 * 496
    assert cached("radix", 1, unaligned) == 9 * 500


def lpm_workload() -> Workload:
    """Request 0 (group 1's 512-token prefix) runs alone (max_num_seqs 1) while 1 (no prefix), 2 (group 1) and
    3 (group 2) arrive and wait."""
    return Workload(arrival_time_s=np.array([0.0, 0.01, 0.02, 0.03]), prompt_tokens=np.full(4, 600),
                    output_tokens=np.array([50, 5, 5, 5]), prefix_group=np.array([1, -1, 1, 2]),
                    prefix_len=np.array([512, 0, 512, 512]))


@pytest.mark.parametrize("allocator", CACHING)
def test_lpm_admits_the_longest_cached_prefix_first(allocator):
    w = lpm_workload()
    order = {}
    for policy in ("fcfs", "lpm"):
        r = run_simulation(SimConfig(allocator=allocator, kv_tokens=20_000, max_num_seqs=1,
                                     scheduling_policy=policy, memory_snapshots=0), w)
        order[policy] = r.requests.sort_values("admitted_s")["request_id"].tolist()
        hits = r.requests.set_index("request_id")["cached_tokens"]
        assert hits[2] == 512 and hits[1] == 0
    assert order["fcfs"] == [0, 1, 2, 3]
    assert order["lpm"] == [0, 2, 1, 3]  # 2 finds 512 tokens cached; 1 and 3 none, so queue order


@pytest.mark.parametrize("step_by_step", [False, True])
def test_lpm_sorts_last_a_request_sharing_an_uncached_prefix_with_one_before_it(step_by_step):
    """SGLang's in-batch prefix caching: 0 and 1 share a 512-token prefix nobody has computed yet, so 1 goes behind
    2 and hits what 0 computed, where FCFS admits 0 and 1 together (two sequences at most)."""
    w = Workload(arrival_time_s=np.zeros(3), prompt_tokens=np.full(3, 600), output_tokens=np.full(3, 20),
                 prefix_group=np.array([2, 2, -1]), prefix_len=np.array([512, 512, 0]))
    order = {}
    for policy in ("fcfs", "lpm"):
        r = run_simulation(SimConfig(allocator="paged", kv_tokens=20_000, max_num_seqs=2, scheduling_policy=policy,
                                     step_by_step=step_by_step, memory_snapshots=0), w)
        order[policy] = r.requests.sort_values(["admitted_s", "request_id"])["request_id"].tolist()
        assert r.requests.set_index("request_id")["cached_tokens"][1] == 512
    assert order == {"fcfs": [0, 1, 2], "lpm": [0, 2, 1]}


@pytest.mark.parametrize("fillers, bound, rank", [(100, 128, 1), (140, 128, 14), (140, 0, 1), (140, 135, 7)])
def test_lpm_sorts_no_queue_of_more_than_128(fillers, bound, rank):
    """Request 0 caches a 512-token prefix while ``fillers`` requests without one queue, then one more with it. With
    at most 128 queued it goes next (rank 1); with 141 nothing is sorted (SGLang's rule) until 13 fillers have
    gone and 128 are left, so it is the 14th after request 0; with no bound (``lpm_max_queue`` 0) next again, and
    with a bound of 135 the 7th. The same step by step."""
    count = fillers + 2
    groups = np.full(count, -1)
    groups[[0, -1]] = 1
    w = Workload(arrival_time_s=np.arange(count) * 1e-3, prompt_tokens=np.full(count, 600),
                 output_tokens=np.full(count, 5), prefix_group=groups, prefix_len=np.where(groups == 1, 512, 0))
    runs = [run_simulation(SimConfig(allocator="paged", kv_tokens=20_000, max_num_seqs=1, scheduling_policy="lpm",
                                     lpm_max_queue=bound, step_by_step=step_by_step, memory_snapshots=0), w)
            for step_by_step in (False, True)]
    for r in runs:
        admitted = r.requests.sort_values("admitted_s")["request_id"].tolist()
        assert admitted.index(count - 1) == rank
        assert r.requests.set_index("request_id")["cached_tokens"][count - 1] == 512
    assert_same_summary(runs[0].summary, runs[1].summary)


@pytest.mark.parametrize("allocator, count, tier", [("paged", 80, {}), ("radix", 80, {}),
                                                    ("paged", 400, {"cpu_offload_gib": 0.5}),
                                                    ("radix", 400, {"cpu_offload_gib": 0.5,
                                                                    "offload_write_policy": "write_through"})])
def test_lpm_fast_forward_equals_step_by_step(allocator, count, tier):
    """Also with a queue that grows past 128 and shrinks again (sorted, then left as it is, then sorted), and a
    host tier whose stores and spills change what queued requests hit."""
    rng = np.random.default_rng(7)
    w = Workload(arrival_time_s=np.cumsum(rng.exponential(0.05 * 80 / count, count)),
                 prompt_tokens=rng.integers(300, 700, count), output_tokens=rng.integers(5, 200, count),
                 prefix_group=rng.integers(0, 4, count), prefix_len=rng.integers(100, 300, count))
    options = dict(allocator=allocator, kv_tokens=5000, scheduling_policy="lpm", memory_snapshots=0, **tier)
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert len(fast.steps) < len(slow.steps)
    assert fast.summary["preemptions"] > 0 and fast.summary["cached_prompt_tokens"] > 0
    if count > 128:
        assert fast.steps["waiting"].max() > 128
    if tier:
        assert fast.summary["host_hit_tokens"] > 0
    assert fast.requests["cached_tokens"].tolist() == slow.requests["cached_tokens"].tolist()
    np.testing.assert_allclose(fast.requests["finished_s"], slow.requests["finished_s"], rtol=1e-9)
    assert_same_summary(fast.summary, slow.summary)
    assert_same_memory_map(fast, slow)
    assert_same_step_totals(fast, slow)


@pytest.mark.parametrize("step_by_step", [False, True])
def test_radix_hits_the_previous_turns_prompt_and_output(step_by_step):
    """Turns of 100-token messages and 50-token outputs: pages of 16 hit every full page of the previous turn
    (144 of 150 shared tokens, then 288 of 300), as `paged` does; token-granular pages hit every token the
    previous turn computed, i.e. all but its last sampled token, which never gets a slot (149, then 299)."""
    w = generate("fixed:prompt=100,output=50", "constant:rate=0.001", 3, seed=0, turns=3, turn_gap_s=1000.0)
    for block_size, hits in ((16, [0, 144, 288]), (1, [0, 149, 299])):
        r = run_simulation(SimConfig(allocator="radix", kv_tokens=20_000, block_size=block_size,
                                     step_by_step=step_by_step, memory_snapshots=0), w)
        assert r.requests["cached_tokens"].tolist() == hits


@pytest.mark.parametrize("block_size", [16, 1])
def test_radix_sessions_fast_forward_equals_step_by_step(block_size):
    w = generate("lognormal:prompt_mean=300,prompt_cv=1,output_mean=120,output_cv=1,max_total=4000",
                 "poisson:rate=4", 120, seed=3, turns=4, think_time_s=1.0, system_prompt_len=200,
                 system_prompt_frac=0.5)
    options = dict(allocator="radix", kv_tokens=6000, block_size=block_size, memory_snapshots=0)
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert fast.requests["cached_tokens"].tolist() == slow.requests["cached_tokens"].tolist()
    np.testing.assert_allclose(fast.requests["finished_s"], slow.requests["finished_s"], rtol=1e-9)
    assert fast.summary["cached_frac"] == pytest.approx(slow.summary["cached_frac"], rel=1e-9)
    assert fast.summary["prefix_hit_frac"] > 0.15


def test_radix_with_a_host_tier_recovers_the_hits_a_small_gpu_loses():
    """The host tier's hand-counted case (`tests/sim/test_sim_host_tier.py`) through `radix`: A (group 0), B
    (group 1), C (group 0) alone in 47 usable pages; B evicts A's 28 deepest cached pages, leaves first, to the
    host; C finds 9 pages (144 tokens) on the GPU and the next 23 (368) on the host, as with `paged`."""
    w = Workload(arrival_time_s=np.array([0.0, 100.0, 200.0]), prompt_tokens=np.full(3, 600),
                 output_tokens=np.full(3, 5), prefix_group=np.array([0, 1, 0]), prefix_len=np.full(3, 512))
    small = dict(allocator="radix", kv_tokens=48 * 16, step_time=0.01, memory_snapshots=0)
    assert run_simulation(SimConfig(**small), w).requests["cached_tokens"].tolist() == [0, 0, 144]
    tiered = run_simulation(SimConfig(cpu_offload_gib=1.0, **small), w)
    r, s = tiered.requests, tiered.summary
    assert r["gpu_hit_tokens"].tolist() == [0, 0, 144] and r["host_hit_tokens"].tolist() == [0, 0, 368]
    block_bytes = s["offload_bytes"] // 56
    assert (s["offload_bytes"], s["reload_bytes"]) == (56 * block_bytes, 23 * block_bytes)


@pytest.mark.parametrize(("block_size", "rows", "kv_tokens"), [(16, 300, 60_000), (1, 150, 30_000)])
def test_radix_with_a_host_tier_fast_forward_equals_step_by_step(block_size, rows, kv_tokens):
    w = workloads.load_trace(MOONCAKE).head(rows)
    options = dict(allocator="radix", model="llama-3-8b", gpu="h200", kv_tokens=kv_tokens, block_size=block_size,
                   cpu_offload_gib=4.0, memory_snapshots=0, debug_invariants=500)
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert fast.summary["host_hit_tokens"] > 0 and fast.summary["reload_bytes"] > 0
    for column in ("cached_tokens", "gpu_hit_tokens", "host_hit_tokens", "preemptions"):
        assert fast.requests[column].tolist() == slow.requests[column].tolist(), column
    assert_same_summary(fast.summary, slow.summary)
    assert_same_memory_map(fast, slow)
    assert_same_step_totals(fast, slow)


@pytest.mark.parametrize(("allocator", "model"), [("paged", "llama-3-8b"), ("radix", "llama-3-8b"),
                                                  ("paged", "gpt-oss-20b"), ("paged", "gemma-3-12b")])
def test_a_small_gpu_with_unlimited_host_memory_hits_the_whole_theoretical_reuse(allocator, model):
    """The same trace in a GPU pool of 1,024 tokens (two requests' worth), behind a host tier too large to
    evict anything: every block the GPU drops is found on the host. gpt-oss-20b and gemma-3-12b run on vLLM's
    hybrid pool (sliding-window groups beside a full one), with its dense window retention (``None``: every full
    block cached, as the theoretical reuse counts them; vLLM 0.33's default 0 caches a window group's blocks only
    before a prompt's last token and a shared prefix's end)."""
    w, ids = hashed_trace()
    expected = theoretical_hits(ids, w.prompt_tokens.tolist(), 16)
    r = run_simulation(SimConfig(allocator=allocator, model=model, gpu="h100-80gb", kv_tokens=1024,
                                 cpu_offload_gib=64.0, memory_snapshots=0, prefix_cache_retention_interval=None), w)
    assert r.requests["cached_tokens"].tolist() == expected
    assert r.summary["host_hit_tokens"] > 0 and r.summary["preemptions"] == 0


def test_fast_forward_equals_step_by_step_when_a_cut_hit_puts_the_head_over_the_budget():
    """Without chunked prefill a refused head whose hit an eviction cuts may then need more prefill than the
    token budget: it waits on the budget, not on memory, and free slots stop counting as external
    fragmentation. A run ends at any cut of the head's hit there. Before, the fast-forward counted them as
    external to the run's end: external_frag_frac 0.055413 against stepping's 0.055385 (same decisions)."""
    w = generate("lognormal:prompt_mean=100,prompt_cv=1,output_mean=400,output_cv=1,max_total=3000",
                 "constant:rate=20", 300, seed=82023)[:78]
    options = dict(allocator="radix", model="llama-3-8b", gpu="h100-80gb", kv_tokens=3000, block_size=32,
                   chunked_prefill=False, max_num_batched_tokens=512, memory_snapshots=0)
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert len(fast.steps) < len(slow.steps) / 2
    assert_same_summary(fast.summary, slow.summary)
