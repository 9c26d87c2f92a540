"""vLLM 0.33 under decode context parallelism, offline: its scheduler's decisions and its KV pool's size.

    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_dcp_oracle.py [--out tests/sim/data/vllm_oracle_dcp]
    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_dcp_oracle.py --pool
    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_dcp_oracle.py --refusals

Without ``--pool``: each of ``CASES`` (a trace of ``tests/sim/data/vllm_oracle``, ``num_blocks`` and
``decode_context_parallel_size``) is run through ``tools/vllm_oracle/driver.py``'s real ``Scheduler``, unchanged,
with the ``VllmConfig`` it builds carrying ``decode_context_parallel_size`` (and a ``tensor_parallel_size`` of the
same) on its parallel config. They are set after ``VllmConfig`` validates itself, because the driver's one-layer
stand-in model is a Llama whose four KV heads vLLM would not shard (its GQA check); everything the scheduler and
its KV cache manager read of DCP (``resolve_kv_cache_block_sizes``, ``Scheduler.dcp_world_size``,
``SingleTypeKVCacheManager.block_size``) is then DCP's. Writes ``OUT/CASE/{settings.json, steps.csv.gz,
requests.csv}``; reruns are byte-identical.

``--pool``: prints vLLM's ``get_kv_cache_configs`` / ``resolve_kv_cache_block_sizes`` / ``get_kv_cache_capacity``
for DeepSeek-V3's MLA layout (61 layers, a 576-wide bf16 latent, blocks of 16) in kvsim's derived per-GPU memory
on 8 x H200, at DCP 1 and 8 (`tests/allocators/test_decode_context_parallel.py` holds the figures).

``--refusals``: prints what vLLM's ``ParallelConfig`` and ``ModelConfig.verify_with_parallel_config`` say of
``REFUSALS`` (GQA Llama configs of those heads; the same test's refusal cases).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "vllm_oracle"))

CASES = {  # name -> (trace case, num_blocks, decode_context_parallel_size); block size 16 throughout
    "contended_dcp2": ("block_size_32", 60, 2),
    "shared_prefix_dcp4": ("shared_prefix_cached", 75, 4),
}
REFUSALS = [(64, 8, 8, 2), (64, 8, 16, 4), (64, 8, 16, 2), (28, 4, 28, 2), (64, 8, 8, 3)]
"""(query heads, KV heads, tensor_parallel_size, decode_context_parallel_size): Llama-3-70B's heads, Qwen2.5-7B's."""
DSV3_BYTES_PER_GPU = 398_502_778_651 // 8  # kvsim capacity --model deepseek-v3 --gpu h200 -tp 8: kv_bytes / 8


def with_dcp(dcp: int) -> None:
    """Make ``vllm.config.VllmConfig`` (as the driver imports it) carry ``dcp`` on its parallel config."""
    import vllm.config

    base = vllm.config.VllmConfig

    class DcpConfig(base):
        def __post_init__(self) -> None:
            super().__post_init__()
            object.__setattr__(self.parallel_config, "tensor_parallel_size", dcp)
            object.__setattr__(self.parallel_config, "decode_context_parallel_size", dcp)

    vllm.config.VllmConfig = DcpConfig


def run_case(name: str, out: Path) -> None:
    import driver

    trace_case, num_blocks, dcp = CASES[name]
    source = ROOT / "tests" / "sim" / "data" / "vllm_oracle" / trace_case
    settings = json.loads((source / "settings.json").read_text())
    settings |= {"block_size": 16, "num_blocks": num_blocks, "decode_context_parallel_size": dcp,
                 "trace_of": trace_case}
    with_dcp(dcp)
    with tempfile.TemporaryDirectory() as tmp:
        sys.argv = ["driver.py", str(source / "trace.csv"), tmp, "--num-blocks", str(num_blocks), "--block-size", "16"]
        driver.main()
        case = out / name
        case.mkdir(parents=True, exist_ok=True)
        with open(Path(tmp) / "steps.csv", "rb") as f, gzip.GzipFile(case / "steps.csv.gz", "wb", mtime=0) as g:
            shutil.copyfileobj(f, g)
        shutil.copyfile(Path(tmp) / "requests.csv", case / "requests.csv")
    (case / "settings.json").write_text(json.dumps(settings, indent=1) + "\n")


def pool() -> dict:
    import driver
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config,
        get_kv_cache_capacity,
        resolve_kv_cache_block_sizes,
    )
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    max_len, out = 163_840, {}
    for dcp in (1, 8):
        model = ModelConfig(model=driver._model_dir(max_len), skip_tokenizer_init=True, max_model_len=max_len,
                            dtype="bfloat16")
        config = VllmConfig(model_config=model, scheduler_config=SchedulerConfig(
            max_num_batched_tokens=2048, max_model_len=max_len, is_encoder_decoder=False),
            cache_config=CacheConfig(block_size=16), device_config=DeviceConfig(device="cpu"))
        object.__setattr__(config.parallel_config, "tensor_parallel_size", 8)
        object.__setattr__(config.parallel_config, "decode_context_parallel_size", dcp)
        config.cache_config.kv_cache_layout = "NHD"
        spec = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576, dtype=torch.bfloat16)
        specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(61)}
        groups = get_global_kv_cache_groups(config, [specs])
        kv = get_kv_cache_configs(config, [specs], [DSV3_BYTES_PER_GPU], groups)[0]
        sched = generate_scheduler_kv_cache_config([kv])
        block_size, hash_block_size = resolve_kv_cache_block_sizes(sched, config)
        tokens, concurrency = get_kv_cache_capacity(config, sched)
        out[dcp] = {"num_blocks": kv.num_blocks, "scheduler_block_size": block_size,
                    "hash_block_size": hash_block_size, "kv_cache_size_tokens": tokens,
                    "max_concurrency": concurrency}
    return out


def refusals() -> dict:
    from vllm.config import ModelConfig, ParallelConfig

    out = {}
    for heads, kv, tp, dcp in REFUSALS:
        d = tempfile.mkdtemp(prefix="kvsim-dcp-model-")
        Path(d, "config.json").write_text(json.dumps({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32 * heads,
            "intermediate_size": 256, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": 128,
            "num_hidden_layers": 1, "vocab_size": 1000, "max_position_embeddings": 4096, "torch_dtype": "float16"}))
        try:
            parallel = ParallelConfig(tensor_parallel_size=tp, decode_context_parallel_size=dcp)
            ModelConfig(model=d, skip_tokenizer_init=True).verify_with_parallel_config(parallel)
            out[f"{heads}/{kv} heads, tp {tp}, dcp {dcp}"] = "accepted"
        except ValueError as exc:  # pydantic's ValidationError is one
            lines = str(exc).splitlines()
            out[f"{heads}/{kv} heads, tp {tp}, dcp {dcp}"] = next(
                (line.strip() for line in lines if "Value error" in line), lines[0])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*")
    p.add_argument("--out", default=str(ROOT / "tests" / "sim" / "data" / "vllm_oracle_dcp"))
    p.add_argument("--pool", action="store_true", help="print vLLM's pool for DeepSeek-V3 on 8 x H200 instead")
    p.add_argument("--refusals", action="store_true", help="print vLLM's refusals of REFUSALS instead")
    a = p.parse_args()
    if a.pool or a.refusals:
        print(json.dumps(pool() if a.pool else refusals(), indent=1))
        return
    for name in a.names or list(CASES):  # one case per process: the config class is patched once
        if len(a.names or CASES) > 1:
            import subprocess

            subprocess.run([sys.executable, __file__, name, "--out", a.out], check=True)
        else:
            run_case(name, Path(a.out))


if __name__ == "__main__":
    main()
