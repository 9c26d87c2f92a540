"""A randomized differential hunt over the hybrid recurrent-state paths: random small cases through vLLM's real
scheduler (given Mamba groups as the drivers give them) and through kvsim, compared step for step.

    PYTHONPATH=$PWD python tools/vllm_oracle/mamba_fuzz.py --draws 150 --seed 0 [--out /tmp/kvsim-mamba-fuzz] \
        [--venv ~/vllm-venv] [--only 3 17 ...]
    PYTHONPATH=$PWD python tools/vllm_oracle/mamba_fuzz.py --name NAME --case '{"flavor": "mamba2", ...}'

`fuzz.py` draws attention-only and sliding-window cases; the hybrid drivers (`mamba_driver.py`, `mamba1_driver.py`,
`gdn_driver.py`) hold kvsim to vLLM on hand-picked cases only. Each draw ``i`` picks, from
``numpy.random.default_rng([seed, i])``, a ``flavor`` (`FLAVORS`: Nemotron-H's Mamba-2 with a checkpoint block per
prefill, Jamba's Mamba-1 with none, Qwen3-Next's gated DeltaNet on FlashInfer's block grid (Hopper) or with none
(Triton/FLA)), prefix caching on (``mamba_cache_mode`` "align") or off ("none"), ``num_blocks`` from barely one
request's worth to ample, ``max_num_batched_tokens``, ``max_num_seqs``, ``long_prefill_token_threshold``,
``scheduler_reserve_full_isl``, ``prefix_cache_retention_interval`` (0, a positive multiple of the block, or None
= dense; with prefix caching off 0, None or a multiple of vLLM's lcm(block, max_model_len)), and a trace: rows with
optional shared-prefix groups (or whole repeated prompts), ``n > 1`` samples fanned out, bursts of gap 0, or
`mamba_driver`'s long shared prefixes (several blocks each, identical prompts arriving together). Every draw runs
vLLM's synchronous scheduler; two in five also vLLM's ``AsyncScheduler`` (``async_gap.run_async``; with drafts
since 2026-12-06, drawn after every other field, so earlier seeds' draws keep their settings and gain an async run);
without samples, half the Mamba-2 and gated DeltaNet draws take ngram drafts (prefix caching off: 1 + k state
blocks a request; on: k speculative blocks moving along the Mamba table; `mamba_driver.patch_scheduler` gives
vLLM's spec ``num_speculative_blocks``; half the gated DeltaNet ones take Qwen3-Next's MTP drafter instead,
`gdn_driver.as_mtp`); a quarter of the sampled-once traces carry priorities (vLLM's priority
policy), a fifth of the drawn traces a ``max_model_len`` that cuts the longest outputs, and some draws a
``watermark``.

The vLLM side runs in vLLM's venv (``--venv``; this script runs itself there with ``--oracle``), writing each case
as `mamba_driver.write_references` does (``OUT/NAME``, its async run in ``OUT/async/NAME``). As each lands, kvsim
(the flavor's model, GPU and tensor parallelism, as the parity tests run it) replays it fast-forwarding and step by
step, and one line says ``exact`` or what differs: `mamba_compare.py`'s metrics and step columns (the first step
each column parts at), and the spec counters. ``--case`` runs one case given as JSON (to shrink a draw); a shrunk
case becomes a committed reference by adding it to the flavor's driver. Drafts are not drawn for Mamba-1 or
gated DeltaNet without checkpoints (kvsim refuses them there: `allocators.mamba_layout.check_mamba_speculation`);
with ``n > 1`` samples they are since 2026-12-06 (draws with samples differ from those of earlier seeds), and under
async scheduling since 2026-12-06 (the vLLM side runs the drafts in ``async_gap.run_async`` and writes its spec
decoding counters to ``OUT/async/NAME/spec.json``, which kvsim's async run is held to).

Covered (2026-12-06, vLLM 0.33): an earlier draw (no priorities, no watermark, drafts with prefix caching off
only) for seeds 1 (250 draws) and 2 (200), all exact; this one for seeds 3, 4 and 5 (150 each), 450 exact once
the bugs below were fixed (the 63 draws with drafts and prefix caching on rerun after the last fix); with MTP
drafts and capped ``max_model_len`` drawn, seeds 6 and 7 (150 each: 9 MTP, 47 capped, 57 with drafts, 80 also
async), all exact; with MTP drawn with prefix caching on too, seed 8 (150: 5 MTP, 3 of them with prefix caching
on), all exact; seed 10 (150), all exact but draw 95, which vLLM never ends: a preemption livelock (Jamba with
prefix caching on, a long-prefill threshold of 16 below its 80-token block, 43 blocks, the priority policy:
fan-out children tie on vLLM's victim key, so the one furthest along is preempted before its prefill ends, in
turn), which kvsim followed step for step until it learnt to stop it by rejecting the cycled request with the
reason (`sim.kernel.livelock`; shrunk to three rows, vLLM still cycling after 10,000 steps:
``tests/sim/test_sim_livelock.py``); with drafts drawn with fanned-out samples, seed 12's 60 such draws of its
first 1,500 (32 Mamba-2, 28 gated DeltaNet; 30 with prefix caching on, 17 MTP), all exact; seed 11 (150, drawn before drafts were drawn with samples), all exact;
with drafts under async scheduling (2026-12-06), seed 13's 152 such draws of its first 1,500 and seed 14's 94 of its
first 1,000 (246: 122 Mamba-2, 124 gated DeltaNet; 149 with prefix caching on, 64 MTP, 52 priority, 56 with
fanned-out samples, 33 with a capped max_model_len, 40 with a watermark), all exact once the
rules of ``tests/sim/test_sim_hybrid_async_spec_parity.py`` were ported (found on its references, before the fuzz);
seed 15 (150), all exact; seed 20 (120, 2026-12-07, after window groups took drafts), all exact; seed 26 (200,
later that day), all exact but draw 65, which vLLM never ends: a preemption livelock of seed 10's kind (Jamba,
64-token chunks, 42 blocks, priorities, fanned-out children), which kvsim caught synchronously but, under async
scheduling, followed without end: the victims had cached blocks past their last hit, so the watch was skipped as
for a request that comes back further along, though a Mamba-1 prefill hits none of them (fixed; shrunk to ten
rows in ``tests/sim/test_sim_livelock.py``); seeds 27, 28 and 29 (300 each), all exact;
seed 30 (300), all exact; seed 31 (150) against vLLM 0.34, all exact. Since seed 32 the draws also draw the
prefill cadence (``prefill_schedule_interval``) and the long-prefill threshold's adaptive floor, last: seed 32 (150,
vLLM 0.34; 50 draws with a cadence, 21 with the floor), all exact; seed 33 (150), all exact.
Bugs found and fixed: under async scheduling a finished request preempted while its last output was in flight was left out of
kvsim's waiting count for a step (seed 1, draw 82; ``gdn_driver.py``'s
``gdn_nockpt_align_long_prefix_preempt_finished``); a padded admission with drafts and prefix caching on raised in
kvsim (seeds 3 and 5, five draws; ``mamba_align_padded_admission_spec_3``, ``gdn_align_padded_admission_spec_3``);
a verification whose accepted drafts crossed a block boundary mid-step left that state uncached, which vLLM caches
(seed 3, draw 116; ``gdn_align_long_prefix_spec_5_retention_576``).
One harness fault (seed 1, draw 141): vLLM's driver rows idle steps, kvsim does not (`first_step` places them).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import cases  # noqa: E402
import fuzz  # noqa: E402

LONG_PREFIX = "mamba_align_long_prefix"
"""`mamba_driver`'s long shared-prefix trace (``trace_of`` this name)."""

FLAVORS: dict[str, dict] = {
    # Mamba groups, whether they come before the attention group, block size with prefix caching on / off, and
    # kvsim's model, GPU and tensor parallelism for the same pool (the parity tests')
    "mamba2": dict(groups=6, block_size={True: 1040, False: 1040}, kvsim=dict(model="nemotron-h-8b")),
    "mamba1": dict(groups=7, block_size={True: 80, False: 80}, kvsim=dict(model="jamba-1.5-mini")),
    "gdn": dict(groups=3, block_size={True: 576, False: 544},
                kvsim=dict(model="qwen3-next-80b-a3b", gpu="h200", tensor_parallel=2)),
    "gdn_nockpt": dict(groups=3, block_size={True: 272, False: 272},
                       kvsim=dict(model="qwen3-next-80b-a3b", gpu="a100-80gb", tensor_parallel=4)),
}
"""The drivers' hybrid pools: ``mamba_driver.py`` (Mamba-2), ``mamba1_driver.py``, ``gdn_driver.py`` (with and
without ``--no-checkpoint``)."""

SPEC_FLAVORS = ("mamba2", "gdn")
"""The flavors whose driver spec carries ``num_speculative_blocks`` (`mamba_driver.patch_scheduler`)."""

MTP_FLAVORS = ("gdn",)
"""The flavors with an MTP drafter (Qwen3-Next's, `gdn_driver.as_mtp`: prefix caching off, or on where its layers
export prefill checkpoints)."""


def draw(seed: int, i: int) -> dict:
    """Draw ``i`` of ``seed``: a `cases.CASES` entry plus ``flavor``, and where drawn ``async_scheduling``,
    ``num_speculative_tokens`` and ``spec_acceptance_rate``."""
    rng = np.random.default_rng([seed, i])
    coin = lambda p: bool(rng.random() < p)  # noqa: E731
    flavor = str(rng.choice(list(FLAVORS)))
    pc = coin(0.65)
    bs = FLAVORS[flavor]["block_size"][pc]
    case: dict = dict(flavor=flavor, enable_prefix_caching=pc, block_size=bs)
    if coin(0.15):  # a fixed trace: 70 arrivals, three prefixes of 2,600 to 6,500 tokens
        case |= dict(trace=dict(n=0), trace_of=LONG_PREFIX)
        longest = 6500 + 3000 + 300
    else:
        groups = int(rng.integers(1, 5)) if coin(0.4) else 0
        lo = int(rng.integers(260 if groups else 1, 260 + 2 * bs))  # a group's prefix (100-259 tokens) fits
        olo = int(rng.integers(1, 150))
        trace = dict(n=int(rng.integers(4, 31)), prompt=(lo, lo + int(rng.integers(0, 3 * bs + 500))),
                     output=(olo, olo + int(rng.integers(0, 300))))
        if groups:
            trace["groups"] = groups
            if coin(0.3):
                trace["whole_prompts"] = True
        if coin(0.2):
            trace["samples"] = [(1, 2, 4), (1, 3), (2, 5)][int(rng.integers(0, 3))]
            case["parallel_sampling"] = "fan-out"
        trace["gap"] = 0.0 if coin(0.25) else float(rng.choice([0.3, 1.0, 3.0, 10.0]))
        case["trace"] = trace
        # a whole prompt is its group's prefix, up to 464 tokens (`cases.write_trace`), which may pass the range
        top = max(trace["prompt"][1], 480) if trace.get("whole_prompts") else trace["prompt"][1]
        longest = top + trace["output"][1]
        if coin(0.2):  # outputs that run past max_model_len are cut there
            case["max_model_len"] = top + int(rng.integers(1, trace["output"][1] + 1))
            longest = case["max_model_len"]
    max_model_len = case.get("max_model_len", 16384)
    mnbt = int(rng.choice([128, 256, 512, 1024, 2048, 8192]))
    case |= dict(max_num_batched_tokens=mnbt, max_num_seqs=int(min(mnbt, rng.choice([1, 2, 4, 8, 32, 256]))),
                 scheduler_reserve_full_isl=coin(0.7))
    if coin(0.35):  # vLLM refuses a threshold above max_model_len
        case["long_prefill_token_threshold"] = min(int(rng.choice([16, 64, 256, 1000])), max_model_len)
    if pc:
        case["prefix_cache_retention_interval"] = [0, 0, None, bs, 2 * bs, 4 * bs][int(rng.integers(0, 6))]
    else:  # vLLM accepts a multiple of its scheduler block, lcm(block, max_model_len)
        case["prefix_cache_retention_interval"] = [0, 0, None, math.lcm(bs, max_model_len)][int(rng.integers(0, 4))]
    k = 0
    if flavor in SPEC_FLAVORS and coin(0.5):
        k = int(rng.choice([1, 2, 3, 5]))
        case |= dict(num_speculative_tokens=k, spec_acceptance_rate=float(rng.choice([0.3, 0.5, 0.8])))
        case["max_num_batched_tokens"] = max(mnbt, k + 1)
        longest += k
        if flavor in MTP_FLAVORS and coin(0.5):
            case["method"] = "mtp"
    # a request's attention blocks and, per Mamba group, its state blocks (running, checkpoint, drafts')
    need = -(-longest // bs) + 1 + FLAVORS[flavor]["groups"] * (3 + k)
    factor = float(rng.uniform(1.0, 1.6)) if coin(0.55) else float(np.exp(rng.uniform(np.log(1.6), np.log(20))))
    case["num_blocks"] = int(np.ceil(need * factor)) + 1
    if not k and coin(0.4):
        case["async_scheduling"] = True
    if case.get("trace", {}).get("n") and coin(0.25):
        case["trace"]["priorities"] = int(rng.integers(2, 5))
        case["scheduling_policy"] = "priority"
    if coin(0.15):  # vLLM's SchedulerConfig.watermark (kvsim: --watermark)
        case["watermark"] = float(rng.choice([0.01, 0.05, 0.1]))
    if k and coin(0.4):  # drafts under async scheduling too (drawn last: every earlier field as before)
        case["async_scheduling"] = True
    if coin(0.35):  # the prefill cadence (drawn after: the draws before keep their cases)
        case["prefill_schedule_interval"] = int(rng.choice([2, 3, 4, 8]))
    if case.get("long_prefill_token_threshold") and coin(0.4):  # the threshold floored at a fair share
        case["long_prefill_token_threshold_adaptive"] = True
    return case


def register(seed: int, indices: list[int]) -> list[str]:
    """This fuzzer's draws in `cases.CASES` (`fuzz.register_draws`); their names."""
    return fuzz.register_draws("mfuzz", draw, seed, indices)


def patch(flavor: str, originals: tuple) -> None:
    """Give vLLM's schedulers the flavor's Mamba groups, as its driver does (the unpatched classes restored
    first, so that patches do not stack)."""
    import mamba1_driver
    import mamba_driver
    import vllm.v1.core.sched.async_scheduler as async_sched
    import vllm.v1.core.sched.scheduler as sched

    sched.Scheduler, async_sched.AsyncScheduler = originals
    if flavor == "mamba2":
        mamba_driver.patch_scheduler(FLAVORS[flavor]["groups"], first=True)
    elif flavor == "gdn":
        mamba_driver.patch_scheduler(FLAVORS[flavor]["groups"], first=True, layer="linear_attn",
                                     grid_checkpoints=True)
    else:  # no prefill checkpoint: Mamba-1's spec (`gdn_driver.py --no-checkpoint` sets the count)
        mamba1_driver.MAMBA1_GROUPS = FLAVORS[flavor]["groups"]
        mamba1_driver.patch_scheduler()


def oracle(names: list[str], out: Path) -> None:
    """Run every draw through vLLM's scheduler (in vLLM's venv), printing ``FUZZ NAME ok`` or ``FUZZ NAME error``
    as each lands."""
    import async_gap
    import driver
    import gdn_driver
    import mamba_driver
    import vllm.v1.core.sched.async_scheduler as async_sched
    import vllm.v1.core.sched.scheduler as sched

    originals = (sched.Scheduler, async_sched.AsyncScheduler)
    for name in names:
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        s = cases.settings(name)
        try:
            patch(s["flavor"], originals)
            if s.get("method") == "mtp":
                gdn_driver.as_mtp()
            if cases.CASES[name].get("trace_of") == LONG_PREFIX:
                mamba_driver.write_long_prefix_trace(d / "trace.csv")
            else:
                cases.write_trace(name, d / "trace.csv")
            (d / "settings.json").write_text(json.dumps(s | {"mamba_groups": FLAVORS[s["flavor"]]["groups"]},
                                                        indent=1) + "\n")
            args = cases.driver_args(name, d / "trace.csv", d)
            args.max_steps = 100_000
            args.num_speculative_tokens = s.get("num_speculative_tokens", 0)
            args.spec_acceptance_rate = s.get("spec_acceptance_rate", 0.5)
            driver.run(args)
            driver.gzip_steps(d)
            if s.get("async_scheduling"):
                args = cases.driver_args(name, d / "trace.csv", d)
                args.max_steps = 100_000
                args.num_speculative_tokens = s.get("num_speculative_tokens", 0)
                args.spec_acceptance_rate = s.get("spec_acceptance_rate", 0.5)
                totals, _, step_rows, request_rows = async_gap.run_async(args)
                async_gap.write_reference(out / "async" / name, step_rows, request_rows)
                if args.num_speculative_tokens:
                    (out / "async" / name / "spec.json").write_text(json.dumps(totals["spec"], indent=1) + "\n")
        except (SystemExit, Exception) as e:  # noqa: BLE001 - a draw vLLM cannot run is reported, not fatal
            print(f"FUZZ {name} error vLLM: {type(e).__name__}: {e}", flush=True)
            continue
        print(f"FUZZ {name} ok", flush=True)


def kvsim_run(case: Path, *, step_by_step: bool, asynchronous: bool):
    """kvsim's run of the case on its flavor's model (`mamba_compare.kvsim_config`), refusing rejections."""
    import mamba_compare

    from sim.kernel.runner import run_config

    s = json.loads((case / "settings.json").read_text())
    config = mamba_compare.kvsim_config(s, case / "trace.csv", step_by_step=step_by_step, asynchronous=asynchronous)
    result = run_config(dataclasses.replace(config, **FLAVORS[s["flavor"]]["kvsim"]), warn=False)
    req = result.requests
    if req["rejected"].any():
        raise AssertionError(f"kvsim rejected {int(req['rejected'].sum())} requests "
                             f"({sorted(set(req.loc[req['rejected'], 'reject_reason']))})")
    return result


def first_step(result, case: Path, *, asynchronous: bool) -> str:
    """The first engine step where a step-by-step run's `mamba_compare.step_columns` part from vLLM's ('' if
    none). vLLM's driver writes a row for every step, an idle one too (a gap in the trace); kvsim none for an idle
    stretch, so its rows are placed at their start times (a step a second) and vLLM's rows kvsim has none for
    must be idle: nothing running, waiting or computed."""
    import mamba_compare
    import pandas as pd

    theirs = pd.read_csv(mamba_compare.reference(case, asynchronous=asynchronous) / "steps.csv.gz")
    ours = result.steps[result.steps["num_steps"] > 0]
    at = np.rint(ours["time_s"].to_numpy()).astype(np.int64)
    where = []
    if len(at) and at[-1] >= len(theirs):
        where.append((len(theirs), f"kvsim runs past vLLM's {len(theirs)} steps"))
    at = at[at < len(theirs)]
    for column, their_column in mamba_compare.step_columns(case).items():
        a, b = ours[column].to_numpy(np.int64)[:len(at)], theirs[their_column].to_numpy(np.int64)[at]
        bad = np.flatnonzero(a != b)
        if len(bad):
            where.append((int(at[bad[0]]), f"step {at[bad[0]]} {column} kvsim {a[bad[0]]} vs vLLM {b[bad[0]]}"))
    idle = np.ones(len(theirs), bool)
    idle[at] = False
    busy = idle & (theirs[["running", "waiting", "prefill_tokens", "decode_tokens"]].to_numpy().sum(axis=1) > 0)
    if busy.any():
        where.append((int(np.argmax(busy)), f"step {np.argmax(busy)}: kvsim idle, vLLM not"))
    return min(where)[1] if where else ""


def differences(case: Path, *, asynchronous: bool) -> str:
    """What differs from vLLM's run ('' when exact; `mamba_compare.py`'s checks): the metrics that differ in
    the fast-forward and in the step-by-step run, the first step where a step column parts, the spec counters."""
    import mamba_compare

    compare = mamba_compare.compare
    theirs = compare.oracle_metrics(mamba_compare.reference(case, asynchronous=asynchronous))
    parts = []
    for step_by_step in (False, True):
        result = kvsim_run(case, step_by_step=step_by_step, asynchronous=asynchronous)
        diff = compare.differences(mamba_compare.metrics(result, asynchronous=asynchronous), theirs)
        bad = [f"{k} ({v})" if k in ("total_steps", "preemptions") else k for k, v in diff.items() if v]
        if bad:
            parts.append(f"{'step-by-step' if step_by_step else 'fast-forward'}: {', '.join(bad)}")
    where = first_step(result, case, asynchronous=asynchronous)
    if where:
        parts.append(f"first: {where}")
    spec = {k: v for k, v in mamba_compare.spec_differences(
        result, mamba_compare.reference(case, asynchronous=asynchronous)).items() if v}
    if spec:
        parts.append(f"spec: {spec}")
    return "; ".join(parts)


def check(case: Path) -> str:
    """One line for a case vLLM ran: ``exact``, or what differs, synchronous then async."""
    verdicts = []
    settings = json.loads((case / "settings.json").read_text())
    for asynchronous in (False, True) if settings.get("async_scheduling") else (False,):
        tag = "async " if asynchronous else ""
        try:
            bad = differences(case, asynchronous=asynchronous)
        except Exception as e:  # noqa: BLE001 - a refusal or crash is a finding, reported with the draw
            verdicts.append(f"ERROR {tag}kvsim: {type(e).__name__}: {e}")
            continue
        if bad:
            verdicts.append(f"MISMATCH {tag}{bad}")
    return " | ".join(verdicts) or "exact"


def describe(name: str) -> str:
    """The draw's fields that `cases.DEFAULTS` does not set, as JSON (to pass back as ``--case``)."""
    return json.dumps({k: v for k, v in cases.CASES[name].items() if cases.DEFAULTS.get(k, object()) != v})


def main() -> None:
    fuzz.drive(__doc__.splitlines()[0], register=register, oracle=oracle, check=check, describe=describe,
               draws=150, out="/tmp/kvsim-mamba-fuzz", name="mfuzz_case", script=__file__)


if __name__ == "__main__":
    main()
