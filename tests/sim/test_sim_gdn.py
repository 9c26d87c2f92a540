"""Runs of a gated DeltaNet hybrid (Qwen3-Next-80B-A3B) through the Mamba path (`sim.kernel.mamba_run`): vLLM 0.33
schedules its recurrent states with the same ``MambaManager`` and scheduler rules as Mamba-2's, so the decode
fast-forward equals ``--step-by-step`` with prefix caching off and on (align mode, on Hopper: 64-aligned blocks);
before Hopper, where vLLM's Triton GDN prefill exports no checkpoint, prefix caching runs as Mamba-1's does (no
checkpoint block, no alignment beyond the kernel block's: `tests/sim/test_sim_gdn_nockpt_parity.py`)."""

import numpy as np
import pytest

from sim.kernel.block_size import run_block_size
from sim.kernel.config import SimConfig
from sim.kernel.replica import resolve_capacity
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_hybrid_run
from tests.sim.test_sim_mamba import shared_prefixes

MODEL = "qwen3-next-80b-a3b"


def config(**options) -> SimConfig:
    return SimConfig(model=MODEL, **({"gpu": "h200", "tensor_parallel": 2, "kv_tokens": 60 * 576,
                                      "memory_snapshots": 0, "debug_invariants": 1} | options))


@pytest.mark.parametrize("prefix_caching, block_size", [(True, 576), (False, 544)])
def test_fast_forward_equals_step_by_step(prefix_caching, block_size):
    """Shared system prompts under memory pressure: preemptions (and, prefix caching on, Mamba-state hits) and
    the same requests, times, shares and step totals either way, every step audited."""
    from allocators.catalog import get_gpu, get_model

    assert run_block_size(config(prefix_caching=prefix_caching), get_model(MODEL), get_gpu("h200")) == block_size
    w = shared_prefixes()
    fast = run_simulation(config(prefix_caching=prefix_caching), w)
    slow = run_simulation(config(prefix_caching=prefix_caching, step_by_step=True), w)
    assert fast.summary["preemptions"] > 0
    assert (fast.requests["cached_tokens"].sum() > 50 * block_size) == prefix_caching
    assert len(fast.steps) < len(slow.steps) / 10
    assert fast.requests["cached_tokens"].tolist() == slow.requests["cached_tokens"].tolist()
    assert fast.requests["preemptions"].tolist() == slow.requests["preemptions"].tolist()
    assert_same_hybrid_run(fast, slow)
    assert np.all(fast.requests["finished_s"] > 0)


def test_prefix_caching_before_hopper_runs_without_checkpoints():
    """Triton/FLA's GDN prefill exports no checkpoint: the block is the kernel block's 272 tokens, as with prefix
    caching off, and no chunk takes a checkpoint block; the fast-forward still equals step by step."""
    from sim.kernel.mamba_run import _exports_checkpoints

    cfg = config(gpu="a100-80gb", tensor_parallel=4, kv_tokens=60 * 272)
    cap = resolve_capacity(cfg)
    assert run_block_size(cfg, cap.model, cap.gpu) == 272
    assert not _exports_checkpoints(cfg, cap.model)
    w = shared_prefixes()
    fast = run_simulation(cfg, w)
    slow = run_simulation(config(gpu="a100-80gb", tensor_parallel=4, kv_tokens=60 * 272, step_by_step=True), w)
    assert fast.summary["preemptions"] > 0
    assert fast.requests["cached_tokens"].sum() > 50 * 272
    assert fast.requests["cached_tokens"].tolist() == slow.requests["cached_tokens"].tolist()
    assert_same_hybrid_run(fast, slow)


def test_prefix_caching_off_runs_before_hopper():
    """Without prefix caching the GDN prefill kernel changes nothing kvsim models: 16-token alignment."""
    cfg = config(gpu="a100-80gb", tensor_parallel=4, prefix_caching=False, kv_tokens=None)
    cap = resolve_capacity(cfg)
    assert run_block_size(cfg, cap.model, cap.gpu) == 272
