"""vLLM's engine-argument spellings of kvsim's settings: which are aliases, and which only look like one.

A setting that mirrors a vLLM engine argument takes vLLM's name, but some of kvsim's flags predate that rule and
are a public interface, so they stay; vLLM's spelling is accepted beside them wherever its meaning and units are
exactly kvsim's, so that the flags of a pasted vLLM command line are read, not refused. On the command line both
spellings are one click option; in a sweep grid (flags or TOML keys) both set the one `SimConfig` field, and
giving both in one grid is refused. Checked against vLLM 0.33.0's ``vllm/engine/arg_utils.py`` and
``vllm/config/``; the v0 flags (swap space, preemption mode) against vLLM 0.6.3's, the last engine with them.
"""

from __future__ import annotations

VLLM_ALIASES: dict[str, str] = {
    # ParallelConfig.tensor_parallel_size: GPUs the model (and its KV cache) is split over.
    "tensor_parallel_size": "tensor_parallel",
    # CacheConfig.enable_prefix_caching (--enable-prefix-caching/--no-enable-prefix-caching).
    "enable_prefix_caching": "prefix_caching",
    # SchedulerConfig.enable_chunked_prefill: chunk prompts within max_num_batched_tokens.
    "enable_chunked_prefill": "chunked_prefill",
    # CacheConfig.kv_offloading_size: host KV buffer in GiB, summed over the tensor-parallel ranks.
    "kv_offloading_size": "cpu_offload_gib",
    # vLLM v0 CacheConfig swap_space: "CPU swap space size (GiB) per GPU".
    "swap_space": "swap_space_gib",
    # vLLM v0 SchedulerConfig.preemption_mode: recompute or swap (unset: v0 picks per group; kvsim: recompute).
    "preemption_mode": "preemption",
}
"""vLLM engine argument (as a field name) -> the `SimConfig` field it is an exact alias of."""

VLLM_SHORT_FLAGS: dict[str, str] = {"tensor_parallel": "-tp", "data_parallel_size": "-dp",
                                    "enable_expert_parallel": "-ep", "decode_context_parallel_size": "-dcp"}
"""Field -> vLLM's short flag for it (``vllm serve -tp 2``; ``-dp`` and ``-ep`` beside ``--data-parallel-size`` and
``--enable-expert-parallel``, fields named as vLLM names them)."""

VLLM_LOOKALIKES: dict[str, str] = {
    "cpu_offload_gb": "vLLM's --cpu-offload-gb offloads model weights to host memory (GiB per GPU); kvsim's "
                      "host memory for KV blocks is --cpu-offload-gib (vLLM's --kv-offloading-size)",
    "kv_cache_memory_bytes": "vLLM's --kv-cache-memory-bytes is bytes per GPU; kvsim's --kv-gib is GiB for all "
                             "--tensor-parallel GPUs together (bytes x tensor-parallel size / 2**30)",
    "num_gpu_blocks_override": "vLLM's --num-gpu-blocks-override counts blocks; kvsim's --kv-tokens counts token "
                               "slots (blocks x --block-size)",
}
"""vLLM engine arguments kvsim does not alias because its nearest setting differs in meaning or units -> why,
for the error that names them (a silent alias would run another experiment than the one asked for)."""


def vllm_names_of(field: str) -> list[str]:
    """vLLM's spellings (as field names) of ``field``, in `VLLM_ALIASES` order; empty if it has none."""
    return [name for name, target in VLLM_ALIASES.items() if target == field]


def lookalike_message(name: str) -> str | None:
    """Why vLLM's ``name`` (a field name or a flag, ``--cpu-offload-gb``) is not a kvsim setting, or None."""
    key = name.removeprefix("--").removeprefix("no-").replace("-", "_")
    why = VLLM_LOOKALIKES.get(key)
    return None if why is None else f"--{key.replace('_', '-')} is not a kvsim setting: {why}"
