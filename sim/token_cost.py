"""What a token costs in KV memory across the catalog, and how many requests fit: the tables behind
``notebooks/07_token_cost.ipynb`` and ``docs/token-cost.md``.

Each model's KV groups (`allocators.catalog.ModelSpec.kv_groups`) give its bytes per token at each
``--kv-cache-dtype``; `allocators.capacity.kv_capacity` sizes the KV memory on a GPU as vLLM does. A request of
``tokens`` tokens holds every token in full-attention and MLA layers but at most ``window`` of them in a
sliding-window layer (what a hybrid allocator frees beyond that), so the table gives both counts: with windows
freed, and with every layer treated as full attention. Partly filled blocks are not counted here; ``kvsim
capacity`` admits requests into a real allocator for that.
"""

from __future__ import annotations

import pandas as pd

from allocators.capacity import kv_capacity, pool_bytes_per_token
from allocators.catalog import get_gpu, get_model
from sim.kernel.config import plain_int
from sim.sweep.grid import one_or_many
from workloads.paper_lengths import PAPER_TARGETS

TOKEN_COST_MODELS = ("llama-3.1-8b", "mistral-7b", "gemma-3-12b", "gpt-oss-20b", "deepseek-v3")
"""The models of the comparison: full attention, sliding window everywhere, 5 : 1 and 1 : 1 hybrids, MLA."""

TENSOR_PARALLEL = {"deepseek-v3": 16, "deepseek-v3.2": 16}
"""GPUs a model needs on an H100-80GB: DeepSeek-V3's 627 GiB of FP8 weights (V3.2's 628) take two 8-GPU nodes."""

SHAREGPT_MEAN_TOKENS = round(PAPER_TARGETS["sharegpt-paper"][0] + PAPER_TARGETS["sharegpt-paper"][2])
"""A request of the sharegpt-paper preset's mean length at its end: 161 prompt + 338 output tokens."""


def token_cost_table(models=TOKEN_COST_MODELS, dtypes=("bf16", "fp8")) -> pd.DataFrame:
    """One row per model, KV dtype and KV group: the group's attention type, layers, window and bytes per
    token (every layer of the group), and the model's bytes per token in all groups. A lone model or dtype
    name is a list of one."""
    rows = []
    for name in one_or_many(models, "models"):
        spec = get_model(name)
        for dtype in one_or_many(dtypes, "dtypes"):
            groups = spec.kv_groups(dtype)
            total = sum(g.bytes_per_token for g in groups)
            rows += [{"model": name, "kv_cache_dtype": dtype, "group": g.name, "attention": g.attention,
                      "layers": g.layers, "window": g.window, "bytes_per_token": g.bytes_per_token,
                      "model_bytes_per_token": total} for g in groups]
    return pd.DataFrame(rows).astype({"window": "Int64"})


def requests_per_gpu_table(models=TOKEN_COST_MODELS, dtypes=("bf16", "fp8"), *, gpu: str = "h100-80gb",
                           tokens: int = SHAREGPT_MEAN_TOKENS) -> pd.DataFrame:
    """One row per model and KV dtype: the deployment (GPUs, KV memory and token slots as vLLM sizes them at
    --gpu-memory-utilization 0.9), the KV bytes a request of ``tokens`` tokens holds with sliding windows freed
    and with every layer full, how many such requests fit each way, and the windowed count per GPU. A lone model
    or dtype name is a list of one; a model is looked up in `TENSOR_PARALLEL` by its catalog name, in any case."""
    whole = plain_int(tokens)
    if whole is None or whole < 1:
        raise ValueError(f"requests_per_gpu_table: tokens must be a whole number of tokens >= 1, got {tokens!r}")
    tokens = whole
    rows = []
    for name in one_or_many(models, "models"):
        tp = TENSOR_PARALLEL.get(get_model(name).name, 1)
        for dtype in one_or_many(dtypes, "dtypes"):
            cap = kv_capacity(get_model(name), get_gpu(gpu), tensor_parallel=tp, kv_cache_dtype=dtype)
            spec = cap.model
            copies = pool_bytes_per_token(spec, tp) // spec.kv_bytes_per_token  # MLA: every GPU keeps the latent
            full = tokens * spec.kv_bytes_per_token * copies
            held = sum(g.bytes_per_token * min(tokens, g.window or tokens) for g in spec.kv_groups())
            windowed = held * copies
            rows.append({"model": name, "kv_cache_dtype": dtype, "gpu": gpu, "tensor_parallel": tp,
                         "kv_bytes": cap.kv_bytes, "kv_gib": cap.kv_gib, "kv_tokens": cap.kv_tokens, "request_tokens": tokens,
                         "request_kv_bytes": windowed, "request_kv_bytes_all_full": full,
                         "requests": cap.kv_bytes // windowed, "requests_all_full": cap.kv_bytes // full,
                         "requests_per_gpu": cap.kv_bytes // windowed / tp})
    return pd.DataFrame(rows)
