"""Whole simulations on hand-checkable and stress workloads: exact times, conservation, preemption,
rejection, static batching, sharing, determinism and the decode fast-forward."""

import json

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from sim.kernel.summary import SHARE_KEYS
from tests.sim.summaries import assert_same_memory_map, assert_same_step_totals, assert_same_summary
from workloads import Workload
from workloads.named import generate


def workload(arrivals, prompts, outputs, **cols):
    return Workload(arrival_time_s=np.array(arrivals, float), prompt_tokens=np.array(prompts),
                    output_tokens=np.array(outputs), name="test", **cols)


def poisson(count, rate, seed=1, prompt=(20, 400), output=(5, 300), **cols):
    rng = np.random.default_rng(seed)
    n = count
    return workload(np.cumsum(rng.exponential(1 / rate, n)), rng.integers(*prompt, n), rng.integers(*output, n),
                    **cols)


def test_two_requests_by_hand():
    # step time 0.1 s. R0 (t=0, 10+3) prefills in step 0; R1 (t=0.05, 20+2) joins step 1, the first step
    # starting after it arrives; both finish at the end of step 2.
    w = workload([0.0, 0.05], [10, 20], [3, 2])
    r = run_simulation(SimConfig(kv_tokens=1600, step_time=0.1, watermark=0.0), w)
    q = r.requests
    assert q["first_token_s"].tolist() == pytest.approx([0.1, 0.2])
    assert q["finished_s"].tolist() == pytest.approx([0.3, 0.3])
    assert q["ttft_s"].tolist() == pytest.approx([0.1, 0.15])
    assert q["tpot_s"].tolist() == pytest.approx([0.1, 0.1])
    assert q["e2e_s"].tolist() == pytest.approx([0.3, 0.25])
    s = r.summary
    assert s["sim_time_s"] == pytest.approx(0.3)
    assert s["throughput_tok_s"] == pytest.approx(5 / 0.3)
    assert s["mean_running"] == pytest.approx((1 + 2 + 2) / 3)
    # token states during the steps (before each step's decode tokens; a sampled token gets its slot in the
    # step that computes it, as in vLLM v1): 10, 10 + 20, 11 + 20
    assert s["token_states_frac"] == pytest.approx((10 + 30 + 31) * 0.1 / (0.3 * 1600))
    # reservation: slots of held blocks still to be filled: 2; 2 + 1; 1 + 1 (final lengths 12 and 21: the
    # last sampled token never gets a slot)
    assert s["reservation_frac"] == pytest.approx((2 + 3 + 2) * 0.1 / (0.3 * 1600))
    # internal fragmentation: held slots past the final length: 4; 4 + 11; 4 + 11
    assert s["internal_frag_frac"] == pytest.approx((4 + 15 + 15) * 0.1 / (0.3 * 1600))
    assert s["external_frag_frac"] == pytest.approx(16 / 1600)  # the null block
    assert sum(s[k] for k in SHARE_KEYS) == pytest.approx(1.0)
    steps = r.steps
    assert steps["prefill_tokens"].tolist() == [10, 20, 0]
    assert steps["decode_seqs"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("allocator", ["paged", "paged-cow", "contiguous-max", "contiguous-pow2", "contiguous-oracle"])
def test_conservation_and_invariants(allocator):
    w = poisson(150, 6.0)
    r = run_simulation(SimConfig(allocator=allocator, kv_tokens=6000, debug_invariants=7), w)
    s = r.summary
    assert s["completed"] + s["rejected"] == 150
    assert sum(s[k] for k in SHARE_KEYS) == pytest.approx(1.0)
    steps = r.steps
    total = steps[["token_states", "reservation", "internal_frag", "external_frag", "free"]].sum(axis=1)
    assert (total == steps["capacity"]).all()
    assert (steps[["token_states", "reservation", "internal_frag"]] >= 0).all().all()
    assert int(r.requests["preemptions"].sum()) == s["preemptions"]
    assert np.all(np.diff(steps["time_s"]) >= 0)
    assert np.allclose(steps["time_s"].iloc[1:].to_numpy(), (steps["time_s"] + steps["duration_s"]).iloc[:-1])


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_preemption_modes_finish_everything(mode):
    w = poisson(120, 8.0, output=(100, 500))
    r = run_simulation(SimConfig(kv_tokens=3000, preemption=mode, debug_invariants=5), w)
    s = r.summary
    assert s["preemptions"] > 0 and s["completed"] == 120
    swapped = int(r.steps["swap_blocks"].sum())
    assert (swapped > 0) == (mode == "swap")


def test_swap_falls_back_to_recompute_when_swap_space_is_full():
    w = poisson(120, 8.0, output=(100, 500))
    with pytest.warns(UserWarning, match="--preemption swap ignored: there is no host memory to swap into"):
        r = run_simulation(SimConfig(kv_tokens=3000, preemption="swap", swap_space_gib=0.0), w)
    assert r.summary["preemptions"] > 0 and r.summary["completed"] == 120
    assert int(r.steps["swap_blocks"].sum()) == 0
    plain = run_simulation(SimConfig(kv_tokens=3000), w).summary  # which is why it is reported as ignored
    assert {k: v for k, v in r.summary.items() if k not in ("wall_time_s", "ignored_settings")} == \
        {k: v for k, v in plain.items() if k != "wall_time_s"}


def test_rejections_are_counted_with_reasons():
    w = workload([0.0, 0.1, 0.2], [100, 3000, 50], [10, 10, 5000])
    r = run_simulation(SimConfig(allocator="contiguous-max", kv_tokens=20000), w)
    q = r.requests  # (OPT-13B: max_model_len 2048; the third request's output stops there, as vLLM stops it)
    assert q["rejected"].tolist() == [False, True, False] and q["output_tokens"].tolist() == [10, 10, 1998]
    assert "max_model_len 2048" in q["reject_reason"][1] and q["reject_reason"][2] == ""
    assert r.summary["rejected"] == 1 and r.summary["completed"] == 2 and r.summary["length_capped"] == 1
    refused = run_simulation(SimConfig(allocator="contiguous-max", kv_tokens=20000, over_length="reject"), w)
    assert refused.requests["rejected"].tolist() == [False, True, True] and refused.summary["completed"] == 1


def test_static_batches_wait_for_the_whole_batch():
    w = poisson(80, 4.0)
    cont = run_simulation(SimConfig(kv_tokens=8000), w)
    static = run_simulation(SimConfig(kv_tokens=8000, scheduler="static"), w)
    assert static.summary["completed"] == cont.summary["completed"] == 80
    assert static.summary["e2e_p50_s"] > cont.summary["e2e_p50_s"]
    assert static.summary["mean_running"] < cont.summary["mean_running"]
    steps = static.steps[static.steps["num_steps"] > 0]
    # a static batch is prefilled in one step with nothing else running
    assert (steps.loc[steps["prefill_tokens"] > 0, "decode_seqs"] == 0).all()


@pytest.mark.parametrize("allocator, first_rows", [
    # 4 beams of a 100-token prompt, block size 16: paged copies the prompt to every beam (4 x 7 blocks);
    # copy-on-write shares its 7 blocks, the tail of 4 tokens frozen for all until each copies it (step 1)
    ("paged", [(400, 48, 0, 28), (400, 48, 0, 28), (404, 44, 0, 28)]),
    ("paged-cow", [(100, 12, 336, 7), (112, 48, 288, 10), (116, 44, 288, 10)]),
])
def test_beam_rows_count_the_prompt_as_token_states_in_its_prefill_step(allocator, first_rows):
    # The prefill step's row took one slot per beam off the token states (a decoding beam's eagerly appended
    # token, which beams that only joined that step have not appended): 96 of paged-cow's 100 prompt tokens.
    w = workload([0.0], [100], [50], beam_width=np.array([4]))
    steps = run_simulation(SimConfig(allocator=allocator, kv_tokens=16000, step_time=0.01), w).steps
    columns = ["token_states", "reservation", "shared_saved", "used_blocks"]
    assert [tuple(row) for row in steps[columns].head(3).itertuples(index=False)] == first_rows
    assert steps["prefill_tokens"].tolist()[:2] == [100, 0] and steps["decode_seqs"].tolist()[:2] == [0, 4]


@pytest.mark.parametrize("kind", ["n", "beam_width"])
def test_sharing_saves_memory_with_copy_on_write(kind):
    w = poisson(40, 2.0, **{kind: np.full(40, 4)})
    cow = run_simulation(SimConfig(allocator="paged-cow", kv_tokens=20000, debug_invariants=3), w)
    # plain paged as a group model (fork), every fork copying its table; fanned out (`test_parallel_sampling`)
    # its requests share through the prefix cache instead
    fork = "fork" if kind == "n" else "auto"  # beams are one group whatever the setting (fork: ignored, warned)
    plain = run_simulation(SimConfig(allocator="paged", kv_tokens=20000, parallel_sampling=fork), w)
    assert cow.summary["completed"] == plain.summary["completed"] == 40
    assert cow.summary["shared_saved_frac"] > 0.1
    assert plain.summary["shared_saved_frac"] == 0
    assert cow.steps["copies"].sum() > 0
    assert cow.summary["token_states_frac"] < plain.summary["token_states_frac"]
    assert (cow.requests["num_seqs"] == 4).all()


def _bytes(result):
    summary = dict(result.summary, wall_time_s=0)
    return result.requests.to_csv(), result.steps.to_csv(), json.dumps(summary), result.memory.to_csv()


def test_deterministic():
    w = poisson(100, 5.0, beam_width=np.where(np.arange(100) % 10 == 0, 3, 1))
    config = SimConfig(allocator="paged-cow", kv_tokens=5000, seed=3)
    assert _bytes(run_simulation(config, w)) == _bytes(run_simulation(config, w))


@pytest.mark.parametrize("options", [
    dict(allocator="paged", kv_tokens=4000),
    dict(allocator="paged", kv_tokens=4000, preemption="swap", block_size=8),
    dict(allocator="contiguous-pow2", kv_tokens=8000),
    dict(allocator="paged-cow", kv_tokens=6000, step_time=0.01),
    dict(allocator="paged", kv_tokens=6000, scheduler="static"),
    dict(allocator="radix", kv_tokens=4000),
    dict(allocator="radix", kv_tokens=3000, block_size=1, preemption="swap"),
    dict(allocator="paged", kv_tokens=4000, prefix_caching=False),
    dict(allocator="paged-cow", kv_tokens=4000, prefix_caching=False),
])
def test_fast_forward_equals_step_by_step(options):
    w = poisson(100, 6.0, n=np.where(np.arange(100) % 7 == 0, 2, 1))
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert len(fast.steps) < len(slow.steps)
    np.testing.assert_allclose(fast.requests["finished_s"], slow.requests["finished_s"], rtol=1e-9)
    np.testing.assert_allclose(fast.requests["first_token_s"], slow.requests["first_token_s"], rtol=1e-9)
    assert_same_summary(fast.summary, slow.summary)
    assert_same_memory_map(fast, slow)
    assert_same_step_totals(fast, slow)


def test_vattention_forks_land_on_the_same_pages_in_both_modes():
    """A forked group re-placed after a preemption whose last sequence finds no page is undone; the undo used
    to return the pages in another order than they were mapped, and step by step tries it every step where
    a fast-forwarded run tries it once, so the two modes' memory maps showed the pages under other sequences.
    Now a forked group is placed only if the allocator counts room for all of it (`Allocator.group_fits`)."""
    w = generate("lognormal:prompt_mean=800,prompt_cv=1,output_mean=400,output_cv=1,max_total=3000",
                 "poisson:rate=12", 80, seed=20018, system_prompt_len=300, system_prompt_frac=0.5, n=2)
    options = dict(allocator="vattention", model="llama-3-8b", gpu="h100-80gb", kv_tokens=20000)
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert fast.summary["preemptions"] > 0
    assert_same_summary(fast.summary, slow.summary)
    assert_same_memory_map(fast, slow)
    assert_same_step_totals(fast, slow)


def test_prefix_caching_cuts_prefill():
    w = poisson(60, 3.0, prompt=(600, 700), prefix_group=np.zeros(60, int), prefix_len=np.full(60, 512))
    on = run_simulation(SimConfig(kv_tokens=30000, prefix_caching=True), w)
    off = run_simulation(SimConfig(kv_tokens=30000, prefix_caching=False), w)
    assert on.steps["prefill_tokens"].sum() < off.steps["prefill_tokens"].sum() - 50 * 400
    cow = run_simulation(SimConfig(allocator="paged-cow", kv_tokens=30000, prefix_caching=False), w)
    assert cow.summary["shared_saved_frac"] > 0
    assert cow.steps["prefill_tokens"].sum() < off.steps["prefill_tokens"].sum()


def test_memory_snapshots_cover_every_slot():
    r = run_simulation(SimConfig(kv_tokens=2000, memory_snapshots=2), poisson(30, 5.0))
    memory = r.memory
    assert memory["time_s"].nunique() == 2
    for _, snap in memory.groupby("time_s"):
        assert snap["slot"].tolist() == list(range(2000))
    assert r.memory is memory  # built on first use, once


def test_the_memory_table_is_built_without_numpys_huge_page_hint(monkeypatch):
    """`sim.kernel.huge_pages`: off while the table is built (slow fresh arrays on VMs), back on after."""
    from sim.kernel.huge_pages import set_huge_page_hint
    from sim.kernel.metrics import Recorder

    seen = []
    build = Recorder._memory_frame

    def spy(rec):
        seen.append(set_huge_page_hint(False))  # the hint as the build finds it (and leaves it off)
        return build(rec)

    monkeypatch.setattr(Recorder, "_memory_frame", spy)
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    previous = set_huge_page_hint(True)
    try:
        r = run_simulation(SimConfig(kv_tokens=2000, memory_snapshots=2), poisson(30, 5.0))
        assert len(r.memory) == 4000
        assert seen == [False] and set_huge_page_hint(previous) is True
    finally:
        set_huge_page_hint(previous)


def test_the_memory_table_is_the_recorders_whenever_it_is_read():
    """Built on first use: a table read after other runs are the snapshots of its own run."""
    first = run_simulation(SimConfig(kv_tokens=2000, memory_snapshots=2), poisson(30, 5.0))
    second = run_simulation(SimConfig(kv_tokens=1000, memory_snapshots=3), poisson(30, 5.0))
    assert len(second.memory) == 3 * 1000 and len(first.memory) == 2 * 2000


def test_closed_loop_keeps_users_in_flight():
    from workloads import ClosedLoop

    w = workload(np.zeros(6), [10] * 6, [3] * 6)
    w.closed_loop = ClosedLoop(users=2, think_time_s=1.0)
    r = run_simulation(SimConfig(kv_tokens=1600, step_time=0.1), w)
    q = r.requests
    assert q["finished_s"].notna().all()
    assert q["arrival_s"].tolist() == pytest.approx([0.0, 0.0, 1.3, 1.3, 2.6, 2.6])
    assert r.summary["max_running"] == 2
