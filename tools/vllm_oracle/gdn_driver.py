"""`mamba_driver.py` with Qwen3-Next-80B-A3B's pool: three gated DeltaNet groups, then its attention group.

    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_oracle/gdn_driver.py [--no-checkpoint | --spec | --mtp | --mtp-align] \
        [--out tests/sim/data/vllm_oracle_gdn] [--async-scheduling] [CASE ...]

vLLM 0.33 plans Qwen3-Next's 12 attention and 36 gated DeltaNet layers as one attention KV cache group and three
Mamba groups of 12 layers, the Mamba groups first (its layer 0 is a linear-attention layer: ``gdn_pool.py``
records the planner's order). Each is a ``MambaSpec`` as ``QwenGatedDeltaNet.get_kv_cache_spec`` leaves it on
Hopper: prefix caching off, ``mamba_cache_mode="none"`` with a block of ``max_model_len`` tokens; on, ``"align"``
with the attention block size, one prefill checkpoint block and a checkpoint alignment of that block size
(FlashInfer's GDN prefill, ``get_mamba_prefill_checkpoint_grid``), where Mamba-2's is 1. The block sizes are kvsim's
and vLLM's for the model at -tp 2 on an H200: 576 tokens with prefix caching (64-aligned), 544 without. The traces
are `mamba_driver.py`'s. kvsim runs the same cases on ``qwen3-next-80b-a3b`` (``tests/sim/test_sim_gdn_parity.py``).

``--no-checkpoint``: the model before Hopper (an A100 at -tp 4), where ``_resolve_gdn_prefill_backend`` picks
Triton/FLA, ``QwenGatedDeltaNet._checkpoint_alignment`` stays None and ``get_kv_cache_spec`` is ``MambaBase``'s
(``num_prefill_checkpoint_blocks`` 0, ``prefill_checkpoint_alignment`` None): `mamba1_driver.py`'s spec and
cases on three groups, first, and blocks of 272 tokens (``_align_hybrid_block_size`` with no alignment beyond the
kernel block's 16), written to ``tests/sim/data/vllm_oracle_gdn_nockpt``
(``tests/sim/test_sim_gdn_nockpt_parity.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import driver  # noqa: E402
import mamba1_driver  # noqa: E402
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
                 "mamba_align_small_budget", "mamba_align_shared_prefix", "mamba_align_parallel_sampling_shared")
}
# a positive prefix_cache_retention_interval, 2 and 4 of its 576-token blocks (`mamba_driver.py`'s cases on them)
CASES |= {f"{name}_retention_{blocks * 576}": CASES[name] | dict(trace_of=CASES[name]["trace_of"],
                                                                 prefix_cache_retention_interval=blocks * 576)
          for name, blocks in (("gdn_align_contended", 2), ("gdn_align_shared_prefix", 2),
                               ("gdn_align_shared_prefix", 4), ("gdn_align_parallel_sampling_shared", 2))}
# dense retention (None): every full state cached, every chunk able to export its checkpoint reserves a block
CASES |= {f"{name}_dense": CASES[name] | dict(trace_of=CASES[name]["trace_of"], prefix_cache_retention_interval=None)
          for name in ("gdn_align_contended", "gdn_align_shared_prefix")}


SPEC_CASES: dict[str, dict] = {
    f"{name}_spec_{k}": CASES[name] | dict(num_blocks=blocks, num_speculative_tokens=k, spec_acceptance_rate=rate)
    for name, blocks, k, rate in (("gdn_align_contended", 60, 2, 0.5), ("gdn_align_shared_prefix", 80, 3, 0.6),
                                  ("gdn_none_contended", 60, 2, 0.5))
}
"""``--spec``: ngram speculative decoding with prefix caching on (`mamba_driver.py`'s ``mamba_align_*_spec_K``), the
running state and k speculative blocks at the end of each request's table, or off (``gdn_none_contended_spec_2``:
1 + k state blocks a request in each group), written to ``tests/sim/data/vllm_oracle_gdn_spec``
(``tests/sim/test_sim_gdn_spec_parity.py``; ``--async-scheduling``: vLLM's ``AsyncScheduler`` run of each, in its
``async`` folder, ``tests/sim/test_sim_hybrid_async_spec_parity.py``)."""
# found by ``mamba_fuzz.py`` (seed 5, draw 102): under dense retention a preempted request comes back with all but
# its last token cached, and vLLM pads its admission to 1 + k tokens (``pad_spec_decode``)
SPEC_CASES["gdn_align_padded_admission_spec_3"] = dict(
    trace=dict(n=11, prompt=(1187, 2071), output=(79, 121), gap=3.0), trace_of="mfuzz5_0102", num_blocks=35,
    block_size=576, enable_prefix_caching=True, max_num_batched_tokens=256, max_num_seqs=2,
    scheduler_reserve_full_isl=False, prefix_cache_retention_interval=None, num_speculative_tokens=3,
    spec_acceptance_rate=0.5)
# found by ``mamba_fuzz.py`` (seed 3, draw 116): a verification whose accepted drafts cross a block boundary leaves
# that column's state behind; vLLM caches it right after the step (``update_from_output``'s ``cache_blocks``, under a
# positive retention interval) before the next allocation frees it, so a later request hits that prefix in every
# group (one at a time, 5 drafts: the accepted ones often cross a boundary mid-step)
SPEC_CASES["gdn_align_long_prefix_spec_5_retention_576"] = dict(
    trace=dict(n=0), trace_of="mamba_align_long_prefix", num_blocks=164, block_size=576, enable_prefix_caching=True,
    max_num_seqs=1, scheduler_reserve_full_isl=False, prefix_cache_retention_interval=576, num_speculative_tokens=5,
    spec_acceptance_rate=0.3)

MTP_CASES: dict[str, dict] = {
    f"{name}_mtp_{k}": CASES[name] | dict(num_blocks=blocks, num_speculative_tokens=k, spec_acceptance_rate=rate,
                                          method="mtp")
    for name, blocks, k, rate in (("gdn_none_contended", 60, 2, 0.5), ("gdn_none_small_budget", 70, 3, 0.6))
}
# three shared system prompts of 1,500-5,000 tokens, prefix caching off: nothing cached, the prompts' blocks each
# request's own
MTP_CASES["gdn_none_shared_prefix_mtp_2"] = CASES["gdn_align_shared_prefix"] | dict(
    enable_prefix_caching=False, block_size=BLOCK_SIZES[False], num_blocks=80, num_speculative_tokens=2,
    spec_acceptance_rate=0.7, method="mtp")
"""``--mtp``: Qwen3-Next's MTP drafter (``--speculative-config '{"method": "mtp", "num_speculative_tokens": K}'``)
with prefix caching off (``mamba_cache_mode='none'``), written to ``tests/sim/data/vllm_oracle_gdn_mtp``
(``tests/sim/test_sim_gdn_mtp_parity.py``). As ``spec_cases.py --method eagle`` does for an EAGLE drafter (a real
MTP config loads the checkpoint's, which this offline harness does not have), the driver's ngram config is switched
to ``method = "mtp"`` before the ``Scheduler`` is built (`as_mtp`): ``use_eagle`` (``config/speculative.py:2116-2120``),
``num_lookahead_tokens`` K (``config/vllm.py:646-651``), ``num_prefill_lookahead_tokens`` 1 (one MTP module:
``use_multi_module_mtp`` is False, ``config/vllm.py:667-675``) and ``use_eagle_block_drop`` are then MTP's; the
attention group, which holds the drafter's layer in vLLM's planner (``gdn_pool.py``), is flagged
``is_eagle_group`` (``v1/core/kv_cache_planning.py:1649-1655``). Each Mamba group's ``num_speculative_blocks`` is
K (``MambaBase.get_kv_cache_spec``). The drafter's layer is not in the driver's pool: its ``num_blocks`` is given
(the pool in blocks with the layer is `gdn_pool.py`'s)."""


MTP_ALIGN_CASES: dict[str, dict] = {
    f"{name}_mtp_{k}": CASES[name] | dict(num_blocks=blocks, num_speculative_tokens=k, spec_acceptance_rate=rate,
                                          method="mtp")
    for name, blocks, k, rate in (("gdn_align_contended", 60, 2, 0.5), ("gdn_align_small_budget", 70, 3, 0.6),
                                  ("gdn_align_shared_prefix", 80, 3, 0.6),
                                  ("gdn_align_shared_prefix_retention_1152", 80, 2, 0.7),
                                  ("gdn_align_contended_dense", 60, 3, 0.5))
}
# `mamba_driver.write_long_prefix_trace`'s draws with three system prompts a whole number of 576-token blocks long
# (2, 4 and 7 blocks): a prefix's last block is followed by each request's own token, which a lookahead block hash
# covers (``v1/core/kv_cache_utils.py:1003-1018``), so a sibling hits one block less than with ngram's hashes
MTP_ALIGN_CASES["gdn_align_block_prefix_mtp_2"] = dict(
    trace=dict(n=0, prefixes=(1152, 2304, 4032)), trace_of="gdn_align_block_prefix", num_blocks=110,
    block_size=576, enable_prefix_caching=True, num_speculative_tokens=2, spec_acceptance_rate=0.5, method="mtp")
# `kvsim capacity --model qwen3-next-80b-a3b --gpu h200 -tp 2 --speculative-config '{"method": "mtp",
# "num_speculative_tokens": 2}' --prompt-len 7000 --output-len 1000`'s pool (6,996 blocks; 23 blocks a request at rest:
# 14 attention blocks for 8,000 tokens and 2 lookahead slots, 1 + 2 state blocks per Mamba group; 304 at once) given
# 320 such requests at once (up to 512 running), few drafts accepted: a request holds its 23 blocks from token 7,488
# to its end, about 460 steps, while the others are admitted one a step
MTP_ALIGN_CASES["gdn_align_capacity_mtp_2"] = dict(
    trace=dict(n=320, prompt=(7000, 7000), output=(1000, 1000), gap=0.0), num_blocks=6996, block_size=576,
    max_num_batched_tokens=8192, max_num_seqs=512, enable_prefix_caching=True, num_speculative_tokens=2,
    spec_acceptance_rate=0.1, method="mtp")
"""``--mtp-align``: Qwen3-Next's MTP drafter with prefix caching on (``mamba_cache_mode='align'``), written to
``tests/sim/data/vllm_oracle_gdn_mtp_align`` (``tests/sim/test_sim_gdn_mtp_align_parity.py``): the ``--spec``
cases' traces and pools (contended, shared prefixes, a retention interval of two blocks, dense retention), a small
budget, block-aligned system prompts and `kvsim capacity`'s pool. The scheduler is `as_mtp`'s, which checks what
vLLM 0.33 turns on for one MTP module with prefix caching: lookahead block hashes of one token (``num_hash_lookahead_tokens``,
``config/vllm.py:677-692``), which clear ``use_eagle_block_drop`` (``v1/core/sched/scheduler.py:342-345``), so no
group drops its last hit block and no Mamba group its checkpoint (``v1/core/kv_cache_coordinator.py:129-182``),
and a prefill lookahead of 1 (no chunk-end rule, ``Scheduler._reserve_prefill_lookahead``; nothing
re-prefillable)."""


def as_mtp() -> None:
    """Make the driver build vLLM's ``Scheduler`` and ``AsyncScheduler`` for Qwen3-Next's MTP drafter (`MTP_CASES`,
    `MTP_ALIGN_CASES`; ``--async-scheduling``: the async one)."""
    import vllm.v1.core.sched.async_scheduler as async_module
    import vllm.v1.core.sched.scheduler as module

    def switched(base: type) -> type:
        class MTPScheduler(base):
            def __init__(self, *, vllm_config, kv_cache_config, **kwargs) -> None:
                driver.switch_drafter(vllm_config, "mtp")
                assert vllm_config.speculative_config.use_eagle()
                assert not vllm_config.speculative_config.use_multi_module_mtp()
                assert vllm_config.num_lookahead_tokens == vllm_config.num_speculative_tokens
                assert vllm_config.num_prefill_lookahead_tokens == 1
                (attention,) = kv_cache_config.kv_cache_groups  # the drafter's layer is in it
                attention.is_eagle_group = True
                super().__init__(vllm_config=vllm_config, kv_cache_config=kv_cache_config, **kwargs)
                if vllm_config.cache_config.enable_prefix_caching:  # `MTP_ALIGN_CASES`: what stays off
                    coordinator = self.kv_cache_manager.coordinator
                    assert self.num_hash_lookahead_tokens == 1 and not self.use_eagle_block_drop
                    assert coordinator.eagle_group_ids and not coordinator.drop_eagle_group_ids
                    assert coordinator.num_reprefillable_tokens == 0
                    assert not any(getattr(m, "drop_eagle_checkpoint_block", False)
                                   for m in coordinator.single_type_managers)

        return MTPScheduler

    module.Scheduler = switched(module.Scheduler)
    async_module.AsyncScheduler = switched(async_module.AsyncScheduler)


NOCKPT_BLOCK_SIZE = 272
"""Qwen3-Next's attention block size at -tp 4 on an A100-80GB, prefix caching on or off (`allocators.gdn_layout`)."""

NOCKPT_CASES: dict[str, dict] = {
    name.replace("m1_", "gdn_nockpt_"): case | dict(block_size=NOCKPT_BLOCK_SIZE,
                                                    num_blocks=case["num_blocks"] * case["block_size"]
                                                    // NOCKPT_BLOCK_SIZE)
    | ({"trace_of": case["trace_of"].replace("m1_", "gdn_nockpt_")} if "trace_of" in case else {})
    for name, case in mamba1_driver.CASES.items() if "retention" not in name
}
"""`mamba1_driver.py`'s cases (contended, shared prefixes, long prefixes at two budgets, a small budget, prefix
caching off, dense retention) on about the same token slots cut into 272-token blocks, each on its sibling's trace
where it reruns one."""
# found by ``mamba_fuzz.py`` (seed 1, draw 82), for its async reference: a finished request whose last output is in
# flight, preempted by the next step's schedule, is back in vLLM's waiting queue (``_preempt_request``) until that
# output is processed after the step is scheduled, so the step's waiting count holds it
NOCKPT_CASES["gdn_nockpt_align_long_prefix_preempt_finished"] = dict(
    trace=dict(n=0), trace_of="mamba_align_long_prefix", num_blocks=67, block_size=NOCKPT_BLOCK_SIZE,
    max_num_batched_tokens=128, max_num_seqs=8, scheduler_reserve_full_isl=False, long_prefill_token_threshold=64,
    prefix_cache_retention_interval=4 * NOCKPT_BLOCK_SIZE)


def main() -> None:
    argv = sys.argv[1:]
    if "--no-checkpoint" in argv:  # Triton/FLA's GDN prefill: Mamba-1's spec
        argv.remove("--no-checkpoint")
        mamba_driver.CASES |= NOCKPT_CASES  # its long-prefix trace writer reads trace_of there
        mamba1_driver.MAMBA1_GROUPS = GDN_GROUPS  # `mamba1_driver.patch_scheduler` reads the count from it
        mamba1_driver.patch_scheduler()
        mamba_driver.write_references(NOCKPT_CASES, GDN_GROUPS, "tests/sim/data/vllm_oracle_gdn_nockpt",
                                      __doc__.splitlines()[0], argv)
        return
    mamba_driver.patch_scheduler(GDN_GROUPS, first=True, layer="linear_attn", grid_checkpoints=True)
    for flag, table, folder in (("--mtp", MTP_CASES, "vllm_oracle_gdn_mtp"),
                                ("--mtp-align", MTP_ALIGN_CASES, "vllm_oracle_gdn_mtp_align")):
        if flag in argv:
            argv.remove(flag)
            as_mtp()
            mamba_driver.write_references(table, GDN_GROUPS, f"tests/sim/data/{folder}", __doc__.splitlines()[0],
                                          argv)
            return
    if "--spec" in argv:
        argv.remove("--spec")
        mamba_driver.CASES |= SPEC_CASES  # its long-prefix trace writer reads trace_of there
        mamba_driver.write_references(SPEC_CASES, GDN_GROUPS, "tests/sim/data/vllm_oracle_gdn_spec",
                                      __doc__.splitlines()[0], argv)
        return
    mamba_driver.write_references(CASES, GDN_GROUPS, "tests/sim/data/vllm_oracle_gdn", __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
