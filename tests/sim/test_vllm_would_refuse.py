"""Servers vLLM refuses to start, which kvsim runs anyway and says so (the summary's ``vllm_would_refuse``, `kvsim
run` and `kvsim capacity`): a KV pool that cannot hold one request of ``max_model_len`` tokens
(``check_enough_kv_cache_memory``; the longest request the pool holds is the allocator's own `never_fits`), and a
token budget below ``max_model_len`` with chunked prefill off."""

import dataclasses
import json

import numpy as np
import pytest
from click.testing import CliRunner

from allocators import make_allocator
from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.memory import KVMemory
from sim.kernel.runner import run_simulation
from workloads import Workload

ONE = Workload(arrival_time_s=np.zeros(1), prompt_tokens=np.array([100]), output_tokens=np.array([10]), name="one")


@pytest.mark.parametrize(("allocator", "kv_tokens", "longest"), [
    ("paged", 4000, 4000 // 16 * 16 - 16),  # whole blocks, less the null block
    ("radix", 4000, 4000 // 16 * 16 - 16),
    ("vattention", 400_000, None),  # holds a whole max_model_len request: nothing to say
])
def test_the_longest_request_is_the_allocators_own_bound(allocator, kv_tokens, longest):
    memory = KVMemory(make_allocator(allocator, kv_tokens, block_size=16, max_model_len=8192))
    got = memory.longest_request(8192)
    assert got == (8192 if longest is None else longest)
    if longest is not None:  # the bisection's answer is the edge: one token more does not fit
        alloc = memory._alloc
        assert alloc.never_fits(got, final_tokens=got) is None and alloc.never_fits(got + 1, final_tokens=got + 1)


@pytest.mark.parametrize(("kv_tokens", "vllm_estimate"), [(12_000, 56_544), (4576, 12_000), (4573, 11_968)])
def test_a_windowed_models_longest_request_is_vllms_own_estimate(kv_tokens, vllm_estimate):
    """Gemma-3-12B (40 window layers of 1,024 tokens, 8 full), 16-token blocks, max_num_batched_tokens 2048:
    vLLM 0.33's ``check_enough_kv_cache_memory`` on as many bytes (`tools/vllm_oracle/max_model_len.py`) gives
    these estimates. It sizes a window layer at its admission cap (the window and a step's tokens in flight,
    193 blocks), not at the window alone: a prompt prefilled in chunks holds that much."""
    from allocators.hybrid import HybridPagedAllocator
    from tests.allocators.test_allocator_hybrid import GEMMA

    alloc = HybridPagedAllocator(kv_tokens, block_size=16, kv_groups=GEMMA, max_model_len=131_072,
                                 max_num_batched_tokens=2048)
    assert KVMemory(alloc).longest_request(131_072) == vllm_estimate


def test_a_run_and_capacity_say_vllm_would_not_start():
    summary = run_simulation(SimConfig(model="llama-3-8b", gpu="h100-80gb", kv_tokens=4000), ONE).summary
    assert summary["completed"] == 1
    assert summary["vllm_would_refuse"] == [
        "the KV cache holds one request of at most 3,984 tokens, short of max_model_len 8,192 (lower "
        "--max-model-len to 3,984 or give more KV memory)"]
    fits = run_simulation(SimConfig(model="llama-3-8b", gpu="h100-80gb", kv_tokens=4000, max_model_len=3984), ONE)
    assert "vllm_would_refuse" not in fits.summary
    result = CliRunner().invoke(main, ["capacity", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--kv-tokens",
                                       "4000", "--prompt-len", "100", "--output-len", "10", "--json"])
    assert json.loads(result.stdout)["vllm_would_refuse"] == summary["vllm_would_refuse"]
    assert "Warning: paged: vLLM would refuse to start this server: the KV cache holds one request of at most " \
           "3,984 tokens" in result.stderr


def test_a_budget_below_max_model_len_without_chunked_prefill_is_said():
    """vLLM requires max_num_batched_tokens >= max_model_len with chunked prefill off (its default budget is then
    max_model_len); kvsim's default 2,048 on an 8,192-token model rejects longer prompts, and says why."""
    config = SimConfig(model="llama-3-8b", gpu="h100-80gb", chunked_prefill=False)
    refusals = run_simulation(config, ONE).summary["vllm_would_refuse"]
    assert refusals == ["max_num_batched_tokens 2,048 is below max_model_len 8,192 with chunked prefill off (vLLM's "
                        "default budget is then max_model_len), so longer prompts and recomputes cannot be scheduled"]
    for fine in (dict(max_num_batched_tokens=8192), dict(chunked_prefill=True), dict(max_model_len=2048)):
        assert "vllm_would_refuse" not in run_simulation(dataclasses.replace(config, **fine), ONE).summary


def test_a_kv_size_no_gpu_has_room_for_beside_the_weights_is_said():
    """--kv-gib 39 on an A100-40GB that OPT-13B's weights fill by 23.93 GiB: accepted (it is under the GPU's
    40 GiB), though no server could hold both; the paper's 12 GiB fits."""
    refusals = run_simulation(SimConfig(kv_gib=39.0), ONE).summary["vllm_would_refuse"]
    assert refusals == ["--kv-gib 39 does not fit beside the weights: 39.00 GiB of KV and 23.93 GiB of weights per "
                        "GPU exceed the a100-40gb's 40.0 GiB (--kv-tokens sizes a pool regardless of the GPU)"]
    assert "vllm_would_refuse" not in run_simulation(SimConfig(kv_gib=12.0), ONE).summary
