"""Mamba-1 hybrids (`allocators.mamba1_layout`): AI21-Jamba-1.5-Mini's recurrent state and pool as vLLM 0.33 plans
them, checked by hand from its source (``mamba1_state_shape``, ``mamba1_state_dtype``) and against vLLM's own planner
run offline (``tools/vllm_oracle/mamba_pool.py``'s Jamba cases, recorded in ``data/mamba_pool.json``)."""

import json
from pathlib import Path

import pytest

from allocators import catalog
from allocators.capacity import kv_capacity
from allocators.mamba1_layout import Mamba1Layers
from allocators.mamba_layout import block_alignment, model_pool

JAMBA = catalog.get_model("jamba-1.5-mini")
ORACLE = json.loads((Path(__file__).parent / "data" / "mamba_pool.json").read_text())
JAMBA_CASES = sorted(n for n in ORACLE if n.startswith("jamba_1_5_mini"))


def test_jamba_layers_from_its_config():
    """attn_layer_period 8, attn_layer_offset 4: layers 4, 12, 20 and 28 attention (8 KV heads of 128), the other
    28 Mamba-1, layer 0 among them (vLLM lists their groups first)."""
    assert JAMBA.num_layers == 32 and JAMBA.attention_layers == 4 and JAMBA.mamba.layers == 28
    assert JAMBA.mamba.groups_first
    (group,) = JAMBA.kv_groups()
    assert (group.attention, group.layers, group.bytes_per_token) == ("full", 4, 4 * 2 * 8 * 128 * 2)


def test_jamba_state_by_hand():
    """mamba1_state_shape: conv (mamba_expand x hidden = 8,192 channels, mamba_d_conv - 1 = 3) and SSM (8,192,
    mamba_d_state 16), both at bf16 (mamba1_state_dtype with auto: the model's dtype); each split over -tp."""
    m = JAMBA.mamba
    assert m.conv_state_bytes(2) == 8192 * 3 * 2 == 49_152
    assert m.ssm_state_bytes(2) == 8192 * 16 * 2 == 262_144
    assert m.state_bytes(2) == 311_296
    assert m.state_bytes(2, 2) == 155_648 and m.state_bytes(2, 8) == 38_912
    assert Mamba1Layers(28, 8192, 16, 4, "float32").ssm_state_bytes(2) == 2 * 262_144


def test_an_uneven_split_is_refused():
    with pytest.raises(ValueError, match="8192 Mamba heads or channels do not split evenly over --tensor-parallel 3"):
        JAMBA.mamba.state_bytes(2, 3)


@pytest.mark.parametrize("field, value, message", [
    ("intermediate_size", 0, "Mamba-1 intermediate_size must be a positive integer, got 0"),
    ("conv_kernel", 1, "Mamba-1 conv_kernel must be at least 2"),
    ("ssm_cache_dtype", "fp8", "Mamba-1 ssm_cache_dtype must be one of auto, float32, bfloat16, float16"),
])
def test_bad_dims_are_one_line(field, value, message):
    dims = dict(layers=28, intermediate_size=8192, state_size=16, conv_kernel=4) | {field: value}
    with pytest.raises(ValueError, match=message):
        Mamba1Layers(**dims)


def test_no_prefill_checkpoint_on_any_gpu():
    """``MambaMixer`` keeps ``MambaBase``'s None: no alignment beyond the kernel block's, with or without prefix
    caching."""
    for capability in (None, 8.0, 9.0, 10.0):
        assert JAMBA.mamba.prefill_checkpoint_alignment(capability) is None
        assert block_alignment(JAMBA.mamba, True, capability) == 1


def test_the_parameters_are_the_models():
    """52B total, 12B active (the model card): 14 unrouted experts of 3 x 4096 x 14336 in each of 16 MoE layers."""
    assert JAMBA.num_params == 51_570_323_328
    assert JAMBA.num_params - JAMBA.active_params == 16 * 14 * 3 * 4096 * 14336
    assert JAMBA.expert_params == 16 * 3 * 4096 * 14336


@pytest.mark.parametrize("name", JAMBA_CASES)
def test_pool_matches_vllm_planner(name):
    """Blocks of 80 tokens (16 x cdiv(state, 16 x an attention token's page)), 7 Mamba groups and 1 attention group
    of 4 layers, in the order vLLM's planner lists them, and its block count."""
    case = ORACLE[name]
    tp = case["tensor_parallel"]
    pool = model_pool(JAMBA, case["available_bytes"] * tp, tp)
    assert (pool.block_size, pool.mamba_state_bytes, pool.page_bytes, pool.num_blocks) == (
        case["block_size"], case["mamba_state_bytes"], case["page_bytes"], case["num_blocks"])
    attention = [["FullAttentionSpec", pool.group_size]] * pool.attention_groups
    mamba = [["MambaSpec", pool.group_size]] * pool.mamba_groups
    assert mamba + attention == case["groups"]


def test_two_h100s_by_hand():
    """At -tp 2 on H100s each GPU holds 4 KV heads of the 4 attention layers (2,048 bytes a token a layer) and half
    of each state (155,648 bytes): blocks of 16 x cdiv(155,648, 16 x 2,048) = 80 tokens, pages of 163,840 bytes
    (4.99% padding), groups of 4 layers, so 24,589,576,074 bytes a GPU make 37,520 blocks; a request of 262,144
    tokens holds cdiv(262,144, 80) + 7 = 3,284 of them: 11 fit."""
    cap = kv_capacity(JAMBA, catalog.get_gpu("h100-80gb"), tensor_parallel=2)
    assert cap.kv_bytes == 49_179_152_149
    pool = model_pool(JAMBA, cap.kv_bytes, 2)
    assert (pool.block_size, pool.page_bytes, pool.group_size, pool.num_blocks) == (80, 163_840, 4, 37_520)
    assert 24_589_576_074 // (4 * 163_840) == 37_520
    assert pool.blocks_per_request(262_144) == 3277 + 7 == 3284
    assert pool.requests_that_fit(262_144) == 37_519 // 3284 == 11
