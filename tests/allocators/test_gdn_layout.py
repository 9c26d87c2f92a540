"""Gated DeltaNet hybrids (`allocators.gdn_layout`): Qwen3-Next-80B-A3B's recurrent state and pool as vLLM 0.33 plans
them, checked by hand from its source and against vLLM's own planner run offline (``tools/vllm_oracle/gdn_pool.py``,
recorded in ``data/gdn_pool.json``: two GPUs at two tensor-parallel sizes each, prefix caching on, and one off; and
three with the MTP drafter's attention layer, prefix caching on and off)."""

import json
from pathlib import Path

import pytest

from allocators import catalog
from allocators.capacity import kv_capacity
from allocators.gdn_layout import GatedDeltaNetLayers
from allocators.mamba_layout import Mamba2Layers, block_alignment, hybrid_block_size, model_pool
from sim.kernel.spec_decode import drafter_layers

QWEN3_NEXT = catalog.get_model("qwen3-next-80b-a3b")
ORACLE = json.loads((Path(__file__).parent / "data" / "gdn_pool.json").read_text())
GPU_OF = {"h100": "h100-80gb", "h200": "h200"}


def test_qwen3_next_layers_from_its_config():
    """layer_types: every 4th of 48 layers full attention (12), the rest gated DeltaNet (36); only the attention
    layers keep KV, 2 KV heads of 256."""
    assert QWEN3_NEXT.num_layers == 48 and QWEN3_NEXT.attention_layers == 12 and QWEN3_NEXT.mamba.layers == 36
    (group,) = QWEN3_NEXT.kv_groups()
    assert (group.attention, group.layers, group.bytes_per_token) == ("full", 12, 12 * 2 * 2 * 256 * 2)


def test_qwen3_next_state_by_hand():
    """gated_delta_net_state_shape: conv (2 x 16 x 128 + 32 x 128 = 8,192 channels, conv_kernel - 1 = 3) and
    recurrent (32 value heads, 128 x 128), both at bf16 (mamba_ssm_cache_dtype auto: the model's dtype)."""
    m = QWEN3_NEXT.mamba
    assert m.conv_state_bytes(2) == 8192 * 3 * 2 == 49_152
    assert m.ssm_state_bytes(2) == 32 * 128 * 128 * 2 == 1_048_576
    assert m.state_bytes(2) == 1_097_728
    assert m.state_bytes(2, 2) == 548_864 and m.state_bytes(2, 8) == 137_216
    assert GatedDeltaNetLayers(36, 16, 32, 128, 128, 4, "float32").ssm_state_bytes(2) == 2 * 1_048_576


def test_qwen3_next_parameters_as_vllm_loads_them():
    """The 502 experts a token skips in each of 48 layers are 3 x 2048 x 512 each: num_params - active_params."""
    assert QWEN3_NEXT.num_params - QWEN3_NEXT.active_params == 48 * 502 * 3 * 2048 * 512
    assert round(QWEN3_NEXT.num_params / 1e9) == 80


def test_checkpoint_alignment_follows_the_gdn_prefill_kernel():
    """FlashInfer's GDN prefill (Hopper) exports states on a 64-token grid; Triton/FLA (before Hopper) none;
    Blackwell's choice needs its CUDA runtime; Mamba-2 exports at any position."""
    m = QWEN3_NEXT.mamba
    assert m.prefill_checkpoint_alignment(9.0) == 64
    assert m.prefill_checkpoint_alignment(8.0) is None
    assert block_alignment(m, True, 8.0) == 1 and block_alignment(m, False, 9.0) == 1
    with pytest.raises(ValueError, match="CUDA 13 runtime"):
        m.prefill_checkpoint_alignment(10.0)
    with pytest.raises(ValueError, match="--gpu"):
        m.prefill_checkpoint_alignment(None)
    assert catalog.get_model("nemotron-h-8b").mamba.prefill_checkpoint_alignment(9.0) == 1
    assert Mamba2Layers.label == "Mamba-2" and GatedDeltaNetLayers.label == "gated DeltaNet"


def test_block_size_by_hand():
    """_align_hybrid_block_size at -tp 2 (1,024 bytes a token a layer, 548,864 a state): prefix caching off,
    16 x cdiv(548,864, 16 x 1,024) = 16 x 34 = 544; on (Hopper), lcm(16, 64) = 64: 64 x 9 = 576."""
    assert hybrid_block_size(1024, 548_864) == 544
    assert hybrid_block_size(1024, 548_864, checkpoint_alignment=64) == 576
    assert hybrid_block_size(1024, 548_864, block_size=48, checkpoint_alignment=64) == 192 * 3


@pytest.mark.parametrize("name", sorted(ORACLE))
def test_pool_matches_vllm_planner(name):
    """The available bytes are kvsim's own derivation for the GPU and -tp the case is named after (with an MTP
    drafter, ``num_speculative_tokens`` given: its weights out, `drafter_layers`). With the MTP layer the planner
    makes groups of 13 layers: the attention group holds the 12 target layers and the drafter's, each Mamba group
    12 gated DeltaNet layers and a padding layer, and a block costs 13 pages."""
    case = ORACLE[name]
    tp = case["tensor_parallel"]
    gpu = catalog.get_gpu(GPU_OF[name.split("_")[2]])
    draft = drafter_layers("mtp", QWEN3_NEXT) if case.get("num_speculative_tokens") else 0
    cap = kv_capacity(QWEN3_NEXT, gpu, tensor_parallel=tp, drafter_layers=draft)
    assert cap.kv_bytes // tp == case["available_bytes"]
    align = block_alignment(QWEN3_NEXT.mamba, case["mamba_cache_mode"] == "align", gpu.compute_capability)
    pool = model_pool(QWEN3_NEXT, cap.kv_bytes, tp, checkpoint_alignment=align, drafter_layers=draft)
    assert pool.block_size == case["block_size"]
    assert pool.mamba_state_bytes == case["mamba_state_bytes"]
    assert pool.page_bytes == case["page_bytes"]
    assert pool.num_blocks == case["num_blocks"]
    assert pool.group_size == 12 + draft and pool.bytes_per_block == (12 + draft) * pool.page_bytes
    attention = [["FullAttentionSpec", (QWEN3_NEXT.attention_layers + draft) // pool.attention_groups]] \
        * pool.attention_groups
    mamba = [["MambaSpec", QWEN3_NEXT.mamba.layers // pool.mamba_groups]] * pool.mamba_groups
    assert QWEN3_NEXT.mamba.groups_first  # layer 0 is a gated DeltaNet layer: its groups first, in vLLM's order too
    assert mamba + attention == case["groups"]


@pytest.mark.parametrize("field, value", [("layers", 0), ("num_v_heads", 1.5), ("conv_kernel", 1),
                                          ("ssm_cache_dtype", "fp8"), ("groups_first", 1)])
def test_bad_gdn_dims(field, value):
    kwargs = dict(layers=2, num_k_heads=4, num_v_heads=4, head_k_dim=4, head_v_dim=4, conv_kernel=4) | {field: value}
    with pytest.raises(ValueError, match=f"gated DeltaNet {field}"):
        GatedDeltaNetLayers(**kwargs)


def test_heads_that_do_not_split_are_refused():
    with pytest.raises(ValueError, match="do not split evenly over --tensor-parallel 64"):
        QWEN3_NEXT.mamba.state_bytes(2, 64)
