"""vLLM's own answer to "how long a request does this KV pool hold?": its startup check
(``check_enough_kv_cache_memory``, which refuses a server whose KV cache cannot hold one ``max_model_len``
request and estimates the longest it could) on a model's per-layer KV specs and a pool's bytes.

kvsim's `KVMemory.longest_request` and the summary's ``vllm_would_refuse`` are checked against it
(``tests/sim/test_vllm_would_refuse.py``). Run with a venv that has vLLM (``docs/vllm-v1.md``)::

    VENV/bin/python tools/vllm_oracle/max_model_len.py --kv-tokens 12000 [--max-model-len 131072] \
        [--max-num-batched-tokens 2048] [--block-size 16]

The model is Gemma-3-12B's layout: 40 sliding-window layers (window 1,024) and 8 full-attention layers, 8 KV
heads of 256 dims in bf16 (8,192 bytes a token a layer); ``--kv-tokens`` tokens of all 48 layers are the pool.
On a CPU vLLM turns its hybrid KV cache manager off, so it is turned back on here, as on a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

WINDOW_LAYERS, FULL_LAYERS, WINDOW, KV_HEADS, HEAD_SIZE = 40, 8, 1024, 8, 256
BYTES_PER_TOKEN_LAYER = 2 * KV_HEADS * HEAD_SIZE * 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kv-tokens", type=int, required=True)
    parser.add_argument("--max-model-len", type=int, default=131_072)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--block-size", type=int, default=16)
    args = parser.parse_args()

    import torch
    from driver import _model_dir
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.kv_cache_planning import check_enough_kv_cache_memory
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    length = args.max_model_len
    model = ModelConfig(model=_model_dir(length), skip_tokenizer_init=True, max_model_len=length, dtype="float16")
    scheduler = SchedulerConfig(enable_chunked_prefill=True, async_scheduling=False, max_num_seqs=256,
                                max_num_batched_tokens=args.max_num_batched_tokens, max_model_len=length,
                                is_encoder_decoder=False)
    config = VllmConfig(model_config=model, scheduler_config=scheduler,
                        cache_config=CacheConfig(block_size=args.block_size), device_config=DeviceConfig(device="cpu"))
    config.scheduler_config.disable_hybrid_kv_cache_manager = False  # as on a GPU
    config.cache_config.kv_cache_layout = "LBNHC"  # what the engine core would resolve before the check
    shape = dict(block_size=args.block_size, num_kv_heads=KV_HEADS, head_size=HEAD_SIZE, dtype=torch.bfloat16)
    specs = {f"window.{i}": SlidingWindowSpec(**shape, sliding_window=WINDOW) for i in range(WINDOW_LAYERS)}
    specs |= {f"full.{i}": FullAttentionSpec(**shape) for i in range(FULL_LAYERS)}
    pool_bytes = args.kv_tokens * (WINDOW_LAYERS + FULL_LAYERS) * BYTES_PER_TOKEN_LAYER
    try:
        check_enough_kv_cache_memory(config, specs, pool_bytes)
    except ValueError as refusal:
        print(f"vLLM refuses: {refusal}")
        return
    print(f"vLLM starts: the pool holds a request of max_model_len {length}")


if __name__ == "__main__":
    main()
