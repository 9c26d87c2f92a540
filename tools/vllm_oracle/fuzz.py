"""A randomized differential hunt: random small cases through vLLM's real scheduler and through kvsim, compared.

    PYTHONPATH=$PWD python tools/vllm_oracle/fuzz.py --draws 100 --seed 0 [--out /tmp/kvsim-fuzz] \
        [--venv ~/vllm-venv] [--only 3 17 ...]
    PYTHONPATH=$PWD python tools/vllm_oracle/fuzz.py --name NAME --case '{"trace": {...}, "num_blocks": ...}'

The hand-picked cases (``cases.py``) each vary one or two settings; a combination none of them has can hide a
decision kvsim makes differently. Each draw ``i`` picks, from ``numpy.random.default_rng([seed, i])``, a small trace
(``cases.write_trace``'s: plain rows with optional shared-prefix groups, whole repeated prompts, priorities and
``n > 1`` samples, a closed loop of users, or sessions, open-loop or each later turn released by the one
before's finish (`releases.py`); bursts of gap 0 included) and the settings both the driver and
`compare.kvsim_config` take: ``num_blocks`` from barely one request's worth to ample, ``block_size`` 16 or 32,
``max_num_batched_tokens``, ``max_num_seqs``, ``long_prefill_token_threshold``, prefix caching on or off,
``scheduler_reserve_full_isl``, FCFS or priority, a capped ``max_model_len``, a ``watermark``, vLLM's offloading
connector (LRU or ARC, prompt blocks only or not), a sliding-window group beside the full one (window 128, with 0,
dense or periodic ``prefix_cache_retention_interval``), ngram or EAGLE speculative decoding (`spec_cases.as_eagle`),
and vLLM's ``AsyncScheduler`` (``async_gap.run_async``, drafts included). Combinations kvsim refuses (a host
tier with a window group) are not drawn; drafts with one are, ngram and EAGLE, since 2026-12-07 (drawn last);
drafts are drawn with ``n > 1`` samples, and closed loops and released turns at all, since 2026-12-06, and arrivals
released by finishes, and sessions or a host tier with drafts, under async scheduling since 2026-12-07, and
async scheduling with generated blocks offloaded since later that day, and a trace's own prefix hashes
(``hash_units``, on traces without groups or sessions) after it, both drawn last (draws with samples, sessions or
releases, and some others, differ from those of earlier seeds).

The vLLM side runs in vLLM's venv (``--venv``; this script runs itself there with ``--oracle``), writing each case
as ``run_oracle.py`` does under ``OUT/NAME``; as each case lands kvsim replays it, fast-forwarding and step by step,
and one line per case says ``exact`` or the first difference: the metric (`compare.METRICS`), the request and the
step where kvsim and vLLM first part (the earliest step at which the two step series, or a request's first-token or
finish step, differ). ``--case`` runs one case given as JSON (to shrink a draw; its ``--name`` seeds its trace, as a
name in ``cases.py`` does), which becomes a permanent parity case by adding it to ``cases.py``.

Covered (2026-12-06, vLLM 0.33): seeds 7, 8, 9 and 11 (300 draws each) all exact at ede77f8, seed 12 (120) at
a91f6e4, seeds 13 and 14 (150 each) at 505d14b; seed 10, before the watermark fix of ede77f8, 297 exact, one
mismatch (that fix) and two vLLM runs that never end (a sliding-window group with a watermark: vLLM's, not kvsim's);
seed 13 before 505d14b, 149 exact and one mismatch (that fix); seeds 15 and 16 (150 each, before drafts were drawn
with a host tier) all exact. Since drafts are drawn with a host tier and EAGLE drafts without: the draws with ngram
drafts and a host tier of seeds 40 and 41 (21 and 74), all exact once the two bugs below were fixed (EAGLE with a
host tier, 19 of 19 mismatched, is now refused), and seed 42 (150), all exact but three EAGLE draws with a host
tier drawn before that refusal; seed 43 (150) all exact; and the first 80 draws with drafts of seed 44 (26 with
sessions, 10 async, 24 EAGLE), all exact but four EAGLE draws with sessions before their fix; seed 46 (150), all
exact but one EAGLE draw with sessions before its fix. The eleven kvsim bugs found are committed references (``cases.py``'s
``offload_long_prefill_threshold``, ``offload_whole_prompts_few``, ``offload_parallel_sampling_threshold``,
``offload_sessions_watermark``, ``offload_arc_sessions_priority_threshold``, and ``spec_cases.py``'s
``threshold_below_drafts``, ``offload_padded_loads``, ``offload_finished_drafts``, ``sessions`` (accepted drafts
that take requests past their end freed in running order), ``eagle/sessions_fuzz44_0271`` and
``eagle/sessions_fuzz46_0008``). Drafts with fanned-out samples: seed 47's 45 such draws of its first 1,000 (9
with a host tier, 9 async, 16 EAGLE, 16 priority, 15 with rows sampled 12 times), all exact after the two fixes
``spec_cases.py``'s ``parallel_sampling_priority`` and ``eagle/parallel_sampling`` hold. Closed loops and released turns: seeds 48
and 49 (150 each; seed 49's 25 with releases) all exact, and seed 50's 92 draws with releases of its first 500
(32 closed loops, 60 sessions; 22 with drafts, 10 of them EAGLE; 11 with a host tier, 37 with a window group),
all exact; seed 52 (150), after the hybrid async merge, all exact. Seed 53 (150, 2026-12-07) found one mismatch
(``spec_cases.py``'s ``offload_loaded_final_chunk``, fixed) and its 9 draws with releases under async scheduling
exact; seed 54 (150) all exact; seed 55 (150) all exact but one vLLM cannot run (draw 74: a loaded request padded
with 20 placeholder drafts under a long-prefill threshold of 16 trips vLLM's own ``assert num_new_tokens == 1 +
self.num_spec_tokens``, ``v1/core/sched/scheduler.py:1579``); with drafts drawn with a host tier and sessions under
async scheduling, seed 56 (150) all exact, and the 108 draws of seed 57's first 1,500 that are async with releases
(76), drafts and a host tier (23) or drafts and sessions (30), all exact. With EAGLE drawn with a host tier (prompt
blocks only): seed 58's 38 such draws of its first 1,200, all exact but one (``spec_cases.py``'s
``eagle/offload_sessions_fuzz58_0027``, fixed); seed 59's 59 draws of its first 1,500 with drafts and a host tier,
EAGLE or async, all exact; with EAGLE drawn with generated blocks offloaded too, seed 60's 49 draws with EAGLE and a
host tier of its first 1,500 (19 offloading generated blocks, 6 async, 15 with sessions), all exact. With async
scheduling drawn with generated blocks offloaded: seed 61's 38 such draws of its first 1,500 and seed 62's 63 of
its first 3,000 (45 with drafts, 17 EAGLE, 27 with sessions), all exact but one (``spec_cases.py``'s
``ngram_offload_generated_fuzz62_0134_k20``, fixed). With a trace's own prefix hashes drawn (``hash_units``):
seed 63's 66 such draws of its first 400 and seed 64's 119 of its first 800, all exact but seed 64's draw 211
(EAGLE, an LRU host, priorities), whose vLLM run depends on Python's hash seed: PYTHONHASHSEED 1 and 5 give
kvsim's run metric for metric, 0, 2, 3 and 4 another (64 prompt tokens fewer at step 609). Seeds 66 (150) and 67
(1,500), all exact but three vLLM runs: two that never end (kvsim rejects requests needing more than the pool) and
draw 1433 (ngram, an ARC host, released session turns), whose vLLM run depends on Python's hash seed (1 gives kvsim's
run); the 65 and 118 draws of seeds 68 and 69 that are async behind a host tier without drafts (decode runs
fast-forwarded there since 2026-12-07), all exact but seed 69's draw 1581 (LRU host, sessions), hash-seed dependent
too (2 gives kvsim's run). With ngram drafts drawn on window draws (2026-12-07, drawn last): seeds 70, 71 and 72's
63, 392 and 388 such draws, all exact but seed 71's two (``spec_cases.py``'s ``hybrid_accepted_drafts_fuzz71_2639``,
fixed) and one vLLM run that never ends; with EAGLE drawn there too (later that day), seeds 73 and 74's 207 and 153
EAGLE draws on a window group, all exact but one vLLM run that never ends (kvsim rejects a request the pool cannot
hold). Seed 75 (400 draws of every kind) all exact but one draw vLLM cannot run (its long-prefill threshold
assertion) and draw 116 (EAGLE, an ARC host storing generated blocks, async, whole prompts: ``spec_cases.py``'s
``eagle_offload_recompute_tail_fuzz75_0116_k20``, fixed). Seeds 87 (200) and 88 (1,000), 2026-12-07: all exact but
seed 88's draw 873, a vLLM run that never ends (EAGLE on a window group, async, sessions: kvsim rejects three turns
of 1,557 to 1,611 tokens needing 171 to 174 of the 168 usable blocks, the window group's counted at vLLM's own
admission cap, ``SlidingWindowSpec.max_admission_blocks_per_request``: 73 blocks for two batches in flight).
Seed 89 (1,500): all exact but one vLLM run that never ends (draw 797: a window group, ``max_num_seqs`` 1 and a
capped ``max_model_len``) and two mismatches, draws 146 and 1035 (EAGLE, an ARC host of prompt blocks only,
fanned-out samples): kvsim held a drafter group's last full block back from the host while a request decoded, as
vLLM's ``storable_chunks`` does, but with prompt blocks only vLLM caps the offloadable tokens at the prompt
(``_calc_num_offloadable_tokens``), so a request never counts as decoding there and a preempted one re-offers its
prompt's last block; fixed (``spec_cases.py``'s ``offload_prompt_only_fuzz89_1035``), and seed 89 rerun: all exact
but draws 797 and 960, whose vLLM run depends on Python's hash seed (a trace's own prefix hashes, an ARC host: 2,
4 and 5 give kvsim's run, 0, 1 and 3 another).
Seed 90 (1,500), all exact but draw 1134 (ngram, an LRU host, a trace's own prefix hashes), hash-seed dependent
too (0, 2 and 5 give kvsim's run). Seed 91 (1,500), all exact but draw 1071, which vLLM cannot run (20 ngram
drafts, a 16-token long-prefill threshold, an ARC host: vLLM's own assertion, as seed 55's draw 74).
Seed 92 (1,500, vLLM 0.33): all exact but draw 848, which vLLM cannot run (20 ngram drafts under a 16-token
threshold, async: its assertion again), and draw 293 (20 ngram drafts, an ARC host, sessions), whose vLLM run
depends on where Python places its objects: allocating one more object before the run (or 7) changes its outcome,
and kvsim's is one of them (checked by reruns with ``_junk = [object() for _ in range(n)]`` before the driver runs).
Since seed 93 the draws are vLLM 0.34's (``--venv`` with vllm 0.34.0) and draw its cache-aware admission window
last (``cache_aware_admission_window``, ``cache_aware_admission_threshold``; a 0.33 venv refuses those draws).
Seed 93 (400, vLLM 0.34): all exact but draw 266 (20 ngram drafts, an LRU host, sessions), object-placement
dependent as 92's draw 293 (kvsim's run exactly one of vLLM's, fast-forwarded and stepped), and 14 draws with an
EAGLE drafter beside a host tier, where 0.34 hashes blocks with their lookahead token; once kvsim followed
(``docs/vllm-v1.md``, "vLLM 0.34"), 13 of the 14 exact and draw 369 (EAGLE, async, fanned-out samples, an ARC
host storing generated blocks) not: a decoder the step before left out offered the host a block its known tokens
did not hash yet; fixed (``spec_cases.py``'s ``eagle_offload_decoder_fuzz93_0369_k3``), and seed 93 rerun:
400 exact (draw 266 giving kvsim's outcome that time).
Since seed 94 the draws also draw the prefill cadence (``prefill_schedule_interval``) and the long-prefill
threshold's adaptive floor (``long_prefill_token_threshold_adaptive``), last; since seed 95 an admission cap
below ``max_num_seqs`` (``max_num_active_seqs``) after them.
Seed 94 (400, vLLM 0.34; 134 draws with a cadence, 66 with the adaptive threshold): all exact. Seed 95 (1,000):
all exact but draws 29 (a vLLM run that never ends: the priority policy and fanned-out children) and 553 (vLLM's
own assertion: 20 ngram drafts under a 16-token threshold), draw 512 (EAGLE, async, an ARC host), whose vLLM run
depends on object placement (one extra object before the run gives kvsim's outcome, byte for byte), and draw 448
(fanned-out samples, async, an ARC host storing generated blocks): a decoder a halted running loop left out had
its last block, all prompt, hidden from admissions' lookups as if its last token were in flight, and cached again
behind a later twin; fixed (``cases.py``'s ``offload_fanout_halted_decoders``, async reference), exact after it.
Seed 96 (600): all exact but draw 296 (a vLLM run that never ends) and draw 370 (3 ngram drafts, sessions, a
16-block LRU host): a turn finished and the engine idled, and kvsim ranked the turn's host blocks anew only at its
next planned step, after that step's lookups, where vLLM schedules once more at once (its finished request to
report); fixed (``spec_cases.py``'s ``offload_lru_idle_finish_fuzz96_0370``), exact after it. Seed 97 (400), all
exact but draw 191 (a vLLM run that never ends: the priority policy and fanned-out children).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import cases  # noqa: E402

WINDOW = 128
"""The only sliding window `compare.kvsim_config` maps (its hybrid model's)."""


def draw(seed: int, i: int) -> dict:
    """Draw ``i`` of ``seed``: a `cases.CASES` entry (trace parameters, then vLLM settings) plus, where drawn,
    what `cases.driver_args` does not pass on: ``async_scheduling``, ``num_speculative_tokens`` and
    ``spec_acceptance_rate``."""
    rng = np.random.default_rng([seed, i])
    coin = lambda p: bool(rng.random() < p)  # noqa: E731
    bs = int(rng.choice([16, 32]))
    hybrid = coin(0.3)
    offload = not hybrid and coin(0.25)
    sessions = coin(0.25)
    priority = coin(0.3)
    case: dict = {}
    if sessions:
        lo, olo = int(rng.integers(1, 300)), int(rng.integers(1, 100))
        trace = dict(n=int(rng.integers(3, 13)), prompt=(lo, lo + int(rng.integers(0, 300))),
                     output=(olo, olo + int(rng.integers(0, 200))), turns=int(rng.integers(2, 5)))
        tlo = int(rng.integers(0, 20))
        trace["turn_gap"] = (tlo, tlo + int(rng.integers(0, 80)))
        if coin(0.4):  # each later turn released by the turn before's finish, whole steps after it
            trace["think"] = (tlo // 4, tlo // 4 + int(rng.integers(0, 30)))
        max_prompt = trace["turns"] * (trace["prompt"][1] + trace["output"][1])
    else:
        groups = int(rng.integers(1, 5)) if coin(0.4) else 0
        lo = int(rng.integers(260 if groups else 1, 500))  # a group's prefix (100 to 259 tokens) fits every prompt
        olo = int(rng.integers(1, 150))
        trace = dict(n=int(rng.integers(8, 41)), prompt=(lo, lo + int(rng.integers(0, 1500))),
                     output=(olo, olo + int(rng.integers(0, 300))))
        if groups:
            trace["groups"] = groups
            if coin(0.3):
                trace["whole_prompts"] = True
        if coin(0.2):
            trace["samples"] = [(1, 2, 4), (1, 3), (1, 2, 12), (2, 5)][int(rng.integers(0, 4))]
            case["parallel_sampling"] = "fan-out"
        elif coin(0.15):  # a closed loop of users (kvsim runs its rows sampled once; samples would be forks)
            trace["users"], trace["think"] = int(rng.integers(1, 41)), int(rng.integers(0, 6))
        max_prompt = max(trace["prompt"][1], 480)
    trace["gap"] = 0.0 if coin(0.2) else float(rng.choice([0.1, 0.3, 1.0, 3.0, 10.0]))
    if priority:
        trace["priorities"] = int(rng.integers(2, 5))
        case["scheduling_policy"] = "priority"
    case["trace"] = trace
    mnbt = int(rng.choice([128, 256, 512, 1024, 2048, 8192]))
    case |= dict(block_size=bs, max_num_batched_tokens=mnbt,
                 max_num_seqs=int(min(mnbt, rng.choice([1, 2, 4, 8, 32, 256]))),
                 enable_prefix_caching=offload or coin(0.75), scheduler_reserve_full_isl=coin(0.7))
    max_output = trace["output"][1]
    if coin(0.25):  # outputs that run past max_model_len are cut there
        case["max_model_len"] = max_prompt + int(rng.integers(1, max_output + 1))
    if coin(0.4):  # vLLM refuses a threshold above max_model_len
        case["long_prefill_token_threshold"] = min(int(rng.choice([16, 64, 128, 256, 1000])),
                                                   case.get("max_model_len", 16384))
    longest = min(case.get("max_model_len", 16384), max_prompt + max_output)
    spec = not hybrid and coin(0.45)
    if spec:
        case["num_speculative_tokens"] = int(rng.choice([1, 2, 3, 5, 20]))
        case["spec_acceptance_rate"] = float(rng.choice([0.3, 0.5, 0.8, 0.95]))
        case["max_num_batched_tokens"] = max(mnbt, case["num_speculative_tokens"] + 1)
        longest += case["num_speculative_tokens"]
        if coin(0.4):  # an EAGLE drafter (`spec_cases.as_eagle`): lookahead slots and hashes
            case["method"] = "eagle"
            longest += case["num_speculative_tokens"]
    need = -(-longest // bs) + 1
    if hybrid:  # the window group's blocks beside the full group's
        case["sliding_window"] = WINDOW
        need += min(need, -(-(WINDOW - 1 + mnbt) // bs) + 1) + 1
        case["prefix_cache_retention_interval"] = [0, 0, None, 2 * bs, 4 * bs, 8 * bs][int(rng.integers(0, 6))]
    factor = float(rng.uniform(1.0, 1.6)) if coin(0.4) else float(np.exp(rng.uniform(np.log(1.6), np.log(30))))
    case["num_blocks"] = int(np.ceil(need * factor)) + 1
    if offload:
        case["cpu_offload_blocks"] = max(4, int(case["num_blocks"] * np.exp(rng.uniform(np.log(0.2), np.log(5)))))
        case["offload_eviction_policy"] = str(rng.choice(["lru", "arc"]))
        case["offload_prompt_only"] = coin(0.7)
    if case.get("offload_prompt_only", True) and coin(0.25):
        case["async_scheduling"] = True
    if coin(0.15):  # vLLM's SchedulerConfig.watermark (kvsim: --watermark)
        case["watermark"] = float(rng.choice([0.01, 0.05, 0.1]))
    if not case.get("offload_prompt_only", True) and coin(0.4):  # drawn last: the draws before keep their cases
        case["async_scheduling"] = True
    if "turns" not in trace and not trace.get("groups") and coin(0.3):  # a trace's own prefix hashes
        trace["hash_units"] = int(rng.choice([16, 40, 64, 100]))
    if hybrid and coin(0.45):  # ngram drafts beside a window group (drawn last: the draws before keep their cases)
        k = int(rng.choice([1, 2, 3, 5, 20]))
        case["num_speculative_tokens"], case["spec_acceptance_rate"] = k, float(rng.choice([0.3, 0.5, 0.8, 0.95]))
        case["max_num_batched_tokens"] = max(mnbt, k + 1)
        case["num_blocks"] += 2 * -(-k // bs)  # each group's blocks for the drafts past the longest request
        if coin(0.4):  # an EAGLE drafter: lookahead slots (as many blocks more) and hashes
            case["method"] = "eagle"
            case["num_blocks"] += 2 * -(-k // bs)
    if not priority and case["enable_prefix_caching"] and coin(0.3):  # vLLM 0.34's cache-aware admission (last)
        case["cache_aware_admission_window"] = int(rng.choice([2, 4, 16, 64]))
        case["cache_aware_admission_threshold"] = float(rng.choice([0.0, 0.3, 0.5, 0.8]))
    if coin(0.35):  # the prefill cadence (drawn last, as the window before it)
        case["prefill_schedule_interval"] = int(rng.choice([2, 3, 4, 8]))
    if case.get("long_prefill_token_threshold") and coin(0.4):  # the threshold floored at a fair share
        case["long_prefill_token_threshold_adaptive"] = True
    if case["max_num_seqs"] > 1 and coin(0.15):  # admissions capped below max_num_seqs
        case["max_num_active_seqs"] = int(rng.integers(1, case["max_num_seqs"]))
    return case


def register_draws(prefix: str, draw_case, seed: int, indices: list[int]) -> list[str]:
    """Add ``draw_case(seed, i)`` for each index to `cases.CASES` as ``{prefix}{seed}_{i:04d}`` (so that
    `cases.write_trace` and `cases.settings` take them, the name seeding the trace); their names. Every fuzzer's."""
    names = []
    for i in indices:
        name = f"{prefix}{seed}_{i:04d}"
        cases.CASES[name] = draw_case(seed, i)
        names.append(name)
    return names


def register(seed: int, indices: list[int]) -> list[str]:
    """This fuzzer's draws in `cases.CASES` (`register_draws`); their names."""
    return register_draws("fuzz", draw, seed, indices)


def oracle(names: list[str], out: Path) -> None:
    """Run every draw through vLLM's scheduler (in vLLM's venv), printing ``FUZZ NAME ok`` or ``FUZZ NAME error``
    as each lands."""
    import async_gap
    import driver
    import spec_cases
    import vllm.v1.core.sched.async_scheduler as async_sched
    import vllm.v1.core.sched.scheduler as sched

    originals = sched.Scheduler, async_sched.AsyncScheduler
    for name in names:
        sched.Scheduler, async_sched.AsyncScheduler = originals  # `spec_cases.as_eagle` patches them for one draw
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        cases.write_trace(name, d / "trace.csv")
        s = cases.settings(name)  # the harness's keys included
        (d / "settings.json").write_text(json.dumps(s, indent=1) + "\n")
        args = cases.driver_args(name, d / "trace.csv", d)
        args.max_steps = 100_000
        args.num_speculative_tokens = s.get("num_speculative_tokens", 0)
        args.spec_acceptance_rate = s.get("spec_acceptance_rate", 0.5)
        if s.get("method") == "eagle":
            spec_cases.as_eagle()
        try:
            if s.get("async_scheduling"):
                *_, step_rows, request_rows = async_gap.run_async(args)
                async_gap.write_reference(d, step_rows, request_rows)
            else:
                driver.run(args)
                driver.gzip_steps(d)
        except (SystemExit, Exception) as e:  # noqa: BLE001 - a draw vLLM cannot run is reported, not fatal
            print(f"FUZZ {name} error vLLM: {type(e).__name__}: {e}", flush=True)
            continue
        print(f"FUZZ {name} ok", flush=True)


def kvsim_run(case: Path, *, step_by_step: bool) -> tuple[dict, object]:
    """kvsim's `compare.METRICS` for the case (its async run's steps counted to the run's end, as
    ``tests/sim/test_sim_async_scheduling.py`` counts them), and the run."""
    import compare

    from sim.kernel.runner import run_config

    s = json.loads((case / "settings.json").read_text())
    result = run_config(compare.kvsim_config(s, case / "trace.csv", step_by_step=step_by_step), warn=False)
    req = result.requests
    if req["rejected"].any():
        raise AssertionError(f"kvsim rejected {int(req['rejected'].sum())} requests "
                             f"({sorted(set(req.loc[req['rejected'], 'reject_reason']))})")
    return compare.run_metrics(result, compare.total_steps(result, s.get("async_scheduling", False))), result


def step_series(result, total: int) -> dict[str, np.ndarray]:
    """kvsim's steps as the driver's per-step rows: running requests, prefill tokens and preemptions so far
    (a fast-forwarded row's running count on each of its steps, its prefill and preemptions on its first)."""
    running, prefill, preempted = (np.zeros(total, np.int64) for _ in range(3))
    for t, n, r, p, q in zip(np.rint(result.steps["time_s"]).astype(int), result.steps["num_steps"],
                             result.steps["running"], result.steps["prefill_tokens"], result.steps["preempted"],
                             strict=True):
        if t < total:
            running[t:t + n] = r
            prefill[t] += p
            preempted[t] += q
    return {"running": running, "prefill_tokens": prefill, "preemptions": np.cumsum(preempted)}


def first_divergence(ours: dict, theirs: dict, series: dict[str, np.ndarray], case: Path) -> str:
    """'' when every metric is equal; else the first differing metric, and where kvsim and vLLM first part."""
    import compare
    import pandas as pd

    diff = compare.differences(ours, theirs)
    bad = [m for m in compare.METRICS if diff[m]]
    if not bad:
        return ""
    where = []
    for m in ("first_token_steps", "finish_steps"):
        idx = np.flatnonzero(ours[m] != theirs[m])
        if len(idx):
            i = idx[np.argmin(np.minimum(ours[m][idx], theirs[m][idx]))]
            where.append((int(min(ours[m][i], theirs[m][i])),
                          f"request {i} {m[:-1]} kvsim {ours[m][i]} vs vLLM {theirs[m][i]}"))
    vllm = pd.read_csv(case / "steps.csv.gz")
    for col, values in series.items():
        theirs_col = vllm[col].to_numpy(np.int64)
        n = min(len(values), len(theirs_col))
        idx = np.flatnonzero(values[:n] != theirs_col[:n])
        if len(idx):
            t = int(idx[0])
            where.append((t, f"step {t} {col} kvsim {values[t]} vs vLLM {theirs_col[t]}"))
    for m in ("request_preemptions", "request_cached_tokens"):
        idx = np.flatnonzero(ours[m] != theirs[m])
        if len(idx):
            where.append((1 << 62, f"request {idx[0]} {m} kvsim {ours[m][idx[0]]} vs vLLM {theirs[m][idx[0]]}"))
    where.sort()
    return f"{bad[0]} ({diff[bad[0]]}); first: {where[0][1] if where else '?'}"


def check(case: Path) -> str:
    """One line for a case vLLM ran: ``exact``, or its first difference (fast-forward, then step by step)."""
    import compare

    theirs = compare.oracle_metrics(case)
    verdicts = []
    for step_by_step in (False, True):
        try:
            ours, result = kvsim_run(case, step_by_step=step_by_step)
        except Exception as e:  # noqa: BLE001 - a refusal or crash is a finding, reported with the draw
            return f"ERROR kvsim{' step by step' if step_by_step else ''}: {type(e).__name__}: {e}"
        series = step_series(result, ours["total_steps"])
        verdicts.append(first_divergence(ours, theirs, series, case))
    fast, slow = verdicts
    if not fast and not slow:
        return "exact"
    if fast == slow:
        return f"MISMATCH {fast}"
    return f"MISMATCH fast-forward: {fast or 'exact'} | step-by-step: {slow or 'exact'}"


def describe(name: str) -> str:
    """The draw's trace and the settings it sets apart from `cases.DEFAULTS`, in one line."""
    case = cases.CASES[name]
    set_ = {k: v for k, v in case.items() if k != "trace" and cases.DEFAULTS.get(k, object()) != v}
    return f"trace={case['trace']} {set_}"


def drive(description: str, *, register, oracle, check, describe, draws: int, out: str, name: str,
          script: str) -> dict[str, int] | None:
    """A fuzzer's command line (this one's and `mamba_fuzz.py`'s): register the draws (or one ``--case``), and in
    vLLM's venv (``--oracle``) run them there; else start that run as a child and, as each case lands, print its
    ``check`` verdict (``describe`` of a draw that is not exact) and at the end the counts, which it returns (None
    on the vLLM side). ``draws``, ``out`` and ``name`` are the defaults of ``--draws``, ``--out`` and ``--name``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--draws", type=int, default=draws)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", type=int, nargs="*", help="these draws' indices only (reproduce one)")
    p.add_argument("--out", default=out)
    p.add_argument("--case", help="run this case instead of draws (a `cases.CASES` entry as JSON; to shrink one)")
    p.add_argument("--name", default=name, help="the --case's name (which seeds its trace, as in cases.py)")
    p.add_argument("--venv", default="~/vllm-venv", help="a venv with vLLM 0.34 (docs/vllm-v1.md, Re-running)")
    p.add_argument("--oracle", action="store_true", help="internal: the vLLM side, run in --venv")
    a = p.parse_args()
    out_dir = Path(a.out)
    if a.case:
        cases.CASES[a.name] = json.loads(a.case)
        names = [a.name]
    else:
        names = register(a.seed, a.only if a.only else list(range(a.draws)))
    if a.oracle:
        oracle(names, out_dir)
        return None
    cmd = [str(Path(a.venv).expanduser() / "bin" / "python"), script, "--oracle", "--seed", str(a.seed), "--out", str(out_dir)]
    cmd += ["--case", a.case, "--name", a.name] if a.case else \
        ["--only", *map(str, a.only)] if a.only else ["--draws", str(a.draws)]
    env = os.environ | {"HF_HUB_OFFLINE": "1"}
    counts = {"exact": 0, "mismatch": 0, "error": 0}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env) as proc:
        for line in proc.stdout:
            if not line.startswith("FUZZ "):
                continue
            _, case, status, *rest = line.split(" ", 3)
            verdict = check(out_dir / case) if status.strip() == "ok" else " ".join(["ERROR", *rest]).strip()
            key = "exact" if verdict == "exact" else "error" if "ERROR" in verdict else "mismatch"
            counts[key] += 1
            print(f"{case}: {verdict}" + ("" if verdict == "exact" else f"\n    {describe(case)}"), flush=True)
    print(f"{sum(counts.values())} draws: {counts['exact']} exact, {counts['mismatch']} mismatched, "
          f"{counts['error']} errors")
    return counts


def main() -> None:
    counts = drive(__doc__.splitlines()[0], register=register, oracle=oracle, check=check, describe=describe,
                   draws=100, out="/tmp/kvsim-fuzz", name="fuzz_case", script=__file__)
    if counts is not None:
        sys.exit(1 if counts["mismatch"] or counts["error"] else 0)


if __name__ == "__main__":
    main()
