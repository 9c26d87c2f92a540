"""Runs of a hybrid attention/Mamba model (Nemotron-H-8B): with prefix caching off (vLLM's
``mamba_cache_mode='none'``) they are simulated on vLLM's pool (`sim.kernel.mamba_run`), the fast-forward equal to
``--step-by-step``, and so is vLLM's default, prefix caching on (``'align'``: `allocators.mamba_align`); the
settings not modelled are refused with the reason; the clock charges attention only in the attention layers and each sequence's Mamba state."""

import dataclasses

import numpy as np
import pytest

from allocators import roofline
from allocators.catalog import get_gpu, get_model
from allocators.mamba_layout import model_pool
from sim.kernel.config import SimConfig
from sim.kernel.replica import resolve_capacity
from sim.kernel.roofline_cost import StepCostModel
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_hybrid_run, assert_same_step_totals
from workloads import Workload

MODEL = "nemotron-h-8b"


def config(**options) -> SimConfig:
    return SimConfig(model=MODEL, gpu="h100-80gb",
                     **({"kv_tokens": 40 * 1040, "memory_snapshots": 0, "prefix_caching": False} | options))


def workload(count: int = 60, seed: int = 5) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(arrival_time_s=np.cumsum(rng.exponential(0.05, count)), prompt_tokens=rng.integers(200, 6000, count),
                    output_tokens=rng.integers(50, 900, count), name="mamba")


def shared_prefixes(count: int = 60, seed: int = 5) -> Workload:
    """`workload` with a system prompt of 2 to 6 blocks opening two thirds of the prompts (hits, junctions)."""
    w = workload(count, seed)
    rng = np.random.default_rng(seed + 1)
    group = rng.integers(0, 3, count)
    lens = np.array([2200, 4000, 6300])
    has = group < 2
    return dataclasses.replace(w, prompt_tokens=np.where(has, lens[group] + w.prompt_tokens, w.prompt_tokens),
                               prefix_group=np.where(has, group, -1), prefix_len=np.where(has, lens[group], 0))


def test_vllms_default_prefix_caching_runs_in_align_mode():
    """Prefix caching on (``mamba_cache_mode='align'``): requests sharing a system prompt hit its cached Mamba
    states and the decode fast-forward equals --step-by-step (it stops where a decoder's old state block is
    freed), every step audited (tables of at most three live states, nothing owned twice)."""
    w = shared_prefixes()
    fast = run_simulation(config(prefix_caching=True, kv_tokens=60 * 1040, debug_invariants=1), w)
    slow = run_simulation(config(prefix_caching=True, kv_tokens=60 * 1040, step_by_step=True, debug_invariants=1), w)
    assert fast.summary["preemptions"] > 0 and fast.requests["cached_tokens"].sum() > 20 * 1040
    assert len(fast.steps) < len(slow.steps) / 5
    np.testing.assert_allclose(fast.requests["finished_s"], slow.requests["finished_s"], rtol=1e-12)
    assert fast.requests["cached_tokens"].tolist() == slow.requests["cached_tokens"].tolist()
    assert fast.requests["preemptions"].tolist() == slow.requests["preemptions"].tolist()
    for key, value in fast.summary.items():
        if key.endswith("_frac") or key in ("mean_running", "preemptions", "max_running"):
            assert value == pytest.approx(slow.summary[key], rel=1e-9, abs=1e-12), key
    assert_same_step_totals(fast, slow)


@pytest.mark.parametrize("interval", [2080, 4160, None])
def test_a_positive_retention_interval_runs_and_the_fast_forward_equals_step_by_step(interval):
    """vLLM's ``prefix_cache_retention_interval`` of 2 or 4 blocks, or dense (None), with prefix caching on:
    chunks of up to 8,192 tokens take a checkpoint block wherever they can export one and the state ending every
    interval (dense: every full state) is cached, which changes who is preempted when (13 preemptions at 2 blocks,
    12 dense, 18 under 0); the decode fast-forward equals --step-by-step, every step audited
    (`tests/sim/test_sim_mamba_parity.py` has vLLM's own runs)."""
    w = shared_prefixes()
    options = dict(prefix_caching=True, kv_tokens=60 * 1040, max_num_batched_tokens=8192, debug_invariants=1)
    fast = run_simulation(config(prefix_cache_retention_interval=interval, **options), w)
    slow = run_simulation(config(prefix_cache_retention_interval=interval, step_by_step=True, **options), w)
    base = run_simulation(config(**options), w)
    assert 0 < fast.summary["preemptions"] < base.summary["preemptions"]
    assert fast.requests["cached_tokens"].sum() > 20 * 1040
    np.testing.assert_allclose(fast.requests["finished_s"], slow.requests["finished_s"], rtol=1e-12)
    assert fast.requests["cached_tokens"].tolist() == slow.requests["cached_tokens"].tolist()
    assert fast.requests["preemptions"].tolist() == slow.requests["preemptions"].tolist()
    assert_same_step_totals(fast, slow)


@pytest.mark.parametrize(("options", "flag"), [
    ({"allocator": "contiguous-max"}, "--allocator"), ({"allocator": "radix"}, "--allocator"),
    ({"kv_cache_dtype": "fp8"}, "--kv-cache-dtype"), ({"cpu_offload_gib": 4.0}, "--cpu-offload-gib"),
    ({"disable_hybrid_kv_cache_manager": True}, "--disable-hybrid-kv-cache-manager"),
    ({"preemption": "swap"}, "--preemption"),
    ({"prefix_caching": True, "chunked_prefill": False}, "--no-chunked-prefill"),
    # speculative decoding is modelled with ngram drafts only (`check_mamba_speculation`)
    ({"prefix_caching": True, "speculative_config": '{"method": "mtp", "num_speculative_tokens": 2}'},
     "--speculative-config"),
    ({"prefix_caching": False,
      "speculative_config": '{"method": "eagle", "model": "d", "num_speculative_tokens": 2}'}, "--speculative-config")])
def test_settings_not_modelled_are_refused_naming_the_flag(options, flag):
    with pytest.raises(ValueError, match=flag):
        resolve_capacity(config(**options))


def test_without_prefix_caching_vllms_interval_runs_as_0():
    """Prefix caching off (``mamba_cache_mode='none'``), vLLM takes a positive interval that is a multiple of its
    scheduler block size, lcm(1,040, max_model_len 16,384) = 1,064,960 here, and caches nothing
    (``KVCacheCoordinatorNoPrefixCache``): the run is the run under 0, fast-forward and step by step, every step
    audited; any other positive interval is refused naming the flag."""
    w = workload()
    options = dict(max_model_len=16384, debug_invariants=1)
    base = run_simulation(config(**options), w)
    for step_by_step in (False, True):
        run = run_simulation(config(prefix_cache_retention_interval=1064960, step_by_step=step_by_step, **options), w)
        np.testing.assert_allclose(run.requests["finished_s"], base.requests["finished_s"], rtol=1e-12)
        assert run.requests["preemptions"].tolist() == base.requests["preemptions"].tolist()
    with pytest.raises(ValueError, match=r"--prefix-cache-retention-interval \(2080\) must be a multiple of the "
                                         r"scheduler block size \(1064960"):
        run_simulation(config(prefix_cache_retention_interval=2080, **options), w)


def test_other_models_still_resolve():
    cap = resolve_capacity(SimConfig(model="llama-3-8b", gpu="h100-80gb"))
    assert cap.kv_tokens > 0


def test_a_run_uses_vllms_pool_and_holds_six_state_blocks_a_request():
    """The derived pool is `kvsim capacity`'s (3,506 blocks of 1,040 tokens on an H100); a lone request of 2,000
    tokens holds two attention blocks and six state blocks."""
    cfg = SimConfig(model=MODEL, gpu="h100-80gb", prefix_caching=False, memory_snapshots=0)
    cap = resolve_capacity(cfg)
    expected = model_pool(cap.model, cap.kv_bytes)
    one = Workload(arrival_time_s=np.zeros(1), prompt_tokens=np.array([1990]), output_tokens=np.array([10]),
                   name="one")
    result = run_simulation(cfg, one)
    assert result.summary["block_size"] == expected.block_size == 1040
    assert result.steps["total_blocks"].iloc[0] == expected.num_blocks - 1 == 3505
    assert result.steps["used_blocks"].max() == 2 + 6
    assert set(result.summary["kv_groups"]) == {"full", "mamba"}


@pytest.mark.parametrize("tensor_parallel", [1, 2])
def test_a_runs_pool_is_kvsim_capacitys(tensor_parallel):
    """The pool a run builds from its derived KV capacity is `kvsim capacity`'s (7,983 blocks per GPU at -tp 2),
    and the setup line says why the blocks are 1,040 tokens."""
    from sim.describe import setup_line
    from sim.kernel.mamba_run import run_pool

    cfg = SimConfig(model=MODEL, gpu="h100-80gb", prefix_caching=False, tensor_parallel=tensor_parallel)
    cap = resolve_capacity(cfg)
    assert run_pool(cfg, cap.model, cap.kv_tokens) == model_pool(cap.model, cap.kv_bytes, tensor_parallel)
    assert "blocks of 1040 tokens, as vLLM raises the attention block size" in setup_line(cfg, workload(2), cap)


def test_fast_forward_equals_step_by_step_under_memory_pressure():
    """Decoders grow their attention blocks only (a state block never grows), so the decode fast-forward stops
    where --step-by-step allocates, preempts and admits: the same requests, times, memory integrals and step
    totals, with every step audited (the Mamba tables among them)."""
    w = workload()
    fast = run_simulation(config(debug_invariants=1), w)
    slow = run_simulation(config(step_by_step=True, debug_invariants=1), w)
    assert fast.summary["preemptions"] > 0 and (fast.steps["waiting"] > 0).sum() > 50
    assert len(fast.steps) < len(slow.steps) / 10
    assert fast.requests["preemptions"].tolist() == slow.requests["preemptions"].tolist()
    assert_same_hybrid_run(fast, slow)


def test_the_memory_map_shows_the_mamba_group():
    result = run_simulation(config(memory_snapshots=3), workload(count=20))
    assert "mamba" in set(result.memory["group"].dropna().astype(str))


def test_the_clock_pairs_and_reads_kv_in_attention_layers_only():
    """Nemotron-H-8B's 52 layers hold 4 attention layers: the attention FLOPs a query-key pair are those 4
    layers', and each sequence a step moves its 24 layers' conv and SSM state in and out."""
    model, gpu = get_model(MODEL), get_gpu("h100-80gb")
    assert roofline.pair_flops(model) == 4.0 * 4 * 32 * 128
    state = model.mamba.state_bytes(model.dtype_bytes)
    assert roofline.mamba_state_bytes_per_seq(model) == 2 * 24 * state
    assert roofline.mamba_state_bytes_per_seq(get_model("llama-3-8b")) == 0.0
    cost = StepCostModel(model, gpu, block_size=1040)
    plain = StepCostModel(dataclasses.replace(model, mamba=None, attention_layers=None, num_layers=4), gpu,
                          block_size=1040)
    bytes_s = cost.bandwidth_frac * gpu.hbm_bandwidth_gb_s * 1e9
    # a memory-bound decode step of 8 sequences: 8 states moved in and out more than without Mamba layers
    moved = cost.step_time(0, 8, 8 * 500) - (cost.step_overhead_s + cost.weights_time(8)
                                             + 8 * 500 * cost._t_kv_read + 8 * cost._t_kv_write)
    assert moved == pytest.approx(8 * 2 * 24 * state / bytes_s, rel=1e-9)
    assert cost._t_kv_read == plain._t_kv_read  # the KV a token reads: the attention layers' alone
