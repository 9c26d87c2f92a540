"""Copies and swaps are charged for the bytes they really move (token slots x KV bytes per token), whatever
the allocator: a paged copy moves a block, a contiguous fork the parent's tokens, a swap every block of a
paged sequence or a slab's tokens in one transfer. A hybrid pool's slot is one token in one KV cache group,
so it moves that group's share of the layers."""

import numpy as np
import pytest

from allocators import make_allocator
from allocators.catalog import get_gpu, get_model
from allocators.host_tier import HostTier
from allocators.paged import PagedAllocator
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import ConstantStepCost, StepCostModel
from sim.kernel.memory import KVMemory
from sim.kernel.metrics import STEP_WORK, Recorder
from sim.kernel.replica import cost_options, make_cost_model
from sim.kernel.runner import run_simulation
from sim.kernel.scheduler import Scheduler
from sim.kernel.sequence_group import RUNNING, SWAPPED, SequenceGroup
from sim.kernel.step_plan import StepPlan
from tests.allocators.block_trie import block_trie
from workloads import Workload

MODEL, GPU = get_model("opt-13b"), get_gpu("a100-40gb")
KV = MODEL.kv_bytes_per_token


class Sink:
    def finish(self, group, t):
        pass

    def reject(self, group, reason, t):
        raise AssertionError(f"request {group.request_id} rejected: {reason}")


def test_transfer_time_is_bytes_over_bandwidth_plus_latency_per_swap_transfer():
    cost = StepCostModel(MODEL, GPU, block_size=16)
    hbm = 0.8 * GPU.hbm_bandwidth_gb_s * 1e9
    pcie = GPU.pcie_gb_s * 1e9
    assert cost.transfer_time(copy_slots=1000) == pytest.approx(2 * 1000 * KV / hbm, rel=1e-12)
    assert cost.transfer_time(swap_slots=1000, swap_transfers=1) == pytest.approx(
        1000 * KV / pcie + 2 * MODEL.num_layers * 3.6e-6, rel=1e-12)
    base = cost.step_time(0, 8, 4000)
    # with slots given, the copies are charged for them, not for their count
    assert cost.step_time(0, 8, 4000, copies=1, copy_slots=1000) == pytest.approx(
        base + cost.transfer_time(copy_slots=1000), rel=1e-12)
    assert cost.step_time(0, 8, 4000, swap_blocks=1, swap_slots=1000) == pytest.approx(
        base + cost.transfer_time(swap_slots=1000, swap_transfers=1), rel=1e-12)
    # without them every copy or transfer is one block (exact for paged allocators)
    assert cost.step_time(0, 8, 4000, copies=3, swap_blocks=2) == pytest.approx(
        base + cost.transfer_time(copy_slots=48, swap_slots=32, swap_transfers=2), rel=1e-12)
    assert cost.step_time(0, 0, 0, copies=1, copy_slots=500) > cost.step_overhead_s  # a copy-only step costs
    assert ConstantStepCost(0.01).transfer_time(10**6, 10**6, 100) == 0.0


def test_allocators_count_the_slots_their_copies_move():
    contiguous = make_allocator("contiguous-oracle", 4096)
    contiguous.admit(0, 1000, final_tokens=1100)
    copies = contiguous.fork(0, 1, final_tokens=1100)
    assert [c.slots for c in copies] == [1000]  # the parent's tokens, one slab copy, not a block of 16
    paged = make_allocator("paged", 4096, block_size=16)
    paged.admit(0, 1000, final_tokens=1100)
    copies = paged.fork(0, 1, final_tokens=1100)
    assert len(copies) == 63 and sum(c.slots for c in copies) == 63 * 16  # whole blocks, the last partly filled
    cow = make_allocator("paged-cow", 4096, block_size=16)
    cow.admit(0, 1000, final_tokens=1100)
    assert cow.fork(0, 1, final_tokens=1100) == ()
    assert [c.slots for c in cow.grow(1, 1)] == [16]  # the shared tail copied on write


def test_swap_extent():
    paged = PagedAllocator(4096, block_size=16)
    paged.admit(0, 40, final_tokens=100)
    assert paged.swap_extent(0) == (48, 3) and paged.swap_extent(0, pending=5) == (48, 3)
    slab = make_allocator("contiguous-pow2", 4096)
    slab.admit(0, 40, final_tokens=100)
    assert slab.swap_extent(0) == (40, 1) and slab.swap_extent(0, pending=5) == (45, 1)


def _run_steps(sched, steps: int, t: float = 0.0):
    plans = []
    for _ in range(steps):
        plans.append(sched.plan_step(t))
        t += 0.1
        sched.complete(1, t)
    return plans, t


@pytest.mark.parametrize("allocator", ["contiguous-oracle", "contiguous-max", "paged", "paged-cow"])
def test_fork_and_swap_plans_carry_the_slots_moved(allocator):
    """A (prompt 100, n=2) forks at its first token; V (prompt 10) decodes, lazily grown, and is then
    preempted to swap and swapped back in."""
    alloc = make_allocator(allocator, 4096, block_size=16, max_model_len=512)
    sched = Scheduler(KVMemory(alloc), Sink(), max_num_batched_tokens=512, preemption="swap", swap_slots=10_000,
                      max_model_len=512)
    a = SequenceGroup(0, 0, 0.0, 100, 40, n=2)
    v = SequenceGroup(1, 1, 0.0, 10, 40)
    sched.add(a, 0.0)
    sched.add(v, 0.0)
    (first,), t = _run_steps(sched, 1)
    contiguous = allocator.startswith("contiguous")
    # the fork: a slab copy of the parent's 100 tokens; 7 block copies without copy-on-write; with it, none
    # (the sampled token gets its slot, and the shared partly filled tail its copy, in the next step)
    expected = {"paged": (7, 7 * 16), "paged-cow": (0, 0)}.get(allocator, (1, 100))
    assert (first.copies, first.copy_slots) == expected
    _, t = _run_steps(sched, 4, t)  # V holds slots for 10 + 4 tokens (its 5th sampled token has none yet)
    plan = sched.plan_step(t)
    sched.groups.preempt(v)  # what `until_fits` does when memory runs out
    assert v.state == SWAPPED
    slots, transfers = (14, 1) if contiguous else (16, 1)  # the tokens of a slab; a paged sequence's one block
    assert (plan.swap_blocks, plan.swap_slots) == (transfers, slots)
    assert sched.groups.swapped[v.index].slots == sched.groups.swap_used == slots
    sched.complete(1, t + 0.1)
    back = sched.plan_step(t + 0.1)  # swapped back in: the same slots, the other way
    assert v.state == RUNNING and (back.swap_blocks, back.swap_slots) == (transfers, slots)
    assert sched.groups.swap_used == 0
    cost = StepCostModel(MODEL, GPU, block_size=16, paged=not contiguous)
    charged = cost.step_time(back.prefill_tokens, back.decode_seqs, back.context_tokens, back.copies,
                             back.swap_blocks, back.attention_pairs, copy_slots=back.copy_slots,
                             swap_slots=back.swap_slots)
    plain = cost.step_time(back.prefill_tokens, back.decode_seqs, back.context_tokens,
                           attention_pairs=back.attention_pairs)
    assert charged - plain == pytest.approx(cost.transfer_time(back.copy_slots, slots, transfers), rel=1e-9)
    alloc.check_invariants()


@pytest.mark.parametrize("allocator", ["paged-cow", "radix"])
@pytest.mark.parametrize("kind", ["beam_width", "n"])
@pytest.mark.parametrize("tier", [False, True])
def test_a_swapped_group_moves_each_shared_block_once_and_comes_back_sharing_them(allocator, kind, tier):
    """Four beams or samples (forked) of a 100-token prompt, 40 steps in: their tables list 36 blocks, fewer of
    them distinct (the prompt's full blocks, and the beams' shared lineages). vLLM v0 swaps a group through a
    map keyed by GPU block, so each distinct block moves once out and once in, and takes one host block (swap
    space, or the host tier's blocks); the group comes back with the same sharing, and swapping in copies
    nothing inside the GPU (every block comes from the host)."""
    alloc = make_allocator(allocator, 8192, block_size=16, max_model_len=1024, prefix_caching=True)
    host = HostTier(1000, 1) if tier else None
    sched = Scheduler(KVMemory(alloc, host), Sink(), max_num_batched_tokens=512, preemption="swap",
                      swap_slots=100_000, max_model_len=1024)
    group = SequenceGroup(0, 0, 0.0, 100, 200, **{kind: 4})
    sched.add(group, 0.0)
    sched.add(SequenceGroup(1, 1, 0.0, 10, 500), 0.0)  # still running when the group is preempted
    _, t = _run_steps(sched, 40)
    plan = sched.plan_step(t)
    tables = [alloc.block_table(seq) for seq in group.seq_ids]
    distinct = len({b for table in tables for b in table})
    refs = sorted(alloc.ref_count(b) for table in tables for b in table)
    assert sum(map(len, tables)) == 36 and distinct < 36
    sched.groups.preempt(group)
    assert group.state == SWAPPED and (plan.swap_blocks, plan.swap_slots) == (distinct, 16 * distinct)
    assert (host.swapped_blocks if tier else sched.groups.swap_used // 16) == distinct
    sched.complete(1, t + 0.1)
    back = sched.plan_step(t + 0.1)
    assert group.state == RUNNING and (back.swap_blocks, back.swap_slots, back.copies) == (distinct, 16 * distinct, 0)
    again = [alloc.block_table(seq) for seq in group.seq_ids]
    assert block_trie(again) == block_trie(tables)
    assert sorted(alloc.ref_count(b) for table in again for b in table) == refs
    alloc.check_invariants()


def test_a_contiguous_fork_is_charged_its_slab_copy_end_to_end():
    """A request sampled twice on a contiguous allocator: the step that forks it pays for copying the prompt's
    1,000 tokens of KV, not one 16-slot block."""
    workload = Workload(np.array([0.0]), np.array([1000]), np.array([4]), n=np.array([2]))
    config = SimConfig(allocator="contiguous-oracle", model="opt-13b", gpu="a100-40gb", kv_gib=12,
                       parallel_sampling="fork")
    steps = run_simulation(config, workload).steps
    fork = steps[steps["copies"] > 0]
    assert len(fork) == 1 and int(fork["num_steps"].iloc[0]) == 1
    row = fork.iloc[0]
    assert (row.copies, row.copy_slots) == (1, 1000) and steps["copy_slots"].sum() == 1000  # as the row shows
    cost = make_cost_model(config, MODEL, GPU)
    prefill = int(row.prefill_tokens)
    assert prefill == 1000  # the fork follows the prompt's prefill, in the same step
    without_copy = cost.step_time(prefill, int(row.decode_seqs), int(row.context_tokens),
                                  attention_pairs=prefill * (prefill + 1) // 2)
    assert row.duration_s == pytest.approx(without_copy + cost.transfer_time(copy_slots=1000), rel=1e-9)


def test_every_figure_a_plan_charges_is_a_step_column():
    """Each `STEP_WORK` column is the row's `StepPlan` field of that name (a distinct value each, so none lands
    in another's column); an idle row, without a plan, has them all 0."""
    plan = StepPlan(**{name: 10 + i for i, name in enumerate(STEP_WORK)})
    rec = Recorder(0)
    b = make_allocator("paged", 4096, block_size=16).breakdown()
    rec.row(0.0, 0.5, 1, 2, 3, plan, b, 0)
    rec.row(0.5, 1.0, 0, 0, 0, None, b, 0)
    steps = rec.steps_frame(b.capacity, b.total_blocks)
    assert set(STEP_WORK) <= set(steps.columns)
    assert steps.loc[0, list(STEP_WORK)].tolist() == [getattr(plan, name) for name in STEP_WORK]
    assert (steps.loc[1, list(STEP_WORK)] == 0).all()
    assert steps.loc[0, ["num_steps", "running", "waiting"]].tolist() == [1, 2, 3]


def test_the_step_rows_show_the_slots_their_swaps_move():
    """Paged swap preemption: each transfer moves one block of 16 slots, and every request swapped out comes back
    in (the run completes them all), so the preempting rows' slots are half of all the slots swapped."""
    rng = np.random.default_rng(5)
    w = Workload(np.cumsum(rng.exponential(0.3, 40)), rng.integers(20, 300, 40), rng.integers(20, 300, 40))
    r = run_simulation(SimConfig(kv_tokens=3000, preemption="swap", swap_space_gib=1), w)
    assert r.summary["completed"] == 40 and r.summary["preemptions"] > 0
    swaps = r.steps[r.steps["swap_blocks"] > 0]
    assert (swaps["swap_slots"] == 16 * swaps["swap_blocks"]).all()
    out = swaps.loc[swaps["preempted"] > 0, "swap_slots"].sum()
    assert out > 0 and 2 * out == r.steps["swap_slots"].sum()


@pytest.mark.parametrize(("model", "groups"), [("gemma-3-12b", 6), ("gpt-oss-20b", 2), ("mistral-7b", 1)])
def test_a_hybrid_pools_slot_moves_its_groups_share_of_the_layers(model, groups):
    """Gemma-3-12B's pool has 6 KV cache groups of 8 layers: swapping one token in every group moves one
    token's KV (48 layers) and takes one block's copy calls, not six; likewise copies inside HBM."""
    spec, gpu = get_model(model), get_gpu("h100-80gb")
    config = SimConfig(model=model, gpu="h100-80gb", allocator="paged")
    assert cost_options(config, spec, gpu)["slot_frac"] == pytest.approx(1 / groups)
    whole_tokens = SimConfig(model=model, gpu="h100-80gb", allocator="paged", disable_hybrid_kv_cache_manager=True)
    hybrid, whole = make_cost_model(config, spec, gpu), make_cost_model(whole_tokens, spec, gpu)
    assert hybrid.slot_frac == pytest.approx(1 / groups)
    assert hybrid.transfer_time(swap_slots=groups * 16, swap_transfers=groups) == pytest.approx(
        whole.transfer_time(swap_slots=16, swap_transfers=1), rel=1e-12)
    assert hybrid.transfer_time(copy_slots=groups * 16) == pytest.approx(whole.transfer_time(copy_slots=16))


@pytest.mark.parametrize("setting", [dict(model="llama-3-8b"), dict(model="gemma-3-12b", allocator="paged-cow"),
                                     dict(model="gemma-3-12b", disable_hybrid_kv_cache_manager=True)])
def test_a_pool_of_whole_tokens_moves_whole_tokens(setting):
    config = SimConfig(gpu="h100-80gb", **setting)
    assert cost_options(config, get_model(config.model), get_gpu(config.gpu))["slot_frac"] == 1.0


def test_slot_frac_outside_0_1_is_refused():
    with pytest.raises(ValueError, match="slot_frac"):
        StepCostModel(MODEL, GPU, slot_frac=0.0)


@pytest.mark.parametrize("kind", ["n", "beam_width"])
def test_a_swapped_group_leaves_its_pinned_shared_prefix_on_the_gpu(kind):
    """Two samples or beams of a 100-token prompt whose first 64 tokens (4 blocks) are a registered shared prefix
    (paged-cow): vLLM v0.3's swap_out skips a group's prefix blocks ("We do not swap out the prefix blocks for
    now") and swap_in re-takes them, so the 4 pinned blocks move neither way, take no swap space, stay allocated
    while the group is out, and are the group's first blocks again once it is back."""
    alloc = make_allocator("paged-cow", 8192, block_size=16, max_model_len=1024)
    sched = Scheduler(KVMemory(alloc), Sink(), max_num_batched_tokens=512, preemption="swap",
                      swap_slots=100_000, max_model_len=1024)
    hashes = (*range(900, 904), *range(10, 12))  # 4 shared-prefix blocks, then the request's own 2
    group = SequenceGroup(0, 0, 0.0, 100, 200, hashes=hashes, prefix_group=7, prefix_blocks=4, **{kind: 2})
    sched.add(group, 0.0)
    sched.add(SequenceGroup(1, 1, 0.0, 10, 500), 0.0)  # still running when the group is preempted
    _, t = _run_steps(sched, 20)
    plan = sched.plan_step(t)
    tables = [alloc.block_table(seq) for seq in group.seq_ids]
    pinned = tables[0][:4]
    assert all(table[:4] == pinned for table in tables) and alloc.registered_blocks == 4
    moved = len({b for table in tables for b in table}) - 4
    used = alloc.breakdown().used_blocks
    sched.groups.preempt(group)
    assert group.state == SWAPPED and (plan.swap_blocks, plan.swap_slots) == (moved, 16 * moved)
    assert sched.groups.swap_used == 16 * moved and sched.groups.swapped[group.index].resident_slots == 4 * 16
    assert alloc.breakdown().used_blocks == used - moved  # the prefix stays on the GPU, pinned
    assert [alloc.ref_count(b) for b in pinned] == [1] * 4  # the registry's reference alone
    sched.complete(1, t + 0.1)
    back = sched.plan_step(t + 0.1)
    assert group.state == RUNNING and (back.swap_blocks, back.swap_slots, back.copies) == (moved, 16 * moved, 0)
    again = [alloc.block_table(seq) for seq in group.seq_ids]
    assert all(table[:4] == pinned for table in again) and block_trie(again) == block_trie(tables)
    assert [alloc.ref_count(b) for b in pinned] == [3] * 4
    assert sched.groups.swap_used == 0
    alloc.check_invariants()


@pytest.mark.parametrize("room", [3, 7])
def test_swap_space_must_hold_a_groups_pinned_blocks_too(room):
    """vLLM v0.3's can_swap_out counts every block the group holds, its prefix's too, against the free CPU
    blocks, though the prefix is not moved: with room for the 3 moved blocks only, the victim is recomputed;
    with room for all 7 it is swapped, and takes the 3."""
    alloc = make_allocator("paged-cow", 8192, block_size=16, max_model_len=1024)
    hashes = (*range(900, 904), *range(10, 12))
    group = SequenceGroup(0, 0, 0.0, 100, 200, hashes=hashes, prefix_group=7, prefix_blocks=4)
    sched = Scheduler(KVMemory(alloc), Sink(), max_num_batched_tokens=512, preemption="swap",
                      swap_slots=16 * room, max_model_len=1024)
    sched.add(group, 0.0)
    sched.add(SequenceGroup(1, 1, 0.0, 10, 500), 0.0)
    _, t = _run_steps(sched, 10)
    sched.plan_step(t)
    assert len(alloc.block_table(group.seq_ids[0])) == 7
    sched.groups.preempt(group)
    assert (group.state == SWAPPED, sched.groups.swap_used) == ((True, 16 * 3) if room == 7 else (False, 0))
    alloc.check_invariants()
