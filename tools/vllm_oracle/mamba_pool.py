"""vLLM 0.33's block pool for Nemotron-H-8B (hybrid attention/Mamba-2) and Jamba-1.5-Mini (Mamba-1), driven
offline, for kvsim's `allocators.mamba_layout` to be checked against.

    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_oracle/mamba_pool.py [--out tests/allocators/data/mamba_pool.json]

Each case builds the layers' specs as vLLM's model would: the Mamba state shapes and dtypes from vLLM's own
``MambaStateShapeCalculator.mamba2_state_shape`` and ``MambaStateDtypeCalculator.mamba2_state_dtype`` (the SSM
state float32, as ``NemotronHForCausalLMConfig`` sets it), the attention layers as ``FullAttentionSpec`` at the
block size given, the Mamba page padded to the attention page (``mamba_page_size_padded``), and runs
``get_global_kv_cache_groups`` and ``get_kv_cache_configs`` (as ``EngineCore`` calls them) in the memory given,
the layers in the model's order (``hybrid_override_pattern``, layer 0 a Mamba layer), which orders the groups.
The block size itself (``Platform._align_hybrid_block_size``) needs the model's layers and attention backend
built, which this offline harness does not do: it is the case's input, checked by hand in kvsim's tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import spec_cases  # noqa: E402

NEMOTRON_H_8B = dict(pattern="M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", kv_heads=8, head_dim=128,
                     mamba_heads=128, mamba_head_dim=64, state_size=128, n_groups=8, conv_kernel=4)
"""Nemotron-H-8B's config.json: ``hybrid_override_pattern`` (one letter a layer, 'M' Mamba-2, '*' attention, '-' an
MLP without KV: 24 Mamba, 4 attention layers) and the dims the layers' specs need."""

CASES = {  # name -> (available bytes per GPU, tensor parallel, attention block size, mamba block size)
    "nemotron_h_8b_60gib_none": (60 * 2**30, 1, 1040, 8192),
    "nemotron_h_8b_60gib_align": (60 * 2**30, 1, 1040, 1040),
    "nemotron_h_8b_tp2_30gib": (30 * 2**30, 2, 1040, 8192),
}


def pool(available_bytes: int, tp: int, block_size: int, mamba_block_size: int) -> dict:
    """The pool vLLM plans for the case (the module docstring)."""
    import torch
    from vllm.model_executor.layers.mamba.mamba_utils import (
        MambaStateDtypeCalculator,
        MambaStateShapeCalculator,
    )

    m = NEMOTRON_H_8B
    shapes = MambaStateShapeCalculator.mamba2_state_shape(
        tp_world_size=tp, intermediate_size=m["mamba_heads"] * m["mamba_head_dim"], n_groups=m["n_groups"],
        num_heads=m["mamba_heads"], head_dim=m["mamba_head_dim"], state_size=m["state_size"],
        conv_kernel=m["conv_kernel"])
    dtypes = MambaStateDtypeCalculator.mamba2_state_dtype(torch.bfloat16, "auto", "float32")
    attn, mamba, state = layer_specs(m, tp, block_size, shapes, dtypes, mamba_block_size)
    # in the model's layer order, as ``get_kv_cache_spec`` lists them (``static_forward_context``, which each layer
    # joins as ``make_layers`` builds it): the planner's groups follow the order it first meets each spec in
    specs = {}
    for i, kind in enumerate(m["pattern"]):
        if kind == "*":  # NemotronHAttentionDecoderLayer's Attention, prefix "...mixer.attn"
            specs[f"model.layers.{i}.mixer.attn"] = attn
        elif kind == "M":  # NemotronHMambaDecoderLayer's MambaMixer2, prefix "...mixer"
            specs[f"model.layers.{i}.mixer"] = mamba
    return {"mamba_state_bytes": state, "page_bytes": attn.page_size_bytes, **plan(specs, available_bytes)}


JAMBA_1_5_MINI = dict(layers=32, attn_layer_period=8, attn_layer_offset=4, kv_heads=8, head_dim=128,
                      intermediate_size=2 * 4096, state_size=16, conv_kernel=4)
"""AI21-Jamba-1.5-Mini's config.json (kvsim's catalog entry ``jamba-1.5-mini`` gives the source): attention where
``i % attn_layer_period == attn_layer_offset`` (4 layers), Mamba-1 elsewhere (28), the mixer ``mamba_expand x
hidden_size`` wide."""

JAMBA_CASES = {  # name -> (available bytes per GPU, tensor parallel, attention block size, mamba block size)
    "jamba_1_5_mini_40gib_none": (40 * 2**30, 1, 80, 262144),
    "jamba_1_5_mini_tp2_align": (24_589_576_074, 2, 80, 80),
    "jamba_1_5_mini_tp2_none": (24_589_576_074, 2, 80, 262144),
}
"""Jamba cases: its Mamba-1 state (``mamba1_state_shape``, ``mamba1_state_dtype`` with both dtypes auto, as vLLM 0.33
leaves them for JambaForCausalLM) beside 4 attention layers. 24,589,576,074 bytes: each of 2 H100s' share of what
``kvsim capacity --model jamba-1.5-mini --gpu h100-80gb -tp 2`` derives (49,179,152,149 bytes, 45.80 GiB, in
all)."""


def jamba_pool(available_bytes: int, tp: int, block_size: int, mamba_block_size: int) -> dict:
    """The pool vLLM plans for a Jamba case (`pool`'s, with Jamba's layers: ``JambaMambaDecoderLayer``'s
    ``MambaMixer``, prefix "...mixer", and ``JambaAttentionDecoderLayer``'s ``Attention``, "...attn")."""
    import torch
    from vllm.model_executor.layers.mamba.mamba_utils import (
        MambaStateDtypeCalculator,
        MambaStateShapeCalculator,
    )

    m = JAMBA_1_5_MINI
    shapes = MambaStateShapeCalculator.mamba1_state_shape(tp_world_size=tp, intermediate_size=m["intermediate_size"],
                                                          state_size=m["state_size"], conv_kernel=m["conv_kernel"])
    dtypes = MambaStateDtypeCalculator.mamba1_state_dtype(torch.bfloat16, "auto", "auto")
    attn, mamba, state = layer_specs(m, tp, block_size, shapes, dtypes, mamba_block_size)
    specs = {}
    for i in range(m["layers"]):
        if i % m["attn_layer_period"] == m["attn_layer_offset"]:
            specs[f"model.layers.{i}.attn"] = attn
        else:
            specs[f"model.layers.{i}.mixer"] = mamba
    return {"mamba_state_bytes": state, "page_bytes": attn.page_size_bytes, **plan(specs, available_bytes)}


def layer_specs(m: dict, tp: int, block_size: int, shapes, dtypes, mamba_block_size: int, **mamba_fields) -> tuple:
    """A model's attention layer spec on ``tp`` GPUs (bf16, its KV heads split), its Mamba layer spec padded to the
    attention page (with ``mamba_fields`` of ``MambaSpec`` where the layer sets them), and the unpadded state's
    bytes."""
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

    attn = FullAttentionSpec(block_size=block_size, num_kv_heads=max(m["kv_heads"] // tp, 1),
                             head_size=m["head_dim"], dtype=torch.bfloat16)
    state = MambaSpec(shapes=tuple(shapes), dtypes=dtypes, block_size=mamba_block_size).page_size_bytes
    mamba = MambaSpec(shapes=tuple(shapes), dtypes=dtypes, block_size=mamba_block_size,
                      page_size_padded=attn.page_size_bytes, **mamba_fields)
    return attn, mamba, state


def plan(specs: dict, available_bytes: int) -> dict:
    """vLLM's KV cache config for the layers' ``specs`` in ``available_bytes`` (``get_global_kv_cache_groups``
    and ``get_kv_cache_configs``, as ``EngineCore`` calls them): its block count and groups (spec, layers)."""
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs

    config = spec_cases._pool_config()
    config.speculative_config = None
    config.scheduler_config.disable_hybrid_kv_cache_manager = False  # as vLLM leaves it for a hybrid model
    groups = get_global_kv_cache_groups(config, [specs])
    kv = get_kv_cache_configs(config, [specs], [available_bytes], groups)[0]
    return {"num_blocks": kv.num_blocks,
            "groups": [[type(g.kv_cache_spec).__name__, len(g.layer_names)] for g in kv.kv_cache_groups]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="tests/allocators/data/mamba_pool.json")
    a = p.parse_args()
    out = {name: {"available_bytes": m, "tensor_parallel": tp, "block_size": b, "mamba_block_size": mb,
                  **pool(m, tp, b, mb)} for name, (m, tp, b, mb) in CASES.items()}
    out |= {name: {"available_bytes": m, "tensor_parallel": tp, "block_size": b, "mamba_block_size": mb,
                   **jamba_pool(m, tp, b, mb)} for name, (m, tp, b, mb) in JAMBA_CASES.items()}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
