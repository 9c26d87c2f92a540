"""vAttention's page arithmetic by hand, its mapping charged by the cost model, and its runs exact under the
decode fast-forward.

Llama-3-8B stores 8 KV heads x 128 dims x 2 bytes = 2,048 bytes per token in one layer's K (or V) tensor
(32 layers, 131,072 bytes per token in all), so a 2 MB page holds 1,024 tokens and a 64 KB page 32.
"""

import numpy as np
import pytest

from allocators import make_allocator
from allocators.base import Copy, PageMap
from allocators.catalog import get_gpu, get_model
from allocators.vattention import cache_tensors, page_geometry
from sim.kernel.config import SimConfig
from sim.kernel.cost_profiles import make_step_cost
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_step_totals
from workloads import Workload

LLAMA = get_model("llama-3-8b")


def test_llama_3_8b_page_holds_1024_tokens_at_2_mib_and_32_at_64_kib():
    assert LLAMA.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    per_tensor = 8 * 128 * 2  # one token in one layer's K tensor
    # 100,000 slots = 13,107,200,000 bytes; a page set is one page in each of 32 x 2 tensors
    assert page_geometry(LLAMA, 2048, 100_000) == (
        2048 * 1024 // per_tensor, 13_107_200_000 // (2048 * 1024 * 64)) == (1024, 97)
    assert page_geometry(LLAMA, 64, 100_000) == (32, 13_107_200_000 // (64 * 1024 * 64)) == (32, 3125)
    # tensor parallelism splits the heads: each GPU's page holds twice the tokens, of half the pool
    assert page_geometry(LLAMA, 64, 100_000, tensor_parallel=2) == (64, 1562)


def test_fp8_doubles_the_tokens_a_page_holds():
    fp8 = LLAMA.with_kv_cache_dtype("fp8")
    assert page_geometry(fp8, 2048, 100_000) == (2048, 6_553_600_000 // (2048 * 1024 * 64))


def test_mla_maps_one_latent_tensor_per_layer():
    """DeepSeek-V3: a 512-dim latent plus a 64-dim rope key, 2 bytes each, in one tensor per layer (61 layers),
    not split over GPUs: 1,152 bytes a token a layer; a 2 MB page holds 1,820 tokens, 64 KB 56."""
    ds = get_model("deepseek-v3")
    assert cache_tensors(ds) == ds.num_layers == 61 and ds.kv_bytes_per_token == 61 * 576 * 2
    assert page_geometry(ds, 2048, 10_000) == (2048 * 1024 // 1152, 10_000 * 61 * 1152 // (2048 * 1024 * 61))
    assert page_geometry(ds, 64, 10_000, tensor_parallel=8) == (56, 10_000 * 61 * 1152 // (64 * 1024 * 61))
    cost = make_step_cost(None, ds, get_gpu("h100-80gb"), paged=False)
    assert cost.transfer_time(page_maps=1) == pytest.approx(61 * cost.page_map_latency_s)


def test_a_page_that_holds_a_fraction_of_a_token_more_leaves_it_as_overhead():
    """OPT-13B: 40 heads x 128 x 2 = 10,240 bytes per token per tensor; 2 MB / 10,240 = 204.8 tokens."""
    opt = get_model("opt-13b")
    page_tokens, pages = page_geometry(opt, 2048, 14_565)
    assert (page_tokens, pages) == (204, 14_565 * 10_240 // (2 * 1024 * 1024))  # 71 page sets
    a = make_allocator("vattention", 14_565, page_tokens=page_tokens, num_pages=pages)
    b = a.breakdown()
    assert (b.free, b.external_frag, b.total_blocks) == (71 * 204, 14_565 - 71 * 204, 71)


def test_internal_fragmentation_is_the_tail_of_the_last_page():
    a = make_allocator("vattention", 97 * 1024, page_tokens=1024, num_pages=97)
    assert a.admit(0, 1500, final_tokens=1500) is not None
    b = a.breakdown()
    # 1,500 tokens take 2 pages of 1,024: 548 slots unused in the last page of every layer's K and V
    assert (b.token_states, b.reservation, b.internal_frag, b.used_blocks) == (1500, 0, 2048 - 1500, 2)
    assert (2048 - 1500) * 8 * 128 * 2 == 1_122_304  # bytes left empty in each of the 64 last pages
    # a request that will grow fills its tail: reserved, not fragmentation
    assert a.admit(1, 1000, final_tokens=1500) is not None
    b = a.breakdown()
    assert (b.reservation, b.internal_frag) == (24, 548)
    assert b.token_states + b.reservation + b.internal_frag + b.external_frag + b.free == b.capacity
    a.check_invariants()


def test_pages_are_mapped_on_demand_and_returned_to_the_free_stack():
    a = make_allocator("vattention", 10 * 32, page_tokens=32)
    admission = a.admit(7, 40, final_tokens=100)
    assert admission.copies == (PageMap(2),) and a.block_table(7) == (0, 1)
    assert a.grow(7, 24) == () and a.headroom(7) == 0  # fills page 1: no mapping
    assert a.grow(7, 1) == (PageMap(1),) and a.block_table(7) == (0, 1, 2)
    assert a.fork(7, 8, final_tokens=100) == (PageMap(3), Copy(0, 3, 32), Copy(1, 4, 32), Copy(2, 5, 32))
    assert a.free(7) == 96 and a.free_block_ids()[:3] == [0, 1, 2]  # the first unmapped is mapped first
    assert a.admit(9, 225, final_tokens=225) is None  # 8 pages needed, 7 free
    assert a.admit(9, 224, final_tokens=224) is not None and a.num_free_blocks == 0
    a.check_invariants()


def test_no_prefix_caching_and_a_contiguous_kernel():
    a = make_allocator("vattention", 1024, prefix_caching=True)
    assert a.prefix_caching is False and a.kind == "contiguous" and a.reports_growth is False
    assert a.num_cached_tokens([1, 2, 3], 64) == 0


def test_a_page_map_is_charged_per_layer_and_tensor():
    cost = make_step_cost(None, LLAMA, get_gpu("h100-80gb"), paged=False)
    base = cost.step_time(0, 8, 8000)
    assert cost.step_time(0, 8, 8000, page_maps=3) - base == pytest.approx(3 * 2 * 32 * cost.page_map_latency_s)
    assert cost.transfer_time(page_maps=1) == pytest.approx(64 * (1.45e-6 + 35.99e-6))  # cuMemMap + cuMemSetAccess


def _workload(count: int, seed: int, spacing: float) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(arrival_time_s=np.cumsum(rng.exponential(spacing, count)) if spacing else np.zeros(count),
                    prompt_tokens=rng.integers(20, 600, count), output_tokens=rng.integers(2, 400, count))


def test_mapping_time_appears_in_the_step_times():
    """All requests arrive at once into a pool that never runs short, so the schedule is the same whatever the
    steps cost: the busy time differs by the map latency times the page sets every request mapped (its
    tokens when freed: prompt plus output less the last sampled token, which is never fed back)."""
    w = _workload(12, 1, 0.0)
    config = SimConfig(allocator="vattention", model="llama-3-8b", gpu="h100-80gb", kv_tokens=50_000,
                       page_size_kib=64, step_by_step=True)
    model, gpu = get_model("llama-3-8b"), get_gpu("h100-80gb")
    runs = [run_simulation(config, w, cost=make_step_cost(None, model, gpu, paged=False, page_map_latency_s=lat))
            for lat in (0.0, 1e-4)]
    assert runs[0].summary["preemptions"] == runs[1].summary["preemptions"] == 0
    pages = sum(-(-(p + o - 1) // 32) for p, o in zip(w.prompt_tokens, w.output_tokens, strict=True))
    busy = [r.steps["duration_s"].sum() for r in runs]
    assert busy[1] - busy[0] == pytest.approx(pages * 2 * 32 * 1e-4, rel=1e-9)
    assert runs[1].steps["page_maps"].sum() == pages  # the step table shows every page set charged


@pytest.mark.parametrize("step_by_step", [False, True])
def test_the_step_rows_show_the_page_sets_they_map(step_by_step):
    """One request, a 100-token prompt and 100 output tokens, in pages of 32 tokens: its admission maps 4 page
    sets (128 slots), its decoding 3 more as it reaches 129, 161 and 193 tokens (199 at the end). A fast-forwarded
    run carries the maps its syncs made; step by step each is in the step that crossed into the page."""
    w = Workload(arrival_time_s=np.array([0.0]), prompt_tokens=np.array([100]), output_tokens=np.array([100]))
    config = SimConfig(allocator="vattention", model="llama-3-8b", gpu="h100-80gb", kv_tokens=50_000,
                       page_size_kib=64, step_by_step=step_by_step)
    steps = run_simulation(config, w).steps
    mapped = steps[steps["page_maps"] > 0]
    assert mapped["prefill_tokens"].iloc[0] == 100 and mapped["page_maps"].iloc[0] == 4
    if step_by_step:
        assert mapped["page_maps"].tolist() == [4, 1, 1, 1] and (mapped["num_steps"] == 1).all()
    else:
        assert mapped[["num_steps", "page_maps"]].values.tolist() == [[1, 4], [99, 3]]
    assert (steps[["copies", "copy_slots", "swap_slots", "reload_slots", "reload_transfers"]] == 0).all().all()


@pytest.mark.parametrize("page_size_kib", [64, 2048])
def test_fast_forward_equals_step_by_step(page_size_kib):
    """Pages mapped mid-decode (and preemptions when they run out) cost the same in a fast-forwarded run."""
    w = _workload(60, 2, 0.05)
    options = dict(allocator="vattention", model="llama-3-8b", gpu="h100-80gb", kv_tokens=12_000,
                   page_size_kib=page_size_kib)
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert len(fast.steps) < len(slow.steps)
    assert (fast.summary["page_size_kib"], fast.summary["page_tokens"]) == (page_size_kib, page_size_kib // 2)
    np.testing.assert_allclose(fast.requests["finished_s"], slow.requests["finished_s"], rtol=1e-12)
    for key in ("preemptions", "sim_time_s", "mean_running", "internal_frag_frac", "reservation_frac"):
        assert fast.summary[key] == pytest.approx(slow.summary[key], rel=1e-9), key
    assert fast.steps["page_maps"].sum() > 0
    assert_same_step_totals(fast, slow)


def test_capacity_counts_requests_in_page_sets():
    """`kvsim capacity`: an H100-80GB's 457,597 Llama-3-8B slots are 446 page sets of 1,024 tokens at 2 MB; a
    1,500-token request maps 2 of them and leaves 548 slots of the second empty."""
    from sim.commands.capacity import capacity_report

    r = capacity_report(model="llama-3-8b", gpu="h100-80gb", kv_gib=None, kv_tokens=None, tensor_parallel=1,
                        gpu_memory_utilization=0.9, allocator="vattention", block_size=16, placement="buddy",
                        prompt_len=1500, output_len=0, max_model_len=None)
    slots = r["kv_capacity_tokens"]
    assert (r["page_tokens"], r["kv_capacity_pages"]) == (1024, slots * 131_072 // (2 * 1024 * 1024 * 64)) == (
        1024, 446)
    assert r["max_concurrent_requests"] == 446 // 2
    assert r["breakdown"]["internal_frag"] == pytest.approx(223 * 548 / slots)
