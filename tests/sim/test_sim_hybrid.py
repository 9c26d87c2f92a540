"""The simulator on a hybrid model (sliding-window and full layers): ``paged`` is vLLM v1's hybrid manager,
the fast-forward equals ``--step-by-step``, memory is reported per group and in total, and windows let more
requests run at once than treating every layer as full attention (``--disable-hybrid-kv-cache-manager``)."""


import numpy as np
import pytest

from allocators import catalog
from allocators.hybrid import HybridPagedAllocator
from allocators.paged import PagedAllocator
from sim.kernel.config import SimConfig
from sim.kernel.metrics import GROUP_KEYS
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_hybrid_run, assert_same_step_totals
from workloads import Workload


def long_prompts(count=40, seed=3):
    rng = np.random.default_rng(seed)
    return Workload(arrival_time_s=np.cumsum(rng.exponential(0.05, count)),
                    prompt_tokens=rng.integers(1500, 3000, count), output_tokens=rng.integers(100, 600, count),
                    name="long-prompts")


def config(model, **options):
    return SimConfig(model=model, gpu="h100-80gb", **({"kv_tokens": 40_000, "max_num_batched_tokens": 2048} | options))


def test_paged_on_a_hybrid_model_is_the_hybrid_manager(hybrid_model):
    from sim.kernel.metrics import Recorder
    from sim.kernel.replica import build_replica

    model, gpu = catalog.get_model(hybrid_model), catalog.get_gpu("h100-80gb")
    memory, _, _ = build_replica(config(hybrid_model), model, gpu, 40_000, Recorder(0))
    assert isinstance(memory._alloc, HybridPagedAllocator) and memory.slots_per_token == 4
    memory, _, _ = build_replica(config(hybrid_model, disable_hybrid_kv_cache_manager=True), model, gpu, 40_000,
                                 Recorder(0))
    assert type(memory._alloc) is PagedAllocator
    memory, _, _ = build_replica(config("llama-3-8b"), catalog.get_model("llama-3-8b"), gpu, 40_000, Recorder(0))
    assert type(memory._alloc) is PagedAllocator


def test_fast_forward_equals_step_by_step(hybrid_model):
    """Windows free blocks in the middle of decode runs; the fast-forward stops at those steps, so it ends
    with the same requests, times and memory integrals as stepping one step at a time."""
    w = long_prompts()
    fast = run_simulation(config(hybrid_model, debug_invariants=7), w)
    slow = run_simulation(config(hybrid_model, step_by_step=True), w)
    assert len(fast.steps) < len(slow.steps) / 3
    assert_same_hybrid_run(fast, slow)


def test_memory_is_reported_per_group_and_in_total(hybrid_model):
    """Step rows carry per-group columns that add up to the used share; the summary's per-group shares add
    up to its total shares; the capacity is counted in group slots (4 per token: three sliding-window groups, one
    full)."""
    r = run_simulation(config(hybrid_model, step_by_step=True), long_prompts(count=15))
    s, steps = r.summary, r.steps
    assert s["kv_capacity_tokens"] == 40_000 and s["kv_capacity_slots"] == 160_000
    assert (steps["capacity"] == 160_000).all()
    for key in ("token_states", "reservation", "internal_frag", "used_blocks"):
        assert (steps[[f"{g}_{key}" for g in ("sliding_window", "full")]].sum(axis=1) == steps[key]).all(), key
    assert set(GROUP_KEYS) == {"token_states", "reservation", "internal_frag", "used_blocks"}
    parts = steps[["token_states", "reservation", "internal_frag", "external_frag", "free"]].sum(axis=1)
    assert (parts == steps["capacity"]).all()
    for key in ("token_states_frac", "reservation_frac", "internal_frag_frac"):
        assert sum(g[key] for g in s["kv_groups"].values()) == pytest.approx(s[key], rel=1e-9)
    # the full group grows with every token, the sliding-window groups hold about a window each
    assert steps["full_used_blocks"].max() * 3 > steps["sliding_window_used_blocks"].max()


def test_a_run_that_ends_at_time_zero_still_reports_its_groups(hybrid_model):
    """Every request rejected on arrival at t = 0: no time passes, but the pool is still a hybrid one, so the
    summary keeps ``kv_capacity_slots`` and ``kv_groups`` (with no shares: nothing was integrated)."""
    w = Workload(arrival_time_s=np.zeros(1), prompt_tokens=np.array([50_000]), output_tokens=np.array([10]))
    s = run_simulation(config(hybrid_model), w).summary
    assert s["rejected"] == 1 and s["sim_time_s"] == 0.0
    assert s["kv_capacity_slots"] == 160_000 and s["kv_groups"] == {"sliding_window": {}, "full": {}}


def test_windows_run_more_requests_at_once_than_full_attention(hybrid_model):
    """The same memory, the same long prompts: freeing what falls out of the 256-token windows lets more
    requests decode together than allocating every layer for every token."""
    w = long_prompts(count=60)
    hybrid = run_simulation(config(hybrid_model), w).summary
    full = run_simulation(config(hybrid_model, disable_hybrid_kv_cache_manager=True), w).summary
    assert hybrid["mean_running"] > 1.5 * full["mean_running"]
    assert hybrid["max_running"] > full["max_running"]
    assert hybrid["throughput_tok_s"] > full["throughput_tok_s"]


def test_memory_map_shows_the_groups(hybrid_model):
    """The memory table of a hybrid pool says which attention group holds each slot, and the memory-map plot
    outlines each group and gives its share of the slots."""
    from sim.plots.memory_map import plot_memory_map

    cfg = SimConfig(model=hybrid_model, gpu="h100-80gb", kv_tokens=12_000, memory_snapshots=3)
    memory = run_simulation(cfg, long_prompts(count=6)).memory
    assert list(memory["group"].cat.categories) == ["sliding_window", "full"]
    held = memory["owner"] >= 0
    assert held.any() and memory.loc[held, "group"].notna().all()
    assert memory.loc[~held & (memory["owner"] != -3), "group"].isna().all()
    fig = plot_memory_map(memory)
    text = fig.axes[0].get_title(loc="left")
    assert "KV groups: sliding_window" in text and "full" in text
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "sliding_window layers' blocks" in labels and "full layers' blocks" in labels


@pytest.mark.parametrize("name, groups, window", [
    ("gemma-3-12b", ["sliding_window.0", "sliding_window.1", "sliding_window.2", "sliding_window.3",
                     "sliding_window.4", "full"], 1024),  # 40 + 8 layers: groups of 8
    ("gpt-oss-20b", ["sliding_window", "full"], 128),  # 12 + 12 layers
    ("mistral-7b", ["sliding_window"], 4096),  # every layer has the window: one group, freeing
    ("llama-3.1-8b", None, None),
    ("deepseek-v3", None, None),  # MLA: one group, full attention
])
def test_catalog_models_get_the_manager_vllm_picks(name, groups, window):
    """``--allocator paged`` on a catalog model is the hybrid manager exactly when vLLM uses it (a window or
    more than one KV group), cut into vLLM's KV cache groups; otherwise the plain paged allocator."""
    from sim.kernel.metrics import Recorder
    from sim.kernel.replica import build_replica

    model, gpu = catalog.get_model(name), catalog.get_gpu("h100-80gb")
    memory, _, _ = build_replica(SimConfig(model=name, gpu="h100-80gb", kv_tokens=50_000), model, gpu, 50_000,
                                 Recorder(0))
    alloc = memory._alloc
    if groups is None:
        assert type(alloc) is PagedAllocator
        return
    assert isinstance(alloc, HybridPagedAllocator)
    assert [g.name for g in alloc.groups] == groups and alloc.slots_per_token == len(groups)
    assert alloc.windows[0] == window and alloc.capacity == 50_000 * model.num_layers // alloc.unit


@pytest.mark.parametrize(("retention", "hitting"), [(0, 28), (None, 29)])
def test_shared_prefixes_hit_and_fast_forward_still_equals_step_by_step(hybrid_model, retention, hitting):
    """Requests sharing a 2,000-token prefix hit it in every group (the window groups need only its last
    window's blocks), and the fast-forward still ends where stepping one step at a time does. Under vLLM 0.33's
    default retention (0) the first request's window groups cache only the blocks before its own prompt's end,
    so the second finds the prefix in the full group alone, hits nothing and caches the window blocks before the
    prefix's end (its junction), which the later ones hit; with dense retention (None) every later one hits."""
    rng = np.random.default_rng(8)
    count = 30
    w = Workload(arrival_time_s=np.cumsum(rng.exponential(0.2, count)), prompt_tokens=rng.integers(2100, 2600, count),
                 output_tokens=rng.integers(50, 300, count), name="shared-prefix",
                 prefix_group=np.zeros(count, np.int64), prefix_len=np.full(count, 2000))
    fast = run_simulation(config(hybrid_model, debug_invariants=5, prefix_cache_retention_interval=retention), w)
    slow = run_simulation(config(hybrid_model, step_by_step=True, prefix_cache_retention_interval=retention), w)
    assert fast.summary["cached_prompt_tokens"] >= hitting * 1984  # 124 blocks of 16 per hitting request
    assert fast.summary["cached_prompt_tokens"] == slow.summary["cached_prompt_tokens"]
    np.testing.assert_allclose(fast.requests["finished_s"], slow.requests["finished_s"], rtol=1e-12)
    for name, shares in fast.summary["kv_groups"].items():
        assert shares == pytest.approx(slow.summary["kv_groups"][name], rel=1e-9)


@pytest.mark.parametrize("kv_tokens", [4_000, 8_000, 12_000])
def test_fast_forward_equals_step_by_step_under_memory_pressure(hybrid_model, kv_tokens):
    """A window that releases blocks mid-run can let a queued request in: the fast-forward ends its run at that
    step (`Allocator.window_released`), as stepping one step at a time would admit it there (without that
    stop, these pools finished requests up to 1.5 s apart in the two modes)."""
    w = long_prompts()
    fast = run_simulation(config(hybrid_model, kv_tokens=kv_tokens), w)
    slow = run_simulation(config(hybrid_model, kv_tokens=kv_tokens, step_by_step=True), w)
    assert (fast.steps["waiting"] > 0).sum() > 100 and len(fast.steps) < len(slow.steps)
    np.testing.assert_allclose(fast.requests["finished_s"], slow.requests["finished_s"], rtol=1e-12)
    assert_same_step_totals(fast, slow)


def test_a_hybrid_pool_reports_its_cached_blocks():
    """Free blocks that keep their hash (evictable prefix-cache entries, window-freed blocks among them) are the
    summary's ``cached_frac``, part of the free and overhead shares; none without prefix caching."""
    w = Workload(arrival_time_s=np.arange(6) * 50.0, prompt_tokens=np.full(6, 900), output_tokens=np.full(6, 20),
                 prefix_group=np.array([0, 1, 0, 1, 2, 0]), prefix_len=np.full(6, 512), name="groups")
    options = dict(model="gpt-oss-20b", gpu="h100-80gb", kv_tokens=20_000, step_time=0.01)
    on = run_simulation(SimConfig(**options), w)
    s = on.summary
    assert 0 < s["cached_frac"] <= s["free_frac"] + s["external_frag_frac"]
    assert on.steps["cached"].max() > 0
    off = run_simulation(SimConfig(prefix_caching=False, **options), w)
    assert off.summary["cached_frac"] == 0 and off.steps["cached"].max() == 0


def test_fast_forward_equals_step_by_step_when_growth_evicts_a_queued_requests_hit():
    """A hybrid pool's window groups release blocks from the middle of a chain, so the free queue can evict a
    block ahead of a queued request's hit and cut it by many blocks; its first chunk then needs fewer blocks
    and may fit (`Allocator.hit_changes`). Mooncake turns on Gemma 3 (window 1,024, 5 : 1) under memory
    pressure: request 14 is refused with 576 tokens hit, then admitted a step later with 384. The fast-forward
    ends its run at that step as stepping does; it ran 7 steps past it before, admitting the request 6 steps
    late (192 more hit tokens over the run, finish times 0.4 ms apart)."""
    import workloads

    w = workloads.load_preset("mooncake-conv", num_requests=20, seed=3)
    options = dict(model="gemma-3-12b", gpu="a100-40gb", block_size=32, scheduler_reserve_full_isl=False)
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(**options, step_by_step=True), w)
    assert fast.summary["preemptions"] > 0 and len(fast.steps) < len(slow.steps) / 3
    assert fast.summary["cached_prompt_tokens"] == slow.summary["cached_prompt_tokens"]
    np.testing.assert_allclose(fast.requests["admitted_s"], slow.requests["admitted_s"], rtol=1e-12)
    np.testing.assert_allclose(fast.requests["finished_s"], slow.requests["finished_s"], rtol=1e-12)
    assert_same_step_totals(fast, slow)
