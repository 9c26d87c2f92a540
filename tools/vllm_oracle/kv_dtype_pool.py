"""vLLM 0.33's KV pool for Llama-3-8B at each ``--kv-cache-dtype`` its CUDA GQA backends store, sized offline.

    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_oracle/kv_dtype_pool.py [--out tests/allocators/data]

Each layer's spec is built as ``Attention.get_kv_cache_spec`` builds it (``model_executor/layers/attention/
attention.py``: ``FullAttentionSpec`` at the dtype's torch storage dtype and ``get_kv_quant_mode``), then handed
to the backend that stores the dtype on a Hopper GPU through ``customize_attention_spec`` (``v1/worker/utils.py``;
the backend's ``customize_spec`` packs scales and sub-byte data). TurboQuant keeps the first and last two layers
at the model dtype (``TurboQuantConfig.get_boundary_skip_layers``, added in ``EngineArgs.create_engine_config``),
and ``Platform._align_heterogeneous_kv_block_size`` bumps the block size so both pages share one pool; those two
steps are vLLM's own calls here. ``get_global_kv_cache_groups`` and ``get_kv_cache_configs`` (as ``EngineCore``
calls them) then size the pool in ``available_bytes``: kvsim's KV memory for Llama-3-8B on one H100 (``kvsim
capacity --model llama-3-8b --gpu h100-80gb --json``: ``kv_bytes``). Writes ``kv_dtype_pool.json``.

The venv has no FlashInfer package, which ``v1/attention/backends/flashinfer.py`` imports at module level; only
``FlashInferBackend.customize_spec`` (arithmetic on the spec) is called, so `_stub_flashinfer` lets the module
import with stand-ins for FlashInfer's names (fp8_e5m2 and nvfp4 rows).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

AVAILABLE_BYTES = 59_978_264_586
"""kvsim's ``kv_bytes`` for Llama-3-8B on one h100-80gb (weights in bf16 whatever the KV dtype)."""

LLAMA_3_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
              "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 8192,
              "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}

BACKEND = {  # the first backend of CUDA's priority on Hopper (FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION,
    # TURBOQUANT: ``platforms/cuda.py`` ``_get_backend_priorities``) whose supported_kv_cache_dtypes list the dtype
    "auto": "FLASH_ATTN", "bfloat16": "FLASH_ATTN", "fp8": "FLASH_ATTN", "fp8_e4m3": "FLASH_ATTN",
    "fp8_e5m2": "FLASHINFER", "nvfp4": "FLASHINFER",
    "int8_per_token_head": "TRITON_ATTN", "fp8_per_token_head": "TRITON_ATTN", "int4_per_token_head": "TRITON_ATTN",
    "turboquant_k8v4": "TURBOQUANT", "turboquant_4bit_nc": "TURBOQUANT", "turboquant_k3v4_nc": "TURBOQUANT",
    "turboquant_3bit_nc": "TURBOQUANT",
}


def _stub_flashinfer() -> None:
    """Stand-ins for every ``flashinfer`` name the backend module imports (none is called here)."""
    import importlib.abc
    import importlib.machinery
    import sys
    import types

    class Stub:
        def __init__(self, *args, **kwargs) -> None:
            pass

    class Module(types.ModuleType):
        def __getattr__(self, name: str):
            if name.startswith("__"):
                raise AttributeError(name)
            return type(name, (Stub,), {})

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] == "flashinfer":
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec):
            module = Module(spec.name)
            module.__path__ = []
            return module

        def exec_module(self, module) -> None:
            pass

    try:
        import flashinfer  # noqa: F401
    except ImportError:
        sys.meta_path.insert(0, Finder())


def _config(cache_dtype: str):
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig

    d = tempfile.mkdtemp(prefix="kvsim-oracle-llama3-")
    Path(d, "config.json").write_text(json.dumps(LLAMA_3_8B))
    model = ModelConfig(model=d, skip_tokenizer_init=True, max_model_len=8192, dtype="bfloat16")
    config = VllmConfig(model_config=model, scheduler_config=SchedulerConfig(
        max_num_batched_tokens=2048, max_model_len=8192, is_encoder_decoder=False),
        cache_config=CacheConfig(block_size=16, cache_dtype=cache_dtype), device_config=DeviceConfig(device="cpu"))
    config.cache_config.kv_cache_layout = "NHD"
    return config


def pool(cache_dtype: str) -> dict:
    """vLLM's pool for Llama-3-8B at ``cache_dtype``: block size, blocks, tokens and each layer's page."""
    import torch
    from vllm.config.vllm import set_current_vllm_config
    from vllm.model_executor.layers.quantization.turboquant.config import TurboQuantConfig
    from vllm.platforms.interface import Platform
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.kv_cache_interface import FullAttentionSpec, get_kv_quant_mode
    from vllm.v1.worker.utils import customize_attention_spec

    config = _config(cache_dtype)
    cache = config.cache_config
    backend = AttentionBackendEnum[BACKEND[cache_dtype]].get_class()
    skip_backend = AttentionBackendEnum.FLASH_ATTN.get_class()
    if cache_dtype.startswith("turboquant_"):
        cache.kv_cache_dtype_skip_layers = sorted(TurboQuantConfig.get_boundary_skip_layers(config.model_config))
    with set_current_vllm_config(config):
        if cache.kv_cache_dtype_skip_layers:
            Platform._align_heterogeneous_kv_block_size(config, backend)
        specs = {}
        for i in range(LLAMA_3_8B["num_hidden_layers"]):
            dtype = "auto" if str(i) in cache.kv_cache_dtype_skip_layers else cache_dtype
            spec = FullAttentionSpec(block_size=cache.block_size, num_kv_heads=8, head_size=128,
                                     dtype=kv_cache_dtype_str_to_dtype(dtype, config.model_config),
                                     kv_quant_mode=get_kv_quant_mode(dtype))
            specs[f"model.layers.{i}.self_attn.attn"] = customize_attention_spec(
                skip_backend if dtype == "auto" else backend, spec)
        groups = get_global_kv_cache_groups(config, [specs])
        kv = get_kv_cache_configs(config, [specs], [AVAILABLE_BYTES], groups)[0]
    pages = [s.page_size_bytes for s in specs.values()]
    del torch
    return {"backend": BACKEND[cache_dtype], "block_size": cache.block_size,
            "skip_layers": [int(x) for x in cache.kv_cache_dtype_skip_layers],
            "layer_page_bytes": sorted(set(pages)), "page_bytes_all_layers": sum(pages),
            "num_blocks": kv.num_blocks, "tokens": kv.num_blocks * cache.block_size,
            "groups": [len(g.layer_names) for g in kv.kv_cache_groups]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dtypes", nargs="*")
    p.add_argument("--out", default="tests/allocators/data")
    a = p.parse_args()
    _stub_flashinfer()
    out = {"available_bytes": AVAILABLE_BYTES, "model": "llama-3-8b",
           "pools": {d: pool(d) for d in (a.dtypes or BACKEND)}}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "kv_dtype_pool.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
