"""`mamba_driver.py` with Qwen3-Next-80B-A3B's pool: three gated DeltaNet groups, then its attention group.

    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_oracle/gdn_driver.py [--out tests/sim/data/vllm_oracle_gdn] \
        [--async-scheduling] [CASE ...]

vLLM 0.33 plans Qwen3-Next's 12 attention and 36 gated DeltaNet layers as one attention KV cache group and three
Mamba groups of 12 layers, the Mamba groups first (its layer 0 is a linear-attention layer: ``gdn_pool.py``
records the planner's order). Each is a ``MambaSpec`` as ``QwenGatedDeltaNet.get_kv_cache_spec`` leaves it on
Hopper: prefix caching off, ``mamba_cache_mode="none"`` with a block of ``max_model_len`` tokens; on, ``"align"``
with the attention block size, one prefill checkpoint block and a checkpoint alignment of that block size
(FlashInfer's GDN prefill, ``get_mamba_prefill_checkpoint_grid``), where Mamba-2's is 1. The block sizes are kvsim's
and vLLM's for the model at -tp 2 on an H200: 576 tokens with prefix caching (64-aligned), 544 without. The traces
are `mamba_driver.py`'s. kvsim runs the same cases on ``qwen3-next-80b-a3b`` (``tests/sim/test_sim_gdn_parity.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import driver  # noqa: E402
import mamba_driver  # noqa: E402

GDN_GROUPS = 3
"""Qwen3-Next's Mamba KV cache groups (36 gated DeltaNet layers in groups of its 12 attention layers)."""

BLOCK_SIZES = {True: 576, False: 544}
"""Prefix caching -> Qwen3-Next's attention block size at -tp 2 on an H200 (`allocators.gdn_layout`)."""

CASES: dict[str, dict] = {
    name.replace("mamba_", "gdn_"): mamba_driver.CASES[name] | dict(
        trace_of=mamba_driver.CASES[name].get("trace_of", name),
        block_size=BLOCK_SIZES[mamba_driver.CASES[name].get("enable_prefix_caching", True)])
    for name in ("mamba_none_contended", "mamba_align_contended", "mamba_none_small_budget",
                 "mamba_align_small_budget", "mamba_align_shared_prefix")
}


def patch_scheduler(num_mamba_groups: int) -> None:
    """Make vLLM's ``Scheduler`` and ``AsyncScheduler`` (as `driver.build_scheduler` imports them) put the gated
    DeltaNet groups before the attention group of the KV cache config they are given."""
    import vllm.v1.core.sched.async_scheduler as async_sched
    import vllm.v1.core.sched.scheduler as sched

    sched.Scheduler = _with_gdn(sched.Scheduler, num_mamba_groups)
    async_sched.AsyncScheduler = _with_gdn(async_sched.AsyncScheduler, num_mamba_groups)


def _with_gdn(base: type, num_mamba_groups: int) -> type:
    """``base`` (vLLM's scheduler class) given the gated DeltaNet groups first (`patch_scheduler`)."""
    import torch
    from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, MambaSpec

    class GdnScheduler(base):
        def __init__(self, *, vllm_config, kv_cache_config, **kw):
            attention = kv_cache_config.kv_cache_groups[0].kv_cache_spec
            cache = vllm_config.cache_config
            align = cache.enable_prefix_caching
            cache.mamba_cache_mode = "align" if align else "none"
            cache.mamba_block_size = attention.block_size if align else vllm_config.model_config.max_model_len
            spec = MambaSpec(shapes=((4, 4),), dtypes=(torch.float16,), block_size=cache.mamba_block_size,
                             page_size_padded=attention.page_size_bytes, mamba_cache_mode=cache.mamba_cache_mode,
                             num_prefill_checkpoint_blocks=int(align),
                             prefill_checkpoint_alignment=cache.mamba_block_size if align else None)
            groups = [*(KVCacheGroupSpec([f"linear_attn.{i}"], spec) for i in range(num_mamba_groups)),
                      *kv_cache_config.kv_cache_groups]
            kv_cache_config = KVCacheConfig(
                num_blocks=kv_cache_config.num_blocks, kv_cache_tensors=kv_cache_config.kv_cache_tensors,
                kv_cache_groups=groups, prefix_cache_retention_interval=cache.prefix_cache_retention_interval)
            kw["block_size"], kw["hash_block_size"] = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
            super().__init__(vllm_config=vllm_config, kv_cache_config=kv_cache_config, **kw)

    return GdnScheduler


def main() -> None:
    """Write every case (or those named) to ``OUT/CASE/{trace.csv, settings.json, steps.csv.gz, requests.csv}``."""
    import cases

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=list(CASES))
    p.add_argument("--out", default="tests/sim/data/vllm_oracle_gdn")
    p.add_argument("--async-scheduling", action="store_true",
                   help="vLLM 0.33's default AsyncScheduler and batch queue (`async_gap.run_async`), written to "
                        "OUT/async/CASE (the trace and settings are the synchronous case's)")
    a = p.parse_args()
    cases.CASES |= mamba_driver.CASES | CASES  # cases.py's trace writer and settings, for these names too
    patch_scheduler(GDN_GROUPS)
    for name in a.names:
        out = Path(a.out) / name
        out.mkdir(parents=True, exist_ok=True)
        if a.async_scheduling:  # the synchronous case's trace, vLLM's async engine loop
            import async_gap

            step_rows, request_rows = async_gap.run_async(cases.driver_args(name, out / "trace.csv"))[2:]
            async_gap.write_reference(Path(a.out) / "async" / name, step_rows, request_rows)
            print(name, "async done", flush=True)
            continue
        cases.write_trace(name, out / "trace.csv")
        (out / "settings.json").write_text(json.dumps(cases.settings(name) | {"mamba_groups": GDN_GROUPS},
                                                      indent=1) + "\n")
        driver.run(cases.driver_args(name, out / "trace.csv", out))
        driver.gzip_steps(out)
        print(name, "done", flush=True)


if __name__ == "__main__":
    main()
