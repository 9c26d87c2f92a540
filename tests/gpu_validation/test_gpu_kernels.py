"""Paged attention kernels against dense float64 attention: random tables and kvsim's real allocators.

Runs on CPU: the reference (gather + SDPA) and eager FlexAttention always; the Triton kernel where triton
can run (a GPU, or triton's CPU interpreter where triton is installed); compiled FlexAttention everywhere
(it compiles for about 15 s on CPU; KVSIM_SKIP_COMPILE=1 skips it).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from gpu_validation.block_tables import PagedBatch, pad_block_tables, physical_to_logical, random_block_tables
from gpu_validation.checks import KERNELS, TOLERANCE, allocator_scenario, random_scenario, relative_error
from gpu_validation.kv_cache import PagedKVCache
from gpu_validation.triton_paged import triton_available

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.bfloat16]


def assert_close(name, scenario, dtype):
    err = relative_error(KERNELS[name](scenario), scenario.expected)
    assert err <= TOLERANCE[dtype], f"{name} on {scenario.name} ({dtype}): relative error {err:.2e}"


# --- the cache and the tables -----------------------------------------------------------------------------
def test_slot_mapping_follows_the_block_table():
    cache = PagedKVCache(8, 4, 1, 2)
    assert cache.slot_mapping([5, 2, 7], 2, 9).tolist() == [22, 23, 8, 9, 10, 11, 28]
    with pytest.raises(ValueError, match="need 4 blocks"):
        cache.slot_mapping([5, 2, 7], 0, 13)


def test_write_and_copy_blocks_move_whole_blocks_in_every_layer():
    cache = PagedKVCache(4, 2, 2, 3, num_layers=2)
    k = torch.arange(12, dtype=torch.float32).reshape(2, 2, 3)
    cache.write(torch.tensor([2, 3]), k, -k, layer=1)
    cache.copy_blocks([(1, 3)])
    assert torch.equal(cache.key[1, :, 3], k.transpose(0, 1))
    assert torch.equal(cache.value[1, :, 3], -k.transpose(0, 1))


def test_random_block_tables_scatter_blocks_and_share_fork_prefixes():
    rng = np.random.default_rng(1)
    tables = random_block_tables(rng, [37, 50, 64], 16, 20, forks={2: (1, 40)})
    assert [len(t) for t in tables] == [3, 4, 4]
    assert tables[2][:2] == tables[1][:2] and tables[2][2] != tables[1][2]  # full blocks only
    used = [b for t in tables[:2] for b in t] + tables[2][2:]
    assert len(set(used)) == len(used) and 0 not in used
    assert tables[0] != sorted(tables[0]) or tables[1] != sorted(tables[1])  # shuffled, not in order
    with pytest.raises(ValueError, match="too few"):
        random_block_tables(rng, [100], 16, 4)


def test_physical_to_logical_inverts_each_table_and_rejects_repeats():
    tables = pad_block_tables([[3, 1], [1, 4, 2]])
    inverse = physical_to_logical(tables, torch.tensor([20, 33]), 16, 5)
    assert inverse.tolist() == [[-1, 1, -1, 0, -1], [-1, 0, 2, -1, 1]]
    with pytest.raises(ValueError, match="repeats"):
        physical_to_logical(pad_block_tables([[2, 2]]), torch.tensor([20]), 16, 5)


def test_batch_rejects_queries_longer_than_the_sequence():
    with pytest.raises(ValueError, match="at least q_len"):
        PagedBatch(torch.zeros(1, 4, 2, 8), pad_block_tables([[1]]), torch.tensor([3]))


def test_nan_output_counts_as_infinite_error():
    expected = torch.ones(2, 1, 2, 4, dtype=torch.float64)
    out = expected.clone().float()
    out[1, 0, 1, 3] = float("nan")
    assert relative_error(out, expected) == float("inf")


# --- reference and eager FlexAttention --------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("block_size,q_len", [(8, 1), (16, 7), (32, 5)])
def test_reference_and_flex_match_dense_attention_on_random_tables(block_size, q_len, dtype):
    scenario = random_scenario(device=DEVICE, dtype=dtype, block_size=block_size, q_len=q_len, seed=block_size)
    for kernel in ("reference", "flex"):
        assert_close(kernel, scenario, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("allocator", ["paged", "paged-cow"])
def test_reference_and_flex_match_dense_attention_on_allocator_tables(allocator, dtype):
    for q_len in (1, 6):
        scenario = allocator_scenario(allocator, device=DEVICE, dtype=dtype, block_size=16, q_len=q_len, seed=3)
        for kernel in ("reference", "flex"):
            assert_close(kernel, scenario, dtype)


def test_allocator_scenario_depends_on_copy_on_write_copies(monkeypatch):
    """Without applying the allocator's copies the answer is wrong: the scenario really exercises them."""
    monkeypatch.setattr(PagedKVCache, "copy_blocks", lambda self, copies: None)
    scenario = allocator_scenario("paged-cow", device=DEVICE, block_size=16, seed=3)
    assert relative_error(KERNELS["reference"](scenario), scenario.expected) > 0.05


def test_reading_one_token_too_many_is_caught():
    s = random_scenario(device=DEVICE, block_size=16, seed=5)
    b = s.batch
    longer = type(s)(s.name, s.cache, PagedBatch(b.query, b.block_tables, b.context_lens + 1), s.expected)
    for kernel in ("reference", "flex"):
        assert relative_error(KERNELS[kernel](longer), s.expected) > 1e-3


# --- compiled FlexAttention (the real block-sparse kernel; about 15 s of compiling on CPU) -----------------
@pytest.mark.skipif(os.environ.get("KVSIM_SKIP_COMPILE") == "1", reason="KVSIM_SKIP_COMPILE=1 was set")
def test_compiled_flex_matches_dense_past_2048_tokens():
    scenario = random_scenario(device=DEVICE, block_size=16, num_seqs=3, max_len=3000, seed=4)
    assert scenario.batch.max_context_len > 2048
    assert_close("flex-compiled", scenario, torch.float32)
    assert_close("flex-compiled", allocator_scenario("paged-cow", device=DEVICE, seed=3), torch.float32)


# --- the Triton kernel ------------------------------------------------------------------------------------
@pytest.fixture
def triton_env():
    """Triton where it can run: on a GPU, else in triton's CPU interpreter (switched on in conftest.py; the test
    extra installs triton on x86-64 Linux, so CI runs the kernel's logic too)."""
    pytest.importorskip("triton", reason="triton is not installed (the Triton kernel is tested on a GPU)")
    if not triton_available():
        pytest.skip("triton is installed but has no GPU and TRITON_INTERPRET is not 1")


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("block_size", [8, 16, 32])
@pytest.mark.parametrize("kernel", ["triton", "triton-split"])
def test_triton_matches_dense_attention_on_random_tables(triton_env, kernel, block_size, dtype):
    scenario = random_scenario(device=DEVICE, dtype=dtype, block_size=block_size, seed=block_size)
    assert_close(kernel, scenario, dtype)


@pytest.mark.parametrize("allocator", ["paged", "paged-cow"])
def test_triton_matches_dense_attention_on_allocator_tables(triton_env, allocator):
    for dtype in DTYPES:
        scenario = allocator_scenario(allocator, device=DEVICE, dtype=dtype, block_size=16, seed=3)
        assert_close("triton", scenario, dtype)
        assert_close("triton-split", scenario, dtype)


def test_triton_rejects_prefill_queries(triton_env):
    from gpu_validation.triton_paged import triton_paged_decode

    scenario = random_scenario(device=DEVICE, q_len=3)
    with pytest.raises(ValueError, match="decode-only"):
        triton_paged_decode(scenario.cache, scenario.batch)
