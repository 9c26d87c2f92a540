"""Drive vLLM v1's real Scheduler + KVCacheManager step by step on a CPU, with fabricated model outputs.

Run with a venv that has vLLM (never a kvsim dependency; see ``docs/vllm-v1.md``)::

    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_oracle/driver.py TRACE.csv OUT_DIR --num-blocks 300 \
        --block-size 16 --max-num-batched-tokens 2048 --max-num-seqs 256 [--no-prefix-caching] \
        [--long-prefill-token-threshold N] [--no-scheduler-reserve-full-isl] [--scheduling-policy priority] \
        [--cpu-offload-blocks N [--no-offload-prompt-only] [--offload-eviction-policy arc]]

TRACE is a kvsim canonical CSV (arrival_time_s in whole engine steps, prompt_tokens, output_tokens and
optionally prefix_group, prefix_len, priority, or session_id and turn, with think_time_s on the turns its
previous turn's finish releases, or a closed loop's closed_loop_users and think_time_s: `releases.py`; or
prefix_hashes with prefix_hash_tokens, a trace's own hash ids). Token ids are random except a prefix
group's first ``prefix_len`` tokens, which are the same ids for every member, a session turn's prompt, which
starts with the previous turn's prompt and output (each turn's output ids are drawn up front and emitted as
sampled), and each unit of ``prefix_hash_tokens`` tokens with a hash id, drawn from the ids up to it (the same
tokens after the same ids, as kvsim chains them). Writes ``steps.csv`` (one row per engine step, empty steps
included; ``waiting`` as vLLM counts ``num_requests_waiting``) and ``requests.csv`` (one row per request).

``--cpu-offload-blocks N`` adds vLLM's ``OffloadingConnector`` with its CPU spec (N host blocks, LRU by default) and plays its
worker: every load and store a step asks for is reported done in that step's output (kvsim with ``--step-time 1``,
``--offload-write-policy write_through`` and ``--offload-loads async``, whose loads land within a step; the cases
``offload_sessions`` and ``offload_shared_prefix``); ``--offload-eviction-policy arc`` gives the CPU spec vLLM's ARC
policy (kvsim: ``--offload-eviction-policy arc``; the cases ``offload_arc_sessions`` and ``offload_arc_shared_prefix``).

``--num-speculative-tokens K --spec-acceptance-rate P`` gives the scheduler vLLM's ngram speculative decoding
(``SpeculativeConfig(method="ngram")``) and plays its drafter and rejection sampler: after every step, K draft
tokens for each request that sampled (fewer near ``max_model_len``, as ngram caps them;
``update_draft_token_ids``), and a verification's output is its accepted drafts and one bonus token, the accepted
count drawn as kvsim draws it (`accepted_drafts`); placeholder drafts of a padded admission are never accepted.
Writes ``spec.json`` too (vLLM's ``SpecDecodingStats`` counters summed; ``spec_cases.py`` runs the cases).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from releases import Releases  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
VOCAB = 32000


def _model_dir(max_model_len: int) -> str:
    """A one-layer Llama config.json: ModelConfig reads it and downloads nothing."""
    d = tempfile.mkdtemp(prefix="kvsim-oracle-model-")
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
              "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
              "num_hidden_layers": 1, "vocab_size": VOCAB, "max_position_embeddings": max_model_len,
              "torch_dtype": "float16", "bos_token_id": 1, "eos_token_id": 2}
    Path(d, "config.json").write_text(json.dumps(config))
    return d


def build_scheduler(args):
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import (
        get_request_block_hasher,
        init_none_hash,
        resolve_kv_cache_block_sizes,
    )
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        KVCacheTensor,
        SlidingWindowSpec,
    )
    from vllm.v1.structured_output import StructuredOutputManager

    model_config = ModelConfig(model=_model_dir(args.max_model_len), skip_tokenizer_init=True,
                               max_model_len=args.max_model_len, dtype="float16")
    asynchronous = getattr(args, "async_scheduling", False)  # vLLM 0.33's default; `async_gap.py` runs it
    sched_kwargs = dict(enable_chunked_prefill=True, async_scheduling=asynchronous, max_num_seqs=args.max_num_seqs,
                        max_num_batched_tokens=args.max_num_batched_tokens, max_model_len=args.max_model_len,
                        long_prefill_token_threshold=args.long_prefill_token_threshold,
                        scheduler_reserve_full_isl=args.scheduler_reserve_full_isl, policy=args.scheduling_policy,
                        is_encoder_decoder=False)
    if args.watermark:
        sched_kwargs["watermark"] = args.watermark
    if getattr(args, "cache_aware_admission_window", 0):  # vLLM 0.34's, so passed only where set
        sched_kwargs["cache_aware_admission_window"] = args.cache_aware_admission_window
        sched_kwargs["cache_aware_admission_threshold"] = args.cache_aware_admission_threshold
    if getattr(args, "max_num_active_seqs", None):  # the admission cap below max_num_seqs
        sched_kwargs["max_num_active_seqs"] = args.max_num_active_seqs
    if getattr(args, "prefill_schedule_interval", 1) > 1:  # the prefill cadence (`sim.kernel.prefill_cadence`)
        sched_kwargs["prefill_schedule_interval"] = args.prefill_schedule_interval
    if getattr(args, "long_prefill_token_threshold_adaptive", False):
        sched_kwargs["long_prefill_token_threshold_adaptive"] = True
    scheduler_config = SchedulerConfig(**sched_kwargs)
    retention = getattr(args, "prefix_cache_retention_interval", 0)  # vLLM's default; "None": dense
    retention = None if retention in (None, "None") else int(retention)
    cache_config = CacheConfig(block_size=args.block_size, enable_prefix_caching=args.prefix_caching,
                               prefix_cache_retention_interval=retention)
    spec = FullAttentionSpec(block_size=args.block_size, num_kv_heads=4, head_size=32, dtype=torch.float16)
    offload = {}
    if args.cpu_offload_blocks:
        from vllm.config import KVTransferConfig

        host_block = -(-spec.page_size_bytes // 4096) * 4096  # the CPU spec aligns each block to a page
        offload["kv_transfer_config"] = KVTransferConfig(
            kv_connector="OffloadingConnector", kv_role="kv_both",
            kv_connector_extra_config={"cpu_bytes_to_use": host_block * args.cpu_offload_blocks,
                                       "offload_prompt_only": args.offload_prompt_only,
                                       "eviction_policy": args.offload_eviction_policy})
    if getattr(args, "num_speculative_tokens", 0):  # vLLM's --speculative-config '{"method": "ngram", ...}'
        from vllm.config import SpeculativeConfig

        offload["speculative_config"] = SpeculativeConfig(method="ngram",
                                                          num_speculative_tokens=args.num_speculative_tokens)
    vllm_config = VllmConfig(model_config=model_config, scheduler_config=scheduler_config,
                             cache_config=cache_config, device_config=DeviceConfig(device="cpu"), **offload)
    groups = [KVCacheGroupSpec(["layer.0"], spec)]
    window = getattr(args, "sliding_window", 0)
    if window:  # a sliding-window layer first, then the full one: gpt-oss's order (its layer 0 slides)
        sliding = SlidingWindowSpec(block_size=args.block_size, num_kv_heads=4, head_size=32, dtype=torch.float16,
                                    sliding_window=window)
        groups = [KVCacheGroupSpec(["layer.1"], sliding), KVCacheGroupSpec(["layer.0"], spec)]
    chunk = getattr(args, "attention_chunk_size", 0)
    if chunk:  # Llama 4's layout: three chunked-local groups (36 layers in groups of 12), then the full one
        chunked = ChunkedLocalAttentionSpec(block_size=args.block_size, num_kv_heads=4, head_size=32,
                                            dtype=torch.float16, attention_chunk_size=chunk)
        groups = [*(KVCacheGroupSpec([f"layer.{i}"], chunked) for i in (1, 2, 3)), KVCacheGroupSpec(["layer.0"], spec)]
    kv_cache_config = KVCacheConfig(
        num_blocks=args.num_blocks,
        kv_cache_tensors=[KVCacheTensor(size=spec.page_size_bytes * args.num_blocks,
                                        layers=[name for g in groups for name in g.layer_names],
                                        layer_stride=0, block_stride=spec.page_size_bytes)],
        kv_cache_groups=groups,
        # as the engine copies it (``kv_cache_planning.py``): KVCacheConfig's own default (None, dense) is not
        # vLLM's, CacheConfig's 0 (sparse sliding-window retention) is
        prefix_cache_retention_interval=cache_config.prefix_cache_retention_interval,
    )
    cache_config.num_gpu_blocks = args.num_blocks
    block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    scheduler = (AsyncScheduler if asynchronous else Scheduler)(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                          structured_output_manager=StructuredOutputManager(vllm_config), log_stats=False,
                          block_size=block_size, hash_block_size=hash_block_size)
    hash_fn = get_hash_fn_by_name(cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(hash_block_size, hash_fn, vllm_config.num_hash_lookahead_tokens)
    return scheduler, hasher


def read_trace(path: str) -> list[dict]:
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            rows.append({
                "arrival": int(float(row["arrival_time_s"])), "prompt": int(row["prompt_tokens"]),
                "output": int(row["output_tokens"]),
                "group": row.get("prefix_group") or "", "prefix_len": int(row.get("prefix_len") or 0),
                "priority": int(row.get("priority") or 0),
                "session": row.get("session_id") or "", "turn": int(row.get("turn") or 0),
                "n": int(row.get("n") or 1),
                # a session turn's think time (None: it arrives at its time), a closed loop's users and think time
                "think": _think(row) if row.get("session_id") else None,
                "closed_loop_users": int(float(row.get("closed_loop_users") or 0)),
                "closed_loop_think": _think(row) or 0.0 if row.get("closed_loop_users") else 0.0,
                # a trace's own prefix hashes: one id per unit of prefix_hash_tokens prompt tokens
                "hashes": [int(h) for h in (row.get("prefix_hashes") or "").split()],
                "unit": int(row.get("prefix_hash_tokens") or 512),
            })
    return rows


def _think(row: dict) -> float | None:
    """A row's ``think_time_s``, None where empty or NaN."""
    value = float(row.get("think_time_s") or "nan")
    return None if value != value else value


def make_requests(rows: list[dict], hasher, seed: int):
    """The requests to add, in order, with their rows (``parent``): a row sampled ``n > 1`` times is ``n`` child
    requests with its prompt, ``"{k}_{row}"`` as vLLM's engine front end fans it out (``ParentRequest``)."""
    import numpy as np
    from vllm import SamplingParams
    from vllm.v1.request import Request

    rng = np.random.default_rng(seed)
    session_rng = np.random.default_rng(seed + 2)
    prefixes: dict[str, list[int]] = {}
    turns: dict[str, tuple[int, list[int]]] = {}  # session -> (its last turn, that turn's prompt + output ids)
    out, outputs, parent = [], {}, {}
    for i, r in enumerate(rows):
        ids = rng.integers(3, VOCAB, r["prompt"]).tolist()
        if r["session"] != "":  # the previous turn's prompt and (predetermined) output, then a new message
            if r["turn"]:
                last, history = turns[r["session"]]
                if last != r["turn"] - 1 or len(history) > r["prompt"]:
                    raise SystemExit(f"row {i}: session {r['session']} turn {r['turn']} does not follow turn {last}")
                ids[: len(history)] = history
            outputs[str(i)] = session_rng.integers(3, VOCAB, r["output"]).tolist()
            turns[r["session"]] = (r["turn"], ids + outputs[str(i)])
        for u in range(len(r["hashes"])):  # unit u's tokens: the same after the same ids (kvsim chains them)
            chain = np.random.default_rng([seed + 3, *r["hashes"][: u + 1]])
            start = u * r["unit"]
            ids[start: start + r["unit"]] = chain.integers(3, VOCAB, r["unit"]).tolist()[: max(0, r["prompt"] - start)]
        if r["group"] != "" and r["prefix_len"]:
            shared = prefixes.setdefault(r["group"], rng.integers(3, VOCAB, 100_000).tolist())
            ids[: r["prefix_len"]] = shared[: r["prefix_len"]]
        params = SamplingParams(max_tokens=r["output"], ignore_eos=True)
        params.update_from_generation_config({}, 2)
        for k in range(r["n"]):
            out.append(Request(request_id=str(i) if r["n"] == 1 else f"{k}_{i}", prompt_token_ids=list(ids),
                               sampling_params=params, pooling_params=None,
                               arrival_time=float(r["arrival"]) + i * 1e-9, priority=r["priority"],
                               block_hasher=hasher))
            parent[out[-1].request_id] = str(i)
    return out, outputs, parent


def _transfers_done(meta):
    """The offloading worker's report for a step whose transfers all finished within it: every job done, and
    the requests whose asynchronous loads landed."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata
    from vllm.v1.outputs import KVConnectorOutput

    done = OffloadingWorkerMetadata()
    for job_id in (*meta.load_jobs, *meta.store_jobs):
        done.mark_completed(job_id)
    landed = {job.req_id for job in meta.load_jobs.values() if not job.sync}
    return KVConnectorOutput(finished_recving=landed, kv_connector_worker_meta=done)


def per_row(stats: dict[str, dict]) -> list[dict]:
    """Each row's figures from its requests' (a fanned-out row's children): the first scheduling and first token,
    the last finish, preemptions and cached tokens summed."""
    rows: dict[int, dict] = {}
    for s in stats.values():
        row = rows.get(s["id"])
        if row is None:
            rows[s["id"]] = dict(s)
            continue
        for key in ("first_scheduled_step", "first_token_step"):
            row[key] = min(row[key], s[key])
        row["finish_step"] = max(row["finish_step"], s["finish_step"])
        row["preemptions"] += s["preemptions"]
        row["cached_tokens"] += s["cached_tokens"]
    return [rows[i] for i in sorted(rows)]


def accepted_drafts(rng, drafts: int, k: int, p: float) -> int:
    """kvsim's acceptance draw (``sim/kernel/spec_decode.py``), repeated here so that the driver needs only numpy:
    ``k`` uniforms per verification whatever ``drafts`` (<= k) it verifies; the drafts are accepted as a prefix,
    up to the first uniform >= ``p``."""
    draws = rng.random(k)[:drafts] < p
    return int(drafts if draws.all() else draws.argmin())


def new_stats(requests, parent) -> dict[str, dict]:
    """Each request's record (`per_row` reads them): its trace row, and -1 / 0 until the run sets them."""
    return {r.request_id: {"id": int(parent[r.request_id]), "first_scheduled_step": -1, "first_token_step": -1,
                           "finish_step": -1, "preemptions": 0, "cached_tokens": 0} for r in requests}


def note_schedule(out, scheduler, stats: dict[str, dict], in_prefill: set[str], step: int) -> int:
    """Record what ``scheduler.schedule()`` returned (``out``) at ``step``: requests admitted or resumed (now
    prefilling; their first scheduled step and the tokens they hit) and preempted. Returns the preemptions."""
    for req in out.scheduled_new_reqs:
        in_prefill.add(req.req_id)
        s = stats[req.req_id]
        if s["first_scheduled_step"] < 0:
            s["first_scheduled_step"] = step
        s["cached_tokens"] += req.num_computed_tokens
    # vLLM 0.33's V1 model runner sends a resumed request apart; 0.34 (and 0.33's V2 runner) as a new one
    for req_id in getattr(out.scheduled_cached_reqs, "resumed_req_ids", ()):
        in_prefill.add(req_id)
        req = scheduler.requests[req_id]
        stats[req_id]["cached_tokens"] += req.num_computed_tokens - out.num_scheduled_tokens[req_id]
    preempted = out.preempted_req_ids or ()
    for req_id in preempted:
        stats[req_id]["preemptions"] += 1
        in_prefill.discard(req_id)
    return len(preempted)


def model_output(req_ids: list[str], sampled: list[list[int]]):
    """The model's output for a step that ran ``req_ids`` and sampled ``sampled``, as vLLM's
    ``ModelRunnerOutput``: vLLM 0.33's also maps each request to its row (``req_id_to_index``), 0.34's reads the
    rows' order from ``req_ids`` alone."""
    import dataclasses

    from vllm.v1.outputs import ModelRunnerOutput

    extra = {}
    if "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}:
        extra["req_id_to_index"] = {r: i for i, r in enumerate(req_ids)}
    return ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled, **extra)


def switch_drafter(vllm_config, method: str) -> None:
    """Make ``vllm_config``'s ngram drafter a ``method`` one (``"eagle"``, ``"mtp"``) after the config is built, as
    this offline harness has no drafter checkpoint to build one from: everything vLLM derives from the method then
    follows it. vLLM 0.33 derives the hash lookahead (``num_hash_lookahead_tokens``) on each read; 0.34 resolves it
    once, at the config's construction, so it is resolved again here."""
    object.__setattr__(vllm_config.speculative_config, "method", method)
    resolve = getattr(vllm_config, "_resolve_num_hash_lookahead_tokens", None)
    if resolve is not None:
        object.__setattr__(vllm_config, "num_hash_lookahead_tokens", resolve())


def gzip_steps(out: Path) -> None:
    """``out/steps.csv`` -> ``steps.csv.gz`` (mtime 0: reruns are byte-identical), the plain file removed."""
    import gzip

    steps = out / "steps.csv"
    with open(steps, "rb") as f, gzip.GzipFile(out / "steps.csv.gz", "wb", 9, mtime=0) as z:
        z.write(f.read())
    steps.unlink()


def run(args) -> None:
    import numpy as np
    from vllm.v1.outputs import DraftTokenIds

    scheduler, hasher = build_scheduler(args)
    rows = read_trace(args.trace)
    requests, outputs, parent = make_requests(rows, hasher, args.seed)
    token_rng = np.random.default_rng(args.seed + 1)
    stats = new_stats(requests, parent)
    in_prefill: set[str] = set()
    releases = Releases(rows, requests, parent)  # when each row is added: its arrival, or an earlier finish's release
    step = finished = 0
    k = getattr(args, "num_speculative_tokens", 0)
    # keyed by the request's position: its row's, a fanned-out child's in kvsim's fanned-out workload (its group index)
    accept = {r.request_id: np.random.default_rng([args.seed, 0x5EC, i]) for i, r in enumerate(requests)}
    spec_totals = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}
    step_rows = []
    preempted_total = 0
    prefill_total = 0
    while finished < len(requests):
        releases.add_due(step, scheduler)
        out = scheduler.schedule()
        prefill = decode = 0
        preempted_total += note_schedule(out, scheduler, stats, in_prefill, step)
        req_ids = list(out.num_scheduled_tokens)
        sampled = []
        for req_id in req_ids:
            n = out.num_scheduled_tokens[req_id]
            req = scheduler.requests[req_id]
            # num_computed_tokens was already advanced by schedule(); the step completes the prefill if it
            # reaches every token the request holds
            done = req.num_computed_tokens >= req.num_tokens
            padding = len(out.scheduled_spec_decode_tokens.get(req_id, ()))  # drafts (a padded admission's too)
            if req_id in in_prefill:
                prefill += n - padding
                decode += padding
            else:
                decode += n
            if done:
                planned = outputs.get(req_id)  # a session turn emits the output the next turn's prompt holds
                sampled.append([planned[len(req.output_token_ids)] if planned else int(token_rng.integers(3, VOCAB))])
                drafts = out.scheduled_spec_decode_tokens.get(req_id, [])
                if drafts:  # a verification: accepted drafts, then the bonus token; padding (-1) never accepted
                    a = accepted_drafts(accept[req_id], len(drafts), k, args.spec_acceptance_rate) \
                        if drafts[0] >= 0 else 0
                    sampled[-1] = list(drafts[:a]) + sampled[-1]
                    if planned:  # a session turn's tokens are its planned output, past its end any (vLLM trims them)
                        done_tokens = len(req.output_token_ids)
                        sampled[-1] = (planned[done_tokens:done_tokens + a + 1] + sampled[-1])[:a + 1]
                    spec_totals["num_drafts"] += 1
                    spec_totals["num_draft_tokens"] += len(drafts)
                    spec_totals["num_accepted_tokens"] += a
                in_prefill.discard(req_id)
                if stats[req_id]["first_token_step"] < 0:
                    stats[req_id]["first_token_step"] = step
            else:
                sampled.append([])
        prefill_total += prefill
        running = len(scheduler.running)
        waiting = len(scheduler.waiting) + len(scheduler.kv_holding_waiting) - len(scheduler.deferred_waiting)
        used = scheduler.kv_cache_manager.block_pool.num_gpu_blocks - 1 - \
            scheduler.kv_cache_manager.block_pool.get_num_free_blocks()
        output = model_output(req_ids, sampled)
        if out.kv_connector_metadata is not None:
            output.kv_connector_output = _transfers_done(out.kv_connector_metadata)
        engine_outputs = scheduler.update_from_output(out, output)
        if k:  # the drafter proposes k tokens after every step that sampled (ngram's cap: max_model_len)
            proposing = [r for r, t in zip(req_ids, sampled, strict=True) if t and r in scheduler.requests]
            scheduler.update_draft_token_ids(DraftTokenIds(proposing, [
                token_rng.integers(3, VOCAB, max(0, min(k, args.max_model_len - scheduler.requests[r].num_tokens)))
                .tolist() for r in proposing]))
        for eco in engine_outputs.values():
            for o in eco.outputs:
                if o.finish_reason is not None:
                    stats[o.request_id]["finish_step"] = step
                    finished += 1
                    releases.finished(int(parent[o.request_id]), step)
        step_rows.append({"step": step, "running": running, "waiting": waiting, "prefill_tokens": prefill,
                          "decode_tokens": decode, "used_blocks": used, "preemptions": preempted_total})
        step += 1
        if step > args.max_steps:
            raise SystemExit(f"no end after {args.max_steps} steps")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, table in (("steps", step_rows), ("requests", per_row(stats))):
        with open(out_dir / f"{name}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(table[0]))
            w.writeheader()
            w.writerows(table)
    if k:  # vLLM's spec decoding counters (SpecDecodingStats) summed over the run
        (out_dir / "spec.json").write_text(json.dumps(spec_totals, indent=1) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("out")
    p.add_argument("--num-blocks", type=int, required=True)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-model-len", type=int, default=16384)
    p.add_argument("--long-prefill-token-threshold", type=int, default=0)
    p.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--scheduler-reserve-full-isl", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--scheduling-policy", choices=["fcfs", "priority"], default="fcfs")
    p.add_argument("--watermark", type=float, default=0.0)
    p.add_argument("--cache-aware-admission-window", type=int, default=0, help="vLLM 0.34's (0: arrival order)")
    p.add_argument("--cache-aware-admission-threshold", type=float, default=0.5)
    p.add_argument("--max-num-active-seqs", type=int, default=None, help="admission cap (default: max_num_seqs)")
    p.add_argument("--prefill-schedule-interval", type=int, default=1, help="prefill every N steps (1: every step)")
    p.add_argument("--long-prefill-token-threshold-adaptive", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=200_000)
    p.add_argument("--sliding-window", type=int, default=0,
                   help="a sliding-window KV cache group of this window beside the full one (vLLM's hybrid manager)")
    p.add_argument("--attention-chunk-size", type=int, default=0,
                   help="three chunked-local KV cache groups with this chunk beside the full one (Llama 4's)")
    p.add_argument("--prefix-cache-retention-interval", default="0",
                   help="vLLM's engine argument (0: a window group caches its reachable blocks only; None: all)")
    p.add_argument("--cpu-offload-blocks", type=int, default=0, help="vLLM's OffloadingConnector with N host blocks")
    p.add_argument("--offload-prompt-only", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--num-speculative-tokens", type=int, default=0,
                   help="vLLM's ngram speculative decoding with this many drafts a step (kvsim: --speculative-config)")
    p.add_argument("--spec-acceptance-rate", type=float, default=0.5, help="kvsim's --spec-acceptance-rate")
    p.add_argument("--offload-eviction-policy", choices=["lru", "arc"], default="lru",
                   help="the CPU spec's eviction_policy (kvsim: --offload-eviction-policy)")
    run(p.parse_args())


if __name__ == "__main__":
    main()
