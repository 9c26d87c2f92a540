"""A run's blocks are the size vLLM gives them: ``--block-size`` when given (16 included, as vLLM keeps it), else
for an MLA model the block size of the attention backend vLLM serves it with (`sim.kernel.block_size`)."""

import warnings

import numpy as np
import pytest

from allocators.catalog import get_gpu, get_model
from sim.kernel.config import SimConfig
from sim.kernel.ignored_settings import SettingWarning
from sim.kernel.metrics import Recorder
from sim.kernel.replica import build_replica, cost_options
from sim.kernel.runner import run_simulation
from workloads import Workload

FP8_ON_H200 = dict(model="deepseek-v3", gpu="h200", tensor_parallel=8, kv_cache_dtype="fp8", kv_tokens=64_000,
                   max_model_len=8192, step_time=0.01)
WORKLOAD = Workload(arrival_time_s=np.zeros(20), prompt_tokens=np.full(20, 1000),
                    output_tokens=np.full(20, 30, np.int64))


def _run(**changes):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = run_simulation(SimConfig(**FP8_ON_H200 | changes), WORKLOAD).summary
    return summary, [str(w.message) for w in caught if w.category is SettingWarning]


@pytest.mark.parametrize("allocator", ["paged", "paged-cow"])
def test_vllms_allocators_take_the_mla_backends_block_size(allocator):
    """FLASHMLA serves fp8 latents on Hopper in blocks of 64 where --block-size is not given: a 1,000-token
    prompt holds 16 of them, 1,024 slots, where blocks of 16 held 63 (1,008 slots). Nothing was given, so
    nothing is reported ignored."""
    summary, said = _run(allocator=allocator)
    assert SimConfig().block_size is None
    assert summary["block_size"] == 64
    assert "ignored_settings" not in summary and not [line for line in said if "--block-size" in line]
    config = SimConfig(**FP8_ON_H200 | {"allocator": allocator, "cpu_offload_gib": 1.0, "step_time": None})
    model, gpu = get_model("deepseek-v3").with_kv_cache_dtype("fp8"), get_gpu("h200")
    memory, cost, _ = build_replica(config, model, gpu, 64_000, Recorder(0))
    assert memory.block_size == cost.block_size == cost_options(config, model, gpu)["block_size"] == 64
    assert memory.blocks_for(1000) == 16
    assert memory.host_tier.block_bytes == 64 * 35_136 * 8  # a host block holds 64 tokens of all 8 GPUs' latents


@pytest.mark.parametrize("allocator", ["paged", "paged-cow"])
def test_a_given_16_is_kept_as_vllm_keeps_it(allocator):
    """vLLM 0.33 marks any given --block-size as the user's (``CacheConfig.user_specified_block_size``), 16
    included, and asks the backends about it: FLASHMLA takes no 16, TRITON_MLA (fp8 from compute capability 8.9)
    does, so fp8 latents on an H200 run in blocks of 16, a server vLLM starts."""
    summary, said = _run(allocator=allocator, block_size=16)
    assert summary["block_size"] == 16
    assert "ignored_settings" not in summary and "vllm_would_refuse" not in summary and not said
    config = SimConfig(**FP8_ON_H200 | {"allocator": allocator, "block_size": 16, "step_time": None})
    model, gpu = get_model("deepseek-v3").with_kv_cache_dtype("fp8"), get_gpu("h200")
    memory, cost, _ = build_replica(config, model, gpu, 64_000, Recorder(0))
    assert memory.block_size == cost.block_size == 16 and memory.blocks_for(1000) == 63


def test_a_given_block_size_is_reported_ignored_off_the_block_pools_16_included():
    """Contiguous slabs have no blocks: a given --block-size is ignored, 16 as any other; not given, nothing is."""
    assert _run(allocator="contiguous-max", block_size=16)[0]["ignored_settings"]["--block-size 16"].startswith(
        "contiguous-max reserves slabs of tokens, not blocks")
    assert "--block-size 16" not in _run(allocator="contiguous-max")[0].get("ignored_settings", {})


@pytest.mark.parametrize("changes", [dict(kv_cache_dtype="auto"), dict(block_size=32), dict(allocator="radix"),
                                     dict(allocator="contiguous-max"), dict(gpu="a100-80gb", kv_cache_dtype="bf16")])
def test_the_block_size_stays_where_vllm_keeps_it(changes):
    """16-bit latents on Hopper (FLASH_ATTN_MLA) and on Ampere (TRITON_MLA) take blocks of 16; a given block
    size that a backend takes is kept; SGLang's pages and contiguous slabs are not vLLM's blocks."""
    summary, _ = _run(**changes)
    assert summary["block_size"] == changes.get("block_size", 16)
    assert "--block-size 16" not in summary.get("ignored_settings", {})
    assert "vllm_would_refuse" not in summary
