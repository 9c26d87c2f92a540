"""Runs of a Mamba-1 hybrid (AI21-Jamba-1.5-Mini on two H100s) on vLLM's pool (`sim.kernel.mamba_run`), with
prefix caching off (vLLM's ``mamba_cache_mode='none'``) and on (vLLM's default, 'align', where a Mamba-1 layer exports
no prefill checkpoint: every prompt's chunk ends at its last cacheable boundary and no chunk takes a checkpoint
block), every step audited and the fast-forward equal to ``--step-by-step``. Step for step against vLLM's own
scheduler: ``test_sim_mamba1_parity.py``."""

import dataclasses

import numpy as np

from allocators import roofline
from allocators.catalog import get_model
from allocators.mamba_layout import model_pool
from sim.kernel.config import SimConfig
from sim.kernel.replica import resolve_capacity
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_hybrid_run
from workloads import Workload

MODEL = "jamba-1.5-mini"


def config(**options) -> SimConfig:
    return SimConfig(model=MODEL, gpu="h100-80gb", tensor_parallel=2,
                     **({"kv_tokens": 300 * 80, "memory_snapshots": 0, "prefix_caching": False} | options))


def workload(count: int = 60, seed: int = 7) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(arrival_time_s=np.cumsum(rng.exponential(0.05, count)),
                    prompt_tokens=rng.integers(200, 3000, count), output_tokens=rng.integers(50, 600, count),
                    name="mamba1")


def test_a_run_uses_vllms_pool_and_holds_seven_state_blocks_a_request():
    """The derived pool is `kvsim capacity`'s (37,520 blocks of 80 tokens per GPU); a lone request of 1,000 tokens
    holds cdiv(1000, 80) = 13 attention blocks and one state block in each of 7 Mamba groups."""
    cfg = config(kv_tokens=None)
    cap = resolve_capacity(cfg)
    expected = model_pool(cap.model, cap.kv_bytes, 2)
    one = Workload(arrival_time_s=np.zeros(1), prompt_tokens=np.array([990]), output_tokens=np.array([10]),
                   name="one")
    result = run_simulation(cfg, one)
    assert result.summary["block_size"] == expected.block_size == 80
    assert result.steps["total_blocks"].iloc[0] == expected.num_blocks - 1 == 37_519
    assert result.steps["used_blocks"].max() == 13 + 7
    assert set(result.summary["kv_groups"]) == {"full", "mamba"}


def test_fast_forward_equals_step_by_step_under_memory_pressure():
    """A pool of 300 blocks: requests preempt and wait, every step audited (each Mamba table one live state block),
    and the decode fast-forward gives what --step-by-step does."""
    w = workload()
    fast = run_simulation(config(debug_invariants=1), w)
    slow = run_simulation(config(step_by_step=True, debug_invariants=1), w)
    assert fast.summary["completed"] == 60
    assert fast.summary["preemptions"] > 0 and (fast.steps["waiting"] > 0).sum() > 20
    assert len(fast.steps) < len(slow.steps) / 5
    assert fast.requests["preemptions"].tolist() == slow.requests["preemptions"].tolist()
    assert_same_hybrid_run(fast, slow)


def test_same_seed_same_run():
    a = run_simulation(config(), workload(count=30))
    b = run_simulation(config(), workload(count=30))
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)


def shared_prefixes(count: int = 60, seed: int = 7) -> Workload:
    """`workload` with a system prompt of 1,000 to 2,600 tokens opening two thirds of the prompts."""
    w = workload(count, seed)
    rng = np.random.default_rng(seed + 1)
    group = rng.integers(0, 3, count)
    lens = np.array([1000, 1700, 2600])
    has = group < 2
    return dataclasses.replace(w, prompt_tokens=np.where(has, lens[group] + w.prompt_tokens, w.prompt_tokens),
                               prefix_group=np.where(has, group, -1), prefix_len=np.where(has, lens[group], 0))


def test_vllms_default_prefix_caching_runs_in_align_mode():
    """Prefix caching on: requests sharing a system prompt hit its cached Mamba-1 states, every step audited, and
    the decode fast-forward (which stops where a decoder's old state block is freed) equals --step-by-step."""
    w = shared_prefixes()
    fast = run_simulation(config(prefix_caching=True, kv_tokens=500 * 80, debug_invariants=1), w)
    slow = run_simulation(config(prefix_caching=True, kv_tokens=500 * 80, step_by_step=True, debug_invariants=1), w)
    assert fast.summary["completed"] == 60 and fast.summary["preemptions"] > 0
    assert fast.requests["cached_tokens"].sum() > 20 * 80
    assert len(fast.steps) < len(slow.steps) / 2  # a decoder's state moves to a new block every 80 tokens
    np.testing.assert_allclose(fast.requests["finished_s"], slow.requests["finished_s"], rtol=1e-12)
    assert fast.requests["cached_tokens"].tolist() == slow.requests["cached_tokens"].tolist()
    assert fast.requests["preemptions"].tolist() == slow.requests["preemptions"].tolist()


def test_no_chunk_takes_a_checkpoint_block():
    """A lone prompt of 1,000 tokens at a budget of 8,192 runs in one chunk, cut at its last cacheable boundary
    (960, as a Mamba-1 layer exports no state from inside a prefill) and finished in a second; at most two state
    blocks a Mamba group (the running one and the one being replaced), never Mamba-2's third, the checkpoint's."""
    one = Workload(arrival_time_s=np.zeros(1), prompt_tokens=np.array([1000]), output_tokens=np.array([2]),
                   name="one")
    result = run_simulation(config(prefix_caching=True, kv_tokens=None, max_num_batched_tokens=8192,
                                   step_by_step=True, debug_invariants=1), one)
    assert result.steps["prefill_tokens"].tolist()[:2] == [960, 40]
    assert result.steps["used_blocks"].max() <= 13 + 7 * 2


def test_the_clock_reads_28_states_a_sequence():
    """Each sequence a step moves its 28 Mamba-1 layers' states in and out (half of each on each of 2 GPUs), and
    attention pairs queries with keys in the 4 attention layers only."""
    model = get_model(MODEL)
    assert roofline.mamba_state_bytes_per_seq(model, 2) == 2 * 28 * 155_648
    assert roofline.pair_flops(model) == 4.0 * 4 * 32 * 128
