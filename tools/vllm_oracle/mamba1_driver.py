"""Reference outputs of vLLM's scheduler for a Mamba-1 hybrid (``tests/sim/data/vllm_oracle_mamba1``): `mamba_driver.py` with Jamba-1.5-Mini's pool, whose
seven Mamba-1 groups (28 layers in groups of its 4 attention layers; layer 0 a Mamba layer, so they come first) export
no prefill checkpoint: vLLM 0.33's ``MambaMixer`` keeps ``MambaBase.get_kv_cache_spec`` (``num_prefill_checkpoint_
blocks`` 0, ``prefill_checkpoint_alignment`` None) where ``MambaMixer2`` sets 1 and 1, so with prefix caching on the
scheduler ends every prompt's chunk at its last cacheable boundary (``mamba_has_prefill_checkpoint_blocks`` False)
and the manager never reserves a checkpoint block. Blocks of 80 tokens, as vLLM raises Jamba's attention block.

    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_oracle/mamba1_driver.py [--async-scheduling] [CASE ...]

It reuses `mamba_driver`'s case writer and ``patch_scheduler`` (``checkpoints=False``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mamba_driver  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "tests" / "sim" / "data" / "vllm_oracle_mamba1"

MAMBA1_GROUPS = 7
"""Jamba-1.5-Mini's Mamba KV cache groups: 28 Mamba-1 layers in groups of its 4 attention layers."""

_TRACE = dict(n=50, prompt=(100, 3000), output=(300, 3000), gap=1.0)
_SHARED = dict(n=80, prompt=(1500, 5000), output=(20, 300), gap=2.0, groups=3)
CASES: dict[str, dict] = {
    "m1_align_contended": dict(trace=_TRACE, num_blocks=400, block_size=80),
    "m1_align_shared_prefix": dict(trace=_SHARED, num_blocks=500, block_size=80),
    "m1_align_long_prefix": dict(trace=dict(n=0), num_blocks=700, block_size=80, trace_of="mamba_align_long_prefix"),
    "m1_align_small_budget": dict(trace=dict(n=80, prompt=(100, 9000), output=(10, 200), gap=4.0), num_blocks=600,
                                  block_size=80, max_num_batched_tokens=512, max_num_seqs=16,
                                  long_prefill_token_threshold=256),
    "m1_align_long_prefix_8192": dict(trace=dict(n=0), num_blocks=700, block_size=80,
                                      trace_of="mamba_align_long_prefix", max_num_batched_tokens=8192),
    "m1_align_shared_prefix_retention_160": dict(trace=_SHARED, num_blocks=500, block_size=80,
                                                 prefix_cache_retention_interval=160),
    "m1_none_contended": dict(trace=_TRACE, num_blocks=400, block_size=80, enable_prefix_caching=False),
    "m1_align_shared_prefix_dense": dict(trace=_SHARED, num_blocks=500, block_size=80,
                                         trace_of="m1_align_shared_prefix", prefix_cache_retention_interval=None),
}
"""Contention, shared system prompts (junctions, hits), mamba_driver's long shared prefixes (also at a budget of
8,192 tokens, where Mamba-2 would take a checkpoint block mid-prefill), a small budget with a long-prefill
threshold, a positive retention interval of 2 blocks, prefix caching off, and dense retention (None: every full
state a request holds is cached; a Mamba-1 layer still takes no checkpoint block)."""


def patch_scheduler() -> None:
    """`mamba_driver.patch_scheduler`'s `MAMBA1_GROUPS` groups, first, with Mamba-1's spec: no prefill checkpoint
    block."""
    mamba_driver.patch_scheduler(MAMBA1_GROUPS, first=True, checkpoints=False)


def main() -> None:
    mamba_driver.CASES |= CASES  # its long-prefix trace writer reads trace_of there
    patch_scheduler()
    mamba_driver.write_references(CASES, MAMBA1_GROUPS, str(DATA), __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
