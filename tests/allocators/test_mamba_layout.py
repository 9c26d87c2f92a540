"""Hybrid attention/Mamba-2 models (`allocators.mamba_layout`): Nemotron-H-8B's state and pool as vLLM 0.33
plans them, checked by hand from its source and against vLLM's own planner run offline
(``tools/vllm_oracle/mamba_pool.py``, recorded in ``data/mamba_pool.json``)."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocators import catalog
from allocators.mamba_layout import (
    HybridMambaPool,
    Mamba2Layers,
    hybrid_block_size,
    hybrid_mamba_pool,
    kv_cache_group_size,
    model_pool,
)

NEMOTRON = catalog.get_model("nemotron-h-8b")
ORACLE = json.loads((Path(__file__).parent / "data" / "mamba_pool.json").read_text())


def test_nemotron_h_layers_from_its_config():
    """hybrid_override_pattern: 24 'M', 4 '*', 24 '-' of 52; only the 4 attention layers keep KV."""
    assert NEMOTRON.num_layers == 52 and NEMOTRON.attention_layers == 4 and NEMOTRON.mamba.layers == 24
    (group,) = NEMOTRON.kv_groups()
    assert (group.attention, group.layers, group.bytes_per_token) == ("full", 4, 4 * 2 * 8 * 128 * 2)


def test_nemotron_h_state_by_hand():
    """mamba2_state_shape: conv (conv_dim, conv_kernel - 1) with conv_dim = 128 x 64 + 2 x 8 x 128 = 10,240 at
    bf16; SSM (128, 64, 128) at float32 (NemotronH's default mamba_ssm_cache_dtype)."""
    m = NEMOTRON.mamba
    assert m.conv_state_bytes(2) == 10_240 * 3 * 2 == 61_440
    assert m.ssm_state_bytes(2) == 128 * 64 * 128 * 4 == 4_194_304
    assert m.state_bytes(2) == 4_255_744
    assert m.state_bytes(2, 2) == 4_255_744 // 2  # heads and channels split over 2 GPUs


def test_groups_that_do_not_split_are_rounded_as_vllm_does():
    """extra_groups_for_head_shards: n_groups not a multiple of tp becomes n_groups + (tp - n_groups)."""
    m = Mamba2Layers(2, 6, 4, 8, 1, 4)
    assert m.conv_state_bytes(2, 2) == (6 * 4 + 2 * 2 * 8) // 2 * 3 * 2


def test_block_size_by_hand():
    """_align_hybrid_block_size: 16 x cdiv(4,255,744, 16 x 4,096) = 16 x 65 = 1,040 tokens; a given
    --block-size of 32 aligns to 32 instead; a larger one that already holds the state stays."""
    assert hybrid_block_size(4096, 4_255_744) == 1040
    assert hybrid_block_size(4096, 4_255_744, block_size=32) == 32 * 33 == 1056
    assert hybrid_block_size(4096, 4_255_744, block_size=2048) == 2048


@pytest.mark.parametrize("name", sorted(n for n in ORACLE if n.startswith("nemotron_h_8b")))
def test_pool_matches_vllm_planner(name):
    case = ORACLE[name]
    tp = case["tensor_parallel"]
    pool = model_pool(NEMOTRON, case["available_bytes"] * tp, tp)
    assert pool.block_size == case["block_size"]
    assert pool.mamba_state_bytes == case["mamba_state_bytes"]
    assert pool.page_bytes == case["page_bytes"]
    assert pool.num_blocks == case["num_blocks"]
    attention = [["FullAttentionSpec", pool.group_size]] * pool.attention_groups
    mamba = [["MambaSpec", pool.group_size]] * pool.mamba_groups
    assert NEMOTRON.mamba.groups_first  # layer 0 is a Mamba layer: its groups first, in vLLM's order too
    assert mamba + attention == case["groups"]


def test_group_size_rule():
    """The smaller layer count, unless the larger is under 1.5 times it (gpt-oss + EAGLE's 12 : 13)."""
    assert kv_cache_group_size(4, 24) == 4
    assert kv_cache_group_size(12, 13) == 13
    assert kv_cache_group_size(8, 12) == 8


def test_blocks_per_request():
    pool = model_pool(NEMOTRON, 60 * 2**30)
    assert pool.blocks_per_request(1) == 1 + 6
    assert pool.blocks_per_request(1040) == 1 + 6
    assert pool.blocks_per_request(1041) == 2 + 6
    assert pool.requests_that_fit(8192) == (3780 - 1) // 14 == 269


@settings(max_examples=200, deadline=None)
@given(attn_layers=st.integers(1, 16), mamba_layers=st.integers(1, 64), kv_heads=st.integers(1, 8),
       heads=st.integers(1, 64), state=st.integers(1, 256), block=st.sampled_from([16, 32, 64]),
       gib=st.integers(1, 80), tokens=st.integers(1, 200_000))
def test_pool_invariants(attn_layers, mamba_layers, kv_heads, heads, state, block, gib, tokens):
    mamba = Mamba2Layers(mamba_layers, heads, 64, state, 1, 4, "float32")
    per_token = 2 * kv_heads * 128 * 2
    pool = hybrid_mamba_pool(attention_layers=attn_layers, attention_bytes_per_token=per_token, mamba=mamba,
                             dtype_bytes=2, available_bytes=gib * 2**30, block_size=block)
    assert pool.block_size % block == 0 and pool.block_size >= block
    assert pool.page_bytes >= pool.mamba_state_bytes  # the Mamba state fits the attention page...
    if pool.block_size > block:  # ...and a block one kernel block smaller would not hold it
        assert (pool.block_size - block) * per_token < pool.mamba_state_bytes
    assert pool.group_size * (pool.attention_groups - 1) < attn_layers <= pool.group_size * pool.attention_groups
    assert pool.group_size * (pool.mamba_groups - 1) < mamba_layers <= pool.group_size * pool.mamba_groups
    assert pool.num_blocks * pool.bytes_per_block <= gib * 2**30 < (pool.num_blocks + 1) * pool.bytes_per_block
    n, each = pool.requests_that_fit(tokens), pool.blocks_per_request(tokens)
    assert n * each <= pool.num_blocks - 1 < (n + 1) * each
    assert pool.blocks_per_request(tokens + 1) >= each


def test_pool_is_frozen():
    with pytest.raises(AttributeError):
        HybridMambaPool(1, 1, 1, 1, 1, 1, 1).num_blocks = 2


@pytest.mark.parametrize("change, message", [
    (dict(mamba=None), "attention_layers and mamba come together"),
    (dict(attention_layers=30), "exceed num_layers"),
    (dict(sliding_window=128), "not modelled"),
    (dict(attention_layers=0), "attention_layers must be a positive integer"),
])
def test_bad_hybrid_entries(change, message):
    with pytest.raises(ValueError, match=message):
        replace(NEMOTRON, **change)


@pytest.mark.parametrize("field, value", [("layers", 0), ("conv_kernel", 1), ("ssm_cache_dtype", "fp8"),
                                          ("groups_first", "M-M*")])
def test_bad_mamba_dims(field, value):
    kwargs = dict(layers=2, num_heads=4, head_dim=4, state_size=4, n_groups=1, conv_kernel=4) | {field: value}
    with pytest.raises(ValueError, match="mamba"):
        Mamba2Layers(**kwargs)


def test_models_without_mamba_keep_their_layout():
    for m in catalog.MODELS.values():
        if m.mamba is None:
            assert m.attention_layers is None
            assert sum(g.layers for g in m.kv_groups()) == m.num_layers
