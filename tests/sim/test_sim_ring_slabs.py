"""Contiguous slabs on a model with sliding windows keep the window layers in ring buffers of the window's size
(`allocators.slab_layout`): the lazy decode still equals stepping one step at a time, short prompts (decoding
inside the window) and long ones alike, and the same memory fits more requests than slabs holding every layer,
and more again under buddy placement for holding the full layers and the rings as two slabs, each rounded apart."""


import numpy as np
import pytest

from allocators.slab_layout import SlabLayout
from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_memory_map, assert_same_summary
from workloads import Workload


def mixed_prompts(count=40, seed=5):
    """Prompts on both sides of the window, so that some decoders fill their rings and others start past them."""
    rng = np.random.default_rng(seed)
    return Workload(arrival_time_s=np.cumsum(rng.exponential(0.05, count)),
                    prompt_tokens=rng.integers(20, 1200, count), output_tokens=rng.integers(50, 600, count),
                    name="mixed-prompts")


def config(model, **options):
    return SimConfig(model=model, gpu="h100-80gb", **({"kv_tokens": 12_000, "memory_snapshots": 3} | options))


@pytest.mark.parametrize("allocator", ["contiguous-max", "contiguous-pow2", "contiguous-oracle"])
def test_fast_forward_equals_step_by_step(hybrid_model, allocator):
    w = mixed_prompts()
    fast = run_simulation(config(hybrid_model, allocator=allocator, max_model_len=2048, debug_invariants=7), w)
    slow = run_simulation(config(hybrid_model, allocator=allocator, max_model_len=2048, step_by_step=True), w)
    assert "memory_omits" not in fast.summary
    assert_same_summary(fast.summary, slow.summary)
    assert_same_memory_map(fast, slow)


def test_rings_fit_more_requests_than_every_layer_whole(hybrid_model, monkeypatch):
    """The same pool with the window layers' KV kept whole (no layout: every slot a token in every layer)
    holds fewer slabs at once."""
    w = mixed_prompts(count=60)
    rings = run_simulation(config(hybrid_model, allocator="contiguous-oracle"), w).summary
    monkeypatch.setattr("sim.kernel.replica.ring_options", lambda allocator, model: {})
    monkeypatch.setattr("sim.kernel.replica.slab_rings", lambda config, model: None)
    whole = run_simulation(config(hybrid_model, allocator="contiguous-oracle"), w).summary
    assert rings["max_running"] > whole["max_running"]
    assert rings["mean_running"] > whole["mean_running"]


def test_two_slabs_fit_more_max_requests_under_buddy_than_one(hybrid_model, monkeypatch):
    """A Max request on ``test-hybrid`` (a slot: a token in 8 layers) holds 2,048 full-layer slots and 3 x 256
    ring slots: as two slabs, buddy blocks of 2,048 and 1,024; as one slab of 2,816 (the layout laid out whole),
    a block of 4,096."""
    w = mixed_prompts(count=60)
    apart = run_simulation(config(hybrid_model, allocator="contiguous-max", max_model_len=2048), w).summary
    monkeypatch.setattr(SlabLayout, "pieces", lambda self: (self.parts(),))
    whole = run_simulation(config(hybrid_model, allocator="contiguous-max", max_model_len=2048), w).summary
    assert apart["max_running"] > whole["max_running"]
    assert apart["external_frag_frac"] < whole["external_frag_frac"]
