"""vLLM 0.33's block pool for Qwen3-Next-80B-A3B (hybrid attention/gated DeltaNet), driven offline, for kvsim's
`allocators.mamba_layout` with `allocators.gdn_layout` to be checked against (the sibling of ``mamba_pool.py``).

    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_oracle/gdn_pool.py [--out tests/allocators/data/gdn_pool.json]

Each case builds the layers' specs as vLLM's model would: the gated DeltaNet state shapes and dtypes from vLLM's own
``MambaStateShapeCalculator.gated_delta_net_state_shape`` and ``MambaStateDtypeCalculator.gated_delta_net_state_dtype``
(``--mamba-ssm-cache-dtype`` auto, which Qwen3-Next's config keeps), the 12 attention layers (every 4th of 48) as
``FullAttentionSpec`` at the block size given, the 36 gated DeltaNet pages padded to the attention page, and runs
``get_global_kv_cache_groups`` and ``get_kv_cache_configs`` (as ``EngineCore`` calls them) in the memory given. As in
``mamba_pool.py`` the block size (``Platform._align_hybrid_block_size``, with FlashInfer's 64-token checkpoint grid
on Hopper in align mode) is the case's input, checked by hand in kvsim's tests; the available bytes are kvsim's
derived KV memory per GPU for the GPU and tensor-parallel size the case is named after.

The ``MTP_CASES`` add the layer of Qwen3-Next's MTP drafter (``--speculative-config '{"method": "mtp",
"num_speculative_tokens": K}'``) as vLLM's model runner adds it: ``Qwen3NextMultiTokenPredictor`` builds its
``num_nextn_predict_layers`` (1) decoder layers with ``layer_type="full_attention"``
(``model_executor/models/qwen3_next_mtp.py:89-96``), an attention layer of the target's spec, which
``GPUModelRunner.get_kv_cache_spec`` flags ``is_draft`` (``v1/worker/gpu_model_runner.py:7114-7115``), a field
left out of the spec's equality (``v1/kv_cache_interface.py:215``), listed after the target's layers; every gated
DeltaNet spec has ``num_speculative_blocks`` K (``model_executor/layers/mamba/abstract.py:86-90``). 13 attention
and 36 gated DeltaNet layers: groups of 13 (``_get_kv_cache_groups_uniform_page_size``,
``v1/core/kv_cache_planning.py:521-532``: 36 is not under 1.5 x 13), three Mamba groups of 12 and one attention
group of 13, a block 13 pages. Their available bytes are kvsim's with the drafter's weights out.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import mamba_pool  # noqa: E402

QWEN3_NEXT = dict(layers=48, full_attention_interval=4, kv_heads=2, head_dim=256, k_heads=16, v_heads=32,
                  head_k_dim=128, head_v_dim=128, conv_kernel=4, max_model_len=262144)

CASES = {  # name -> (available bytes per GPU, tensor parallel, attention block size, mamba_cache_mode)
    "qwen3_next_h100_tp4_align": (36_434_377_098, 4, 320, "align"),
    "qwen3_next_h100_tp8_align": (56_357_955_658, 8, 192, "align"),
    "qwen3_next_h200_tp2_align": (55_297_829_079, 2, 576, "align"),
    "qwen3_next_h200_tp4_align": (95_144_986_199, 4, 320, "align"),
    "qwen3_next_h200_tp2_none": (55_297_829_079, 2, 544, "none"),
}

MTP_CASES = {  # name -> (available bytes per GPU, tensor parallel, attention block size, mamba_cache_mode, K)
    "qwen3_next_h200_tp2_align_mtp_2": (53_650_911_132, 2, 576, "align", 2),
    "qwen3_next_h200_tp2_none_mtp_2": (53_650_911_132, 2, 544, "none", 2),
    "qwen3_next_h100_tp4_none_mtp_1": (35_610_918_125, 4, 272, "none", 1),
}


def pool(available_bytes: int, tp: int, block_size: int, mode: str, mtp_tokens: int = 0) -> dict:
    """The pool vLLM plans for the case (the module docstring); ``mtp_tokens``: the MTP drafter's
    num_speculative_tokens (0: no drafter)."""
    import torch
    from vllm.model_executor.layers.mamba.mamba_utils import (
        MambaStateDtypeCalculator,
        MambaStateShapeCalculator,
    )

    m = QWEN3_NEXT
    shapes = MambaStateShapeCalculator.gated_delta_net_state_shape(
        tp, m["k_heads"], m["v_heads"], m["head_k_dim"], m["head_v_dim"], m["conv_kernel"])
    dtypes = MambaStateDtypeCalculator.gated_delta_net_state_dtype(torch.bfloat16, "auto", "auto")
    mamba_block_size = block_size if mode == "align" else m["max_model_len"]
    attn, gdn, state = mamba_pool.layer_specs(m, tp, block_size, shapes, dtypes, mamba_block_size,
                                              mamba_cache_mode=mode, num_prefill_checkpoint_blocks=int(mode == "align"),
                                              prefill_checkpoint_alignment=block_size if mode == "align" else None,
                                              num_speculative_blocks=mtp_tokens)
    specs = {}
    for i in range(m["layers"]):
        full = (i + 1) % m["full_attention_interval"] == 0
        specs[f"model.layers.{i}.self_attn.attn" if full else f"model.layers.{i}.linear_attn"] = attn if full else gdn
    if mtp_tokens:  # the MTP drafter's one full-attention layer, after the target's
        specs["mtp.layers.0.self_attn.attn"] = replace(attn, is_draft=True)
    return {"mamba_state_bytes": state, "page_bytes": attn.page_size_bytes,
            **mamba_pool.plan(specs, available_bytes)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="tests/allocators/data/gdn_pool.json")
    a = p.parse_args()
    out = {name: {"available_bytes": m, "tensor_parallel": tp, "block_size": b, "mamba_cache_mode": mode,
                  **pool(m, tp, b, mode)} for name, (m, tp, b, mode) in CASES.items()}
    out |= {name: {"available_bytes": m, "tensor_parallel": tp, "block_size": b, "mamba_cache_mode": mode,
                   "num_speculative_tokens": k, **pool(m, tp, b, mode, k)}
            for name, (m, tp, b, mode, k) in MTP_CASES.items()}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
