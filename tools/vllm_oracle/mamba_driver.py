"""`driver.py` with a hybrid attention/Mamba-2 pool: Nemotron-H-8B's six Mamba groups, then its attention group.

    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_oracle/mamba_driver.py [--out tests/sim/data/vllm_oracle_mamba] \
        [--async-scheduling] [CASE ...]

vLLM's scheduler is given the KV cache groups its engine plans for a hybrid model such as Nemotron-H-8B (one
attention group, six Mamba groups, ``_get_kv_cache_groups_uniform_page_size``), the Mamba groups first: the planner
lists the groups in the order it first meets each layer spec in ``kv_cache_spec``, the model's layer order, and
Nemotron-H's layer 0 is a Mamba layer (``hybrid_override_pattern`` 'M-M-M-M*-...', ``mamba_pool.py``). Each Mamba
group is a ``MambaSpec`` whose page is padded to the attention page (``mamba_page_size_padded``), in the mode prefix
caching gives (``MambaModelConfig.verify_and_update_config``): off, ``mamba_cache_mode="none"`` with a block of
``max_model_len`` tokens; on, ``"align"`` with the attention block size, one prefill checkpoint block (as
``MambaMixer2.get_kv_cache_spec`` sets it) and the engine's ``prefix_cache_retention_interval``. The state shape
is a placeholder: the scheduler reads block counts, never state bytes. kvsim runs the same case on
``nemotron-h-8b`` (``tests/sim/test_sim_mamba_parity.py``), whose attention block size is 1,040.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import driver  # noqa: E402


def patch_scheduler(num_mamba_groups: int, *, first: bool = False, layer: str = "mamba",
                    grid_checkpoints: bool = False, checkpoints: bool = True) -> None:
    """Make vLLM's ``Scheduler`` and ``AsyncScheduler`` (as `driver.build_scheduler` imports them) add the Mamba
    groups to the KV cache config they are given: after the attention group, or ``first`` (as vLLM's planner
    orders a model whose layer 0 is a recurrent one: Nemotron-H's Mamba-2 'M', Qwen3-Next's linear attention), their
    layers named ``layer.i``. A Mamba-2
    layer exports its state at any token (``prefill_checkpoint_alignment`` 1); with ``grid_checkpoints`` (gated
    DeltaNet on Hopper: FlashInfer's grid) only at multiples of the block size, and none without prefix caching;
    without ``checkpoints`` (Mamba-1, gated DeltaNet's Triton/FLA prefill: ``MambaBase``'s spec) none at all, and no
    checkpoint block (``num_prefill_checkpoint_blocks`` 0)."""
    import torch
    import vllm.v1.core.sched.async_scheduler as async_sched
    import vllm.v1.core.sched.scheduler as sched
    from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, MambaSpec

    def with_mamba(base: type) -> type:
        class MambaScheduler(base):
            def __init__(self, *, vllm_config, kv_cache_config, **kw):
                attention = kv_cache_config.kv_cache_groups[0].kv_cache_spec
                cache = vllm_config.cache_config
                align = cache.enable_prefix_caching
                cache.mamba_cache_mode = "align" if align else "none"
                cache.mamba_block_size = attention.block_size if align else vllm_config.model_config.max_model_len
                if not checkpoints:
                    alignment = None
                elif grid_checkpoints:
                    alignment = cache.mamba_block_size if align else None
                else:
                    alignment = 1
                spec = MambaSpec(shapes=((4, 4),), dtypes=(torch.float16,), block_size=cache.mamba_block_size,
                                 page_size_padded=attention.page_size_bytes, mamba_cache_mode=cache.mamba_cache_mode,
                                 num_prefill_checkpoint_blocks=int(align and checkpoints),
                                 prefill_checkpoint_alignment=alignment,
                                 # ``MambaBase.get_kv_cache_spec``: a state block per draft token too
                                 num_speculative_blocks=vllm_config.num_speculative_tokens)
                mamba = [KVCacheGroupSpec([f"{layer}.{i}"], spec) for i in range(num_mamba_groups)]
                groups = [*mamba, *kv_cache_config.kv_cache_groups] if first else \
                    [*kv_cache_config.kv_cache_groups, *mamba]
                kv_cache_config = KVCacheConfig(
                    num_blocks=kv_cache_config.num_blocks, kv_cache_tensors=kv_cache_config.kv_cache_tensors,
                    kv_cache_groups=groups, prefix_cache_retention_interval=cache.prefix_cache_retention_interval)
                # the scheduling granularity over every group (``resolve_kv_cache_block_sizes``: their lcm)
                kw["block_size"], kw["hash_block_size"] = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
                super().__init__(vllm_config=vllm_config, kv_cache_config=kv_cache_config, **kw)
                assert sum(isinstance(g.kv_cache_spec, MambaSpec)
                           for g in self.kv_cache_config.kv_cache_groups) == num_mamba_groups
                assert checkpoints or not self.mamba_has_prefill_checkpoint_blocks

        return MambaScheduler

    sched.Scheduler = with_mamba(sched.Scheduler)
    async_sched.AsyncScheduler = with_mamba(async_sched.AsyncScheduler)


CASES: dict[str, dict] = {
    # Nemotron-H-8B's pool (attention blocks of 1,040 tokens; a request holds one block per 1,040 tokens and six
    # Mamba state blocks): contended, so that requests are preempted and resumed
    "mamba_none_contended": dict(trace=dict(n=50, prompt=(100, 3000), output=(300, 3000), gap=1.0), num_blocks=30,
                                 block_size=1040, enable_prefix_caching=False),
    # every request at once: admission by free blocks (six state blocks each), preemption of the newest
    "mamba_none_offline_burst": dict(trace=dict(n=60, prompt=(100, 4000), output=(20, 500), gap=0.0), num_blocks=50,
                                     block_size=1040, enable_prefix_caching=False),
    # a small budget with a long-prefill threshold: prompts prefilled in many chunks while others decode
    "mamba_none_small_budget": dict(trace=dict(n=80, prompt=(100, 9000), output=(10, 200), gap=4.0),
                                    num_blocks=70, block_size=1040, enable_prefix_caching=False,
                                    max_num_batched_tokens=512, max_num_seqs=16, long_prefill_token_threshold=256),
}
# vLLM's default for such a model, prefix caching on (mamba_cache_mode "align", retention 0): the same traces
CASES |= {name.replace("_none_", "_align_"): case | dict(enable_prefix_caching=True, trace_of=name)
          for name, case in CASES.items()}
CASES |= {
    # three shared system prompts of 1,500-5,000 tokens: shared prefixes and their junctions
    "mamba_align_shared_prefix": dict(trace=dict(n=80, prompt=(1500, 5000), output=(20, 300), gap=2.0, groups=3),
                                      num_blocks=60, block_size=1040),
    # prefixes of several blocks shared across requests (Mamba hits at cached boundaries, junctions) and identical
    # prompts arriving in the same step (a hit on a state cached that step is deferred): `write_long_prefix_trace`
    "mamba_align_long_prefix": dict(trace=dict(n=0), num_blocks=80, block_size=1040),
}
CASES |= {
    # requests sampled n = 2..4 times, which vLLM v1's engine fans out into n requests ("{k}_{row}"; kvsim:
    # --parallel-sampling fan-out): each child admitted, preempted and given its own state blocks alone; with
    # prefix caching on the children after the first hit the prompt's cached state (or wait a step for it)
    "mamba_none_parallel_sampling": dict(trace=dict(n=40, prompt=(100, 3000), output=(50, 1500), gap=3.0,
                                                    samples=(1, 2, 3, 4)), num_blocks=40, block_size=1040,
                                         enable_prefix_caching=False, parallel_sampling="fan-out"),
    # the same with shared system prompts too (junctions and sibling hits together)
    "mamba_align_parallel_sampling_shared": dict(trace=dict(n=50, prompt=(1500, 5000), output=(20, 300), gap=3.0,
                                                            groups=3, samples=(1, 2, 3, 4)),
                                                 num_blocks=60, block_size=1040, parallel_sampling="fan-out"),
}
CASES["mamba_align_parallel_sampling"] = CASES["mamba_none_parallel_sampling"] | dict(
    enable_prefix_caching=True, trace_of="mamba_none_parallel_sampling")
# chunks of up to 8,192 tokens: a chunk spanning more than two blocks (2,081 tokens and more) exports the state one
# block before its end into a checkpoint block of its own (``is_mamba_prefill_checkpoint_valid``)
CASES |= {f"{name}_8192": CASES[name] | dict(trace_of=CASES[name].get("trace_of", name), max_num_batched_tokens=8192)
          for name in ("mamba_align_contended", "mamba_align_long_prefix")}
# a positive prefix_cache_retention_interval (2 and 4 blocks of 1,040): every chunk whose checkpoint is valid
# reserves a checkpoint block (under 0 only the prefill-end chunk's), and the state ending each interval is cached
CASES |= {f"{name}_retention_{blocks * 1040}": CASES[name] | dict(trace_of=CASES[name].get("trace_of", name),
                                                                  prefix_cache_retention_interval=blocks * 1040)
          for name, blocks in (("mamba_align_contended", 2), ("mamba_align_shared_prefix", 2),
                               ("mamba_align_shared_prefix", 4), ("mamba_align_long_prefix", 2),
                               ("mamba_align_parallel_sampling_shared", 2), ("mamba_align_long_prefix_8192", 2),
                               ("mamba_align_long_prefix_8192", 4))}
# (mamba_align_contended at 4 blocks, and mamba_align_contended_8192 at 2 and 4, were exact too, their steps
# those of a case above: not kept)
# dense retention (``--prefix-cache-retention-interval None``): every full state block a request holds is cached,
# and, as under a positive interval, every chunk whose checkpoint is valid reserves a checkpoint block
CASES |= {f"{name}_dense": CASES[name] | dict(trace_of=CASES[name].get("trace_of", name),
                                             prefix_cache_retention_interval=None)
          for name in ("mamba_align_contended", "mamba_align_shared_prefix", "mamba_align_long_prefix_8192")}
# prefix caching off (mamba_cache_mode "none") with a positive interval: vLLM accepts a multiple of its scheduler
# block size, lcm(1,040, max_model_len 16,384) = 1,064,960, and caches nothing, so the run is mamba_none_contended's
CASES["mamba_none_contended_retention_1064960"] = CASES["mamba_none_contended"] | dict(
    trace_of="mamba_none_contended", prefix_cache_retention_interval=1064960)
# vLLM's ngram speculative decoding with prefix caching off (mamba_cache_mode "none"): each request holds
# 1 + num_speculative_tokens state blocks per Mamba group (``MambaManager.get_num_blocks_to_allocate``), the
# acceptances drawn as kvsim draws them (`driver.accepted_drafts`; the case's num_speculative_tokens and
# spec_acceptance_rate, as ``spec_cases.py`` gives them); pools large enough for two or three requests at once
# (18 to 30 state blocks each), small enough that growing ones are preempted
CASES |= {f"{name}_spec_{k}": CASES[name] | dict(trace_of=name, num_blocks=blocks, num_speculative_tokens=k,
                                                 spec_acceptance_rate=rate)
          for name, blocks, k, rate in (("mamba_none_contended", 60, 2, 0.5),
                                        ("mamba_none_offline_burst", 80, 3, 0.6),
                                        ("mamba_none_small_budget", 70, 4, 0.7))}
# the same with prefix caching on (mamba_cache_mode "align", retention 0): the running state and the k speculative
# blocks are the last 1 + k columns of a request's Mamba table, the speculative ones moved up as it crosses a block
# boundary (``MambaManager.allocate_new_blocks``); shared prefixes add Mamba hits and junctions
CASES |= {f"{name}_spec_{k}": CASES[name] | dict(trace_of=CASES[name].get("trace_of", name), num_blocks=blocks,
                                                 num_speculative_tokens=k, spec_acceptance_rate=rate)
          for name, blocks, k, rate in (("mamba_align_contended", 60, 2, 0.5),
                                        ("mamba_align_shared_prefix", 80, 2, 0.6),
                                        ("mamba_align_small_budget", 70, 4, 0.7))}
# `kvsim capacity --model nemotron-h-8b --gpu h100-80gb --speculative-config '{"method": "ngram",
# "num_speculative_tokens": 2}' --prompt-len 7000 --output-len 1000`'s pool (3,506 blocks) given 160 such requests at
# once: once each holds its 8 attention blocks and 1 + 2 state blocks per Mamba group, 134 run (26 blocks each)
CASES["mamba_align_capacity_spec_2"] = dict(trace=dict(n=160, prompt=(7000, 7000), output=(1000, 1000), gap=0.0),
                                            num_blocks=3506, block_size=1040, max_num_batched_tokens=8192,
                                            enable_prefix_caching=True, num_speculative_tokens=2,
                                            spec_acceptance_rate=0.5)
# found by ``mamba_fuzz.py`` (seed 5, draw 18; its trace seeded by the draw's name): with drafts and a positive
# retention interval, a preempted request comes back with all but its last token cached and vLLM pads its admission
# to 1 + k tokens (``pad_spec_decode``), whose slots and state columns it allocates as a verification's drafts
CASES["mamba_align_padded_admission_spec_3"] = dict(
    trace=dict(n=13, prompt=(1831, 2783), output=(123, 138), gap=3.0), trace_of="mfuzz5_0018", num_blocks=60,
    block_size=1040, enable_prefix_caching=True, max_num_batched_tokens=512, max_num_seqs=4,
    prefix_cache_retention_interval=1040, num_speculative_tokens=3, spec_acceptance_rate=0.3)
LONG_PREFIXES = (2600, 4200, 6500)
"""``mamba_align_long_prefix``'s three system prompts, in tokens (2.5 to 6.25 blocks of 1,040)."""

MAMBA_GROUPS = 6
"""Nemotron-H-8B's Mamba KV cache groups (24 Mamba layers in groups of its 4 attention layers)."""


def write_long_prefix_trace(path: Path, prefixes: tuple[int, ...] = LONG_PREFIXES) -> None:
    """``mamba_align_long_prefix``'s trace: 70 arrivals a few seconds apart, each a fresh prompt (one in four) or
    one of ``prefixes`` (`LONG_PREFIXES`, or a case's ``trace["prefixes"]``) with a tail, or, three times in ten,
    the prefix alone arriving twice at once (the same draws whatever the prefixes)."""
    import csv

    import numpy as np

    rng = np.random.default_rng(7)
    t, rows = 0, []
    for i in range(70):
        t += int(rng.integers(0, 3)) if i else 0
        g = int(rng.integers(0, 4))
        out_tokens = int(rng.integers(20, 300))
        if g == 3:
            rows.append([t, int(rng.integers(500, 5000)), out_tokens, "", ""])
            continue
        same = rng.random() < 0.3
        prompt = prefixes[g] if same else prefixes[g] + int(rng.integers(100, 3000))
        rows.append([t, prompt, out_tokens, f"system-{chr(97 + g)}", prefixes[g]])
        if same:
            rows.append([t, prompt, int(rng.integers(20, 300)), f"system-{chr(97 + g)}", prefixes[g]])
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["arrival_time_s", "prompt_tokens", "output_tokens", "prefix_group", "prefix_len"])
        w.writerows(rows)


def write_references(case_table: dict[str, dict], num_mamba_groups: int, default_out: str, description: str,
                     argv: list[str] | None = None) -> None:
    """Write every case of ``case_table`` (or those named on the command line) to ``OUT/CASE/{trace.csv,
    settings.json, steps.csv.gz, requests.csv}``, or with ``--async-scheduling`` vLLM's async run of each to
    ``OUT/async/CASE`` (`write_async`: with drafts too, and their ``spec.json``; the ``*_spec_K`` cases with
    ``--out tests/sim/data/vllm_oracle_mamba_spec``); the scheduler must be patched (`patch_scheduler`) first."""
    import json

    import cases

    p = argparse.ArgumentParser(description=description)
    p.add_argument("names", nargs="*", default=list(case_table))
    p.add_argument("--out", default=default_out)
    p.add_argument("--async-scheduling", action="store_true",
                   help="vLLM 0.33's default AsyncScheduler and batch queue (`async_gap.run_async`), written to "
                        "OUT/async/CASE (the trace and settings are the synchronous case's)")
    a = p.parse_args(argv)
    cases.CASES |= CASES | case_table  # cases.py's trace writer and settings, for these names too
    for name in a.names:
        out = Path(a.out) / name
        out.mkdir(parents=True, exist_ok=True)
        if a.async_scheduling:  # the synchronous case's trace, vLLM's async engine loop
            write_async(name, out / "trace.csv", Path(a.out) / "async" / name)
            print(name, "async done", flush=True)
            continue
        if "prefixes" in case_table[name].get("trace", {}):
            write_long_prefix_trace(out / "trace.csv", case_table[name]["trace"]["prefixes"])
        elif CASES.get(name, {}).get("trace_of", name) == "mamba_align_long_prefix":
            write_long_prefix_trace(out / "trace.csv")
        else:
            cases.write_trace(name, out / "trace.csv")
        (out / "settings.json").write_text(json.dumps(cases.settings(name) | {"mamba_groups": num_mamba_groups},
                                                      indent=1) + "\n")
        args = cases.driver_args(name, out / "trace.csv", out)
        args.num_speculative_tokens = cases.settings(name).get("num_speculative_tokens", 0)
        args.spec_acceptance_rate = cases.settings(name).get("spec_acceptance_rate", 0.5)
        driver.run(args)
        driver.gzip_steps(out)
        print(name, "done", flush=True)


def write_async(name: str, trace: Path, out: Path) -> None:
    """vLLM's async run of case ``name`` (`async_gap.run_async`: the ``AsyncScheduler`` and its engine's batch queue of
    two) on its synchronous reference's ``trace``, written to ``out`` (step and request rows); with drafts
    (``num_speculative_tokens``) the drafter and rejection sampler played as `async_gap` plays them, the acceptances
    kvsim's, and vLLM's spec decoding counters in ``spec.json``."""
    import json

    import async_gap
    import cases

    args = cases.driver_args(name, trace)
    settings = cases.settings(name)
    args.num_speculative_tokens = settings.get("num_speculative_tokens", 0)
    args.spec_acceptance_rate = settings.get("spec_acceptance_rate", 0.5)
    totals, _, step_rows, request_rows = async_gap.run_async(args)
    async_gap.write_reference(out, step_rows, request_rows)
    if args.num_speculative_tokens:
        (out / "spec.json").write_text(json.dumps(totals["spec"], indent=1) + "\n")


def main() -> None:
    patch_scheduler(MAMBA_GROUPS, first=True)  # Nemotron-H's layer 0 is a Mamba layer
    write_references(CASES, MAMBA_GROUPS, "tests/sim/data/vllm_oracle_mamba", __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
