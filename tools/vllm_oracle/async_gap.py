"""How far vLLM's default engine loop is from the synchronous scheduler kvsim models: the cases again, run by
vLLM's ``AsyncScheduler`` with its engine's batch queue, against the committed (synchronous) references.

vLLM 0.33 turns ``async_scheduling`` on by default for generative models (``VllmConfig``: None becomes True
unless something is incompatible). Its engine (``EngineCore.step_with_batch_queue``, a queue of two batches)
schedules step t + 1 before it processes step t's output, so a request finished by step t gives its blocks and
its ``max_num_seqs`` seat back only after step t + 1 was scheduled; the ``AsyncScheduler`` skips the step it knows
reaches ``max_tokens``, so no token is wasted. kvsim, and the references it matches exactly, run the synchronous
scheduler (``async_scheduling=False``). This prints the gap per case::

    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_oracle/async_gap.py [--write] [CASE ...]

``--write`` also writes each case's async reference, ``tests/sim/data/vllm_oracle/async/CASE/{steps.csv.gz,
requests.csv}`` in the synchronous references' format (the trace and settings are the synchronous case's), which
kvsim's ``--async-scheduling`` is compared with (``tests/sim/test_sim_async_scheduling.py``). A request's
``first_token_step`` is the step that samples its first token, its ``finish_step`` the step whose output finished
it; a step row is taken once the step is scheduled, before the previous step's output is processed (so it counts
the requests that output finishes as running, and their blocks as used).

Steps are counted as the engine schedules them (the last, empty one that drains the queue included). A row
sampled ``n`` times is ``n`` child requests added together, as vLLM's engine adds them (`driver.make_requests`);
a session turn emits the output its next turn's prompt holds (its token is the request's last placeholder); the
offloading connector's loads and stores a step asks for are reported done in that step's output
(`driver._transfers_done`), which the batch queue processes after the next step is scheduled.

With ``num_speculative_tokens`` set (``spec_cases.py --async-scheduling``) it plays the drafter and rejection
sampler as ``driver.run`` does, the way the engine runs them under async scheduling: no draft ids reach the
scheduler (``EngineCore.post_step`` calls ``update_draft_token_ids`` only without async scheduling,
``vllm/v1/engine/core.py:700-706``); the ``AsyncScheduler`` schedules ``-1`` placeholders for them
(``v1/core/sched/async_scheduler.py:28-49``), which the worker fills with its drafter's tokens. A verification's output is its
accepted drafts and one bonus token, the accepted count drawn as kvsim draws it (``driver.accepted_drafts``),
none for a padded admission's placeholders (a request this step admitted). vLLM's spec decoding counters count a
verification when its output is processed for a request not finished by then (``update_from_output``), stale
outputs of preempted requests included (`count_verifications`).

Left out by default (``LEFT_OUT``): ``offload_arc_small_gpu``, whose async run vLLM itself decides by Python's hash
seed (two loads landing in one step reach the ARC policy in the order of a ``set`` of request ids: PYTHONHASHSEED
1, 3, 4 and 5 give 6,008 steps and 32 preemptions, 0, 2 and 6 give 6,010 and 34).
"""

from __future__ import annotations

import csv
import gzip
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import cases  # noqa: E402
import driver  # noqa: E402
from releases import Releases  # noqa: E402

REFERENCES = Path(__file__).resolve().parents[2] / "tests" / "sim" / "data" / "vllm_oracle"
LEFT_OUT = ("offload_arc_small_gpu",)
"""Cases without an async reference (the module's docstring says why)."""


def run_async(args) -> tuple[dict, dict[int, int], list[dict], list[dict]]:
    """The case's trace through the ``AsyncScheduler``, the engine's batch queue of two played: schedule step t,
    then process step t - 1's output. Returns the totals, each request's finish step (the step whose output
    finished it), the step rows and the request rows (``driver.run``'s columns)."""
    import numpy as np

    args.async_scheduling = True
    scheduler, hasher = driver.build_scheduler(args)
    rows = driver.read_trace(args.trace)
    requests, outputs, parent = driver.make_requests(rows, hasher, args.seed)
    # when each row is added: its arrival, or a finish's release once its output is processed
    releases = Releases(rows, requests, parent)
    token_rng = np.random.default_rng(args.seed + 1)
    stats = driver.new_stats(requests, parent)
    num_spec = getattr(args, "num_speculative_tokens", 0)
    # keyed by the request's position: its row's, a fanned-out child's in kvsim's fanned-out workload (its group index)
    accept = {r.request_id: np.random.default_rng([args.seed, 0x5EC, i]) for i, r in enumerate(requests)}
    spec_totals = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}
    finish: dict[int, int] = {}  # row -> the step whose output finished its last request (a fanned-out row's child)
    finished = 0
    step_rows: list[dict] = []
    added = step = preempted = prefill = running = 0
    in_prefill: set[str] = set()
    pending = None

    def process(batch) -> None:
        nonlocal finished
        if num_spec:
            count_verifications(scheduler, *batch, spec_totals)
        for engine_outputs in scheduler.update_from_output(*batch).values():
            for o in engine_outputs.outputs:
                if o.finish_reason is not None:
                    finish[int(parent[o.request_id])] = step - 1
                    stats[o.request_id]["finish_step"] = step - 1
                    finished += 1
                    releases.finished(int(parent[o.request_id]), step - 1)

    while finished < len(requests):
        # a release of step t - 1's finish, processed after step t was scheduled, is due at t with no think time:
        # it is added for step t + 1
        added += releases.add_due(step, scheduler)
        out = scheduler.schedule()
        preempted += driver.note_schedule(out, scheduler, stats, in_prefill, step)
        req_ids, sampled = list(out.num_scheduled_tokens), []
        # the tokens the step in flight emits for each request, not yet in its output_token_ids
        in_flight = {} if pending is None else dict(zip(pending[1].req_ids, map(len, pending[1].sampled_token_ids), strict=True))
        step_prefill = step_decode = 0
        for req_id in req_ids:
            req = scheduler.requests[req_id]
            drafts = out.scheduled_spec_decode_tokens.get(req_id, ())
            padded = req_id in in_prefill and bool(drafts)  # an admission padded with placeholder drafts
            if req_id in in_prefill:
                step_prefill += out.num_scheduled_tokens[req_id] - len(drafts)
                step_decode += len(drafts)
            else:
                step_decode += out.num_scheduled_tokens[req_id]
            done = req.num_computed_tokens >= req.num_tokens  # advanced by schedule(), placeholders included
            if done:  # a session turn emits the output its next turn's prompt holds: this step's tokens follow
                # those of its output and of the step in flight (a step past its end emits what vLLM drops)
                planned = outputs.get(req_id)
                k = len(req.output_token_ids) + in_flight.get(req_id, 0)
                sampled.append([planned[k] if planned and k < len(planned)
                                else int(token_rng.integers(3, driver.VOCAB))])
                if drafts:  # a verification: its accepted drafts, then the bonus token
                    accepted = 0 if padded else driver.accepted_drafts(accept[req_id], len(drafts), num_spec,
                                                                       args.spec_acceptance_rate)
                    sampled[-1] = token_rng.integers(3, driver.VOCAB, accepted).tolist() + sampled[-1]
                    if planned:  # a session turn's tokens are its planned output (past its end any: vLLM trims)
                        sampled[-1] = (planned[k:k + accepted + 1] + sampled[-1])[:accepted + 1]
            else:
                sampled.append([])
            if done:
                in_prefill.discard(req_id)
                if stats[req_id]["first_token_step"] < 0:
                    stats[req_id]["first_token_step"] = step
        prefill += step_prefill
        running += len(scheduler.running)
        pool = scheduler.kv_cache_manager.block_pool
        step_rows.append({"step": step, "running": len(scheduler.running),
                          "waiting": len(scheduler.waiting) + len(scheduler.kv_holding_waiting)
                          - len(scheduler.deferred_waiting), "prefill_tokens": step_prefill,
                          "decode_tokens": step_decode, "used_blocks": pool.num_gpu_blocks - 1
                          - pool.get_num_free_blocks(), "preemptions": preempted})
        output = driver.model_output(req_ids, sampled)
        if out.kv_connector_metadata is not None:  # the step's transfers, done within it, reported with its output
            output.kv_connector_output = driver._transfers_done(out.kv_connector_metadata)
        if pending is not None:
            process(pending)
        pending = (out, output)
        step += 1
        if not scheduler.has_requests() and added == len(requests):
            process(pending)
            pending = None
        if step > args.max_steps:
            raise SystemExit(f"no end after {args.max_steps} steps")
    totals = {"total_steps": step, "preemptions": preempted, "prefill_tokens": prefill, "mean_running": running / step}
    if num_spec:
        totals["spec"] = spec_totals
    return totals, finish, step_rows, driver.per_row(stats)


def count_verifications(scheduler, out, output, totals: dict[str, int]) -> None:
    """Add the verifications of a step's output (``out``, ``output``), about to be processed, to vLLM's spec decoding
    counters (``totals``) as ``update_from_output`` counts them (``v1/core/sched/scheduler.py:2323-2380``): a request
    finished by an earlier output, its step's output dropped, counts nothing; one preempted since (its output
    stale) still counts."""
    for req_id, drafts in out.scheduled_spec_decode_tokens.items():
        request = scheduler.requests.get(req_id)
        if request is None or request.is_finished():
            continue
        tokens = output.sampled_token_ids[output.req_ids.index(req_id)]
        if tokens:
            totals["num_drafts"] += 1
            totals["num_draft_tokens"] += len(drafts)
            totals["num_accepted_tokens"] += len(tokens) - 1


def write_reference(out: Path, step_rows: list[dict], request_rows: list[dict]) -> None:
    """``steps.csv.gz`` (gzipped as the synchronous references, mtime 0: reruns are byte-identical) and
    ``requests.csv``."""
    import io

    out.mkdir(parents=True, exist_ok=True)
    for name, table in (("steps", step_rows), ("requests", request_rows)):
        buf = io.StringIO(newline="")
        w = csv.DictWriter(buf, fieldnames=list(table[0]), lineterminator="\r\n")
        w.writeheader()
        w.writerows(table)
        if name == "steps":
            with gzip.GzipFile(out / "steps.csv.gz", "wb", 9, mtime=0) as z:
                z.write(buf.getvalue().encode())
        else:
            (out / "requests.csv").write_bytes(buf.getvalue().encode())


def reference(name: str) -> tuple[dict, dict[int, int]]:
    """The committed synchronous reference's totals and finish steps."""
    steps = list(csv.DictReader(gzip.open(REFERENCES / name / "steps.csv.gz", "rt")))
    with open(REFERENCES / name / "requests.csv", newline="") as f:
        finish = {int(r["id"]): int(r["finish_step"]) for r in csv.DictReader(f)}
    return {"total_steps": len(steps), "preemptions": int(steps[-1]["preemptions"]),
            "prefill_tokens": sum(int(r["prefill_tokens"]) for r in steps),
            "mean_running": sum(int(r["running"]) for r in steps) / len(steps)}, finish


def main() -> None:
    write = "--write" in sys.argv[1:]
    names = [a for a in sys.argv[1:] if a != "--write"] or [n for n in cases.CASES if n not in LEFT_OUT]
    print("| case | total_steps sync / async | preemptions | prefill_tokens | mean_running | finish steps later "
          "(mean) | same finish |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        args = cases.driver_args(name, REFERENCES / name / "trace.csv")
        (sync, sync_finish), (asy, async_finish, step_rows, request_rows) = reference(name), run_async(args)
        if write:
            write_reference(REFERENCES / "async" / name, step_rows, request_rows)
        later = [async_finish[i] - sync_finish[i] for i in sync_finish]
        cells = [f"{sync[k]:.3f} / {asy[k]:.3f}" if k == "mean_running" else f"{sync[k]} / {asy[k]}"
                 for k in ("total_steps", "preemptions", "prefill_tokens", "mean_running")]
        print(f"| {name} | {' | '.join(cells)} | {sum(later) / len(later):.1f} | "
              f"{sum(d == 0 for d in later)} of {len(later)} |", flush=True)


if __name__ == "__main__":
    main()
