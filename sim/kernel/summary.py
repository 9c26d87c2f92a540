"""The run summary: the dict printed by ``kvsim run --json`` and its readable table.

Keys are a public interface (``docs/architecture.md``); ``rejected_reasons`` counts rejections by reason,
numbers normalised away (`reject_category`; each request's full message stays in ``reject_reason``). Memory
shares are time-weighted over simulated time and the five ``*_frac`` shares sum to 1. Latency figures are
over completed requests, and ``latency_notes`` says which rest on too few of them (`sim.kernel.latency_notes`);
`exclusion_note` says so in words where requests were rejected. Everything but ``wall_time_s`` is a
deterministic function of the configuration and the workload.
"""

from __future__ import annotations

import math
import re

import numpy as np

from sim.kernel.latency_notes import LATENCY_FIGURES, latency_notes
from sim.kernel.prefix_cache_stats import PrefixCacheStats, summary_keys
from workloads.stats import offered_arrivals

SHARE_KEYS = ("token_states_frac", "reservation_frac", "internal_frag_frac", "external_frag_frac", "free_frac")


_NUMBER = re.compile(r"(?<![\w.-])\d+(?:\.\d+)?(?![\w.])")


_LIMIT_PREFIXES = ("max_model_len ", "max_num_seqs is ", "max_num_active_seqs is ", "max_num_batched_tokens ",
                   "only ", "slab is ", "at most ", "watermark ", "blocks of ", "pool of ", "HTTP ",
                   "max_num_queued_reqs ", "max_num_queued_tokens ")
"""Words after which a number is the configuration's limit, not the request's size: kept in the category."""


def reject_category(reason: str) -> str:
    """A rejection reason with its per-request numbers replaced by ``N`` and the limit kept, so that "prompt +
    output = 5000 tokens exceeds max_model_len 4096" and "... = 4100 ..." count as one category, "prompt +
    output = N tokens exceeds max_model_len 4096", that still says which limit was crossed."""
    def replace(match: re.Match) -> str:
        return match.group() if reason[:match.start()].endswith(_LIMIT_PREFIXES) else "N"

    return _NUMBER.sub(replace, reason)


def rejection_warning(summary: dict) -> str | None:
    """One line for stderr when a run rejected requests: how many, and the most frequent reason."""
    reasons = summary.get("rejected_reasons") or {}
    if not summary.get("rejected"):
        return None
    top, count = next(iter(reasons.items()), ("unknown reason", summary["rejected"]))
    others = f"; {len(reasons) - 1} other reason(s) in rejected_reasons" if len(reasons) > 1 else ""
    name = summary.get("run", summary["allocator"])  # compare's no-reuse baseline has its own name
    return f"Warning: {name}: {summary['rejected']} of {summary['requests']} requests rejected ({count}: {top}{others})"


def exclusion_note(summary: dict) -> str | None:
    """One line for stderr when a run rejected requests and completed some: its latency figures and
    throughputs are over the completed ones only, which the summary's keys do not say (a table of
    ``ttft_p99_s`` beside ``rejected`` reads as a latency of every request)."""
    rejected, completed = summary.get("rejected", 0), summary.get("completed", 0)
    if not rejected or not completed:
        return None
    name = summary.get("run", summary["allocator"])
    return (f"Note: {name}: the latency figures ({', '.join(LATENCY_FIGURES)}) are over the {completed:,} "
            f"completed requests only, and the throughputs count only theirs; the {rejected:,} rejected are in "
            "none of them")


def counts_text(counts: dict[str, int]) -> str:
    """``3 x reason; 1 x other``: counts by reason (rejections, skipped rows), as every table and report of
    the command line writes them."""
    return "; ".join(f"{count} x {reason}" for reason, count in counts.items())


def rejected_reasons(reasons) -> dict[str, int]:
    """Rejections by category (`reject_category`), most frequent first, ties by name: deterministic."""
    counts: dict[str, int] = {}
    for reason in reasons:
        if reason:
            key = reject_category(reason)
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def arrival_keys(workload) -> dict[str, float | None]:
    """``arrival_span_s`` and ``offered_rate_req_s``: the workload's own arrivals (`workloads.stats.
    offered_arrivals`, as ``kvsim trace stats`` reads them: requests over the span from the first arrival to the
    last, session turns released by their previous turn's end left out, None without a span), to read beside
    ``throughput_req_s``: a trace whose times are in the wrong unit shows as an offered rate 1,000 times off,
    which its latency figures do not show."""
    _, span, rate = offered_arrivals(workload)
    return {"arrival_span_s": span, "offered_rate_req_s": rate}


def _stat(values: np.ndarray, fn) -> float | None:
    values = values[~np.isnan(values)]
    return None if len(values) == 0 else float(fn(values))


def build_summary(*, allocator: str, requests, memory, max_running: int, num_preemptions: int, start_s: float,
                  end_s: float, wall_time_s: float, capacity: int, total_blocks: int, extra: dict,
                  prefill_tokens: int = 0, cached_prompt_tokens: int = 0, tier: dict | None = None,
                  kv_tokens: int | None = None) -> dict:
    """Summary from the per-request frame and the memory integrals (`sim.kernel.metrics.MemoryIntegral`).

    ``prefill_tokens``: prefill tokens computed over the run (recomputation after preemption included);
    ``cached_prompt_tokens``: prompt tokens admissions found in the prefix cache or a registered shared
    prefix and did not compute. What prefix caching buys is ``prefix_hit_frac``, the cached share of all
    the prefill tokens admissions needed: ``gpu_hit_tokens + host_hit_tokens`` over that plus ``miss_tokens``
    (the prefill tokens computed). ``preempted_hit_tokens``: the part of the hits found by requests preempted
    before, re-admitted to recompute (vLLM's ``preempted_hits``): a workload with no shared prefix still hits
    its own blocks then, which is not reuse across requests. ``tier``: the host tier's figures
    (`sim.kernel.replica.tier_summary`: ``host_hit_tokens``, ``preempted_hit_tokens``, ``offload_bytes``,
    ``reload_bytes``, ``offload_stores_skipped``, ``offload_spills_dropped``, ``host_tier_blocks``, and vLLM's
    lookup counters ``prefix_cache`` and ``external_prefix_cache``); absent, all 0.

    ``prefix_cache_queries``, ``prefix_cache_hits`` and ``prefix_cache_hit_rate`` are a vLLM server's figures
    (`sim.kernel.prefix_cache_stats`), read from another window than ``prefix_hit_frac``: they leave out the
    admissions of requests preempted before (``prefix_cache_preempted_queries`` / ``_hits``) and the host tier's
    hits (``external_prefix_cache_queries`` / ``_hits``), and count the tokens each admission looked up, where
    ``prefix_hit_frac``'s denominator counts the prefill tokens computed (a request preempted mid-prefill adds
    only what it computed). Without preemptions or a host tier the two rates are equal. ``prefix_cache_hit_rate``
    is the whole run's; the rate vLLM logs covers its last 1,000 fresh requests: ``prefix_cache_logged_hit_rate``.

    ``start_s``/``end_s``: the run's window (``sim_time_s``, the throughputs' denominator): the first arrival
    and the last event, which a request rejected on arrival after every step extends, as a benchmark client's
    duration counts a request that failed at once. ``capacity``: the pool in the breakdown's slots; ``kv_tokens``: in full tokens, when they differ (a hybrid
    pool counts one slot per KV cache group: its summary adds ``kv_capacity_slots`` and, per attention group,
    ``kv_groups``: the time-weighted shares of the capacity each group's tokens, reservation, internal
    fragmentation and blocks hold)."""
    tier = tier or {}
    done = requests[requests["finished_s"].notna()]
    sim_time = end_s - start_s
    out_tokens = float((done["output_tokens"] * done["num_seqs"]).sum())
    t = memory.time
    shares = ({key: getattr(memory, key[:-5]) / (t * capacity) for key in SHARE_KEYS} if t > 0
              else dict.fromkeys(SHARE_KEYS, 0.0) | {"free_frac": 1.0})
    summary = {
        "allocator": allocator,
        "requests": int(len(requests)),
        "completed": int(len(done)),
        "rejected": int(requests["rejected"].sum()),
        "rejected_reasons": rejected_reasons(requests["reject_reason"][requests["rejected"]]),
        "length_capped": int(((requests["length_capped_tokens"] > 0) & ~requests["rejected"]).sum()),
        "preemptions": int(num_preemptions),
        "sim_time_s": sim_time,
        "wall_time_s": wall_time_s,
        "throughput_tok_s": out_tokens / sim_time if sim_time > 0 else 0.0,
        "throughput_req_s": len(done) / sim_time if sim_time > 0 else 0.0,
        "mean_running": memory.running / t if t > 0 else 0.0,
        "max_running": int(max_running),
        "normalized_latency_s_per_tok": _stat(done["normalized_latency_s_per_tok"].to_numpy(float), np.mean),
        "ttft_p50_s": _stat(done["ttft_s"].to_numpy(float), np.median),
        "ttft_p99_s": _stat(done["ttft_s"].to_numpy(float), lambda v: np.percentile(v, 99)),
        "tpot_p50_s": _stat(done["tpot_s"].to_numpy(float), np.median),
        "e2e_p50_s": _stat(done["e2e_s"].to_numpy(float), np.median),
        **_latency_notes(done),
        **shares,
        "block_usage_frac": memory.used_blocks / (t * total_blocks) if t > 0 and total_blocks else 0.0,
        "token_occupancy_frac": shares["token_states_frac"],
        "shared_saved_frac": _shared_saved_frac(memory),
        "cached_frac": memory.cached / (t * capacity) if t > 0 else 0.0,
        "prefill_tokens": int(prefill_tokens),
        "cached_prompt_tokens": int(cached_prompt_tokens),
        "prefix_hit_frac": (cached_prompt_tokens / (cached_prompt_tokens + prefill_tokens)
                            if cached_prompt_tokens else 0.0),
        "gpu_hit_tokens": int(cached_prompt_tokens - tier.get("host_hit_tokens", 0)),
        "host_hit_tokens": int(tier.get("host_hit_tokens", 0)),
        "preempted_hit_tokens": int(tier.get("preempted_hit_tokens", 0)),
        "miss_tokens": int(prefill_tokens),
        **summary_keys(tier.get("prefix_cache", PrefixCacheStats()),
                       tier.get("external_prefix_cache", PrefixCacheStats())),
        "offload_bytes": int(tier.get("offload_bytes", 0)),
        "reload_bytes": int(tier.get("reload_bytes", 0)),
        "offload_stores_skipped": int(tier.get("offload_stores_skipped", 0)),
        "offload_spills_dropped": int(tier.get("offload_spills_dropped", 0)),
        "host_tier_blocks": int(tier.get("host_tier_blocks", 0)),
        "kv_capacity_tokens": int(capacity if kv_tokens is None else kv_tokens),
        **extra,
    }
    if memory.groups:
        summary["kv_capacity_slots"] = int(capacity)
        summary["kv_groups"] = group_shares(memory, capacity, total_blocks)
    return summary


def _latency_notes(done) -> dict:
    """``latency_notes`` (`sim.kernel.latency_notes`), only when a latency figure rests on too few completed
    requests to mean what its name says, or on none."""
    columns = {"normalized_latency_s_per_tok": "normalized_latency_s_per_tok", "ttft_p50_s": "ttft_s",
               "ttft_p99_s": "ttft_s", "tpot_p50_s": "tpot_s", "e2e_p50_s": "e2e_s"}
    samples = {figure: int(done[columns[figure]].notna().sum()) for figure in LATENCY_FIGURES}
    notes = latency_notes(samples)
    return {"latency_notes": notes} if notes else {}


def group_shares(memory, capacity: int, total_blocks: int) -> dict[str, dict[str, float]]:
    """Per attention group of a hybrid pool: time-weighted shares of the capacity (``*_frac``) and of the
    blocks (``block_usage_frac``); the groups' shares sum to the pool's used share."""
    t = memory.time
    if t <= 0:
        return {name: {} for name in memory.groups}
    keys = ("token_states_frac", "reservation_frac", "internal_frag_frac")
    return {name: {**{key: acc[i] / (t * capacity) for i, key in enumerate(keys)},
                   "block_usage_frac": acc[3] / (t * total_blocks) if total_blocks else 0.0}
            for name, acc in memory.groups.items()}


def _shared_saved_frac(memory) -> float:
    """Slots saved by sharing / slots that would be needed without sharing (time-weighted), as the paper."""
    without = memory.token_states + memory.reservation + memory.internal_frag + memory.shared_saved
    return memory.shared_saved / without if without > 0 else 0.0


def format_number(value: float) -> str:
    """A float for reading: four significant figures, or whole with thousands separators from 10,000 up (where
    four figures would need an exponent), so that `run` and `compare` print one figure the same way."""
    return "nan" if math.isnan(value) else f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"


def format_summary(summary: dict, per_replica: frozenset[str] = frozenset()) -> str:
    """A two-column table of the summary, numbers rounded for reading; the keys in ``per_replica`` (a fleet's
    figures of one replica among fleet-wide ones, `sim.kernel.fleet_summary.PER_REPLICA_KEYS`) say so."""
    lines = []
    width = max(len(k) for k in summary)
    for key, value in summary.items():
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            text = "; ".join(f"{name}: " + ", ".join(f"{k[:-5]} {v:.4g}" for k, v in shares.items())
                             for name, shares in value.items())  # kv_groups
        elif isinstance(value, dict):  # counts by reason (rejected_reasons), or flag -> why (ignored_settings):
            if not value:  # shown only when there is something to say
                continue
            text = (counts_text(value) if all(isinstance(v, int) for v in value.values())
                    else "; ".join(f"{name}: {why}" for name, why in value.items()))
        elif isinstance(value, float):
            text = format_number(value)
        elif value is None:
            text = "-"
        else:
            text = str(value)
        lines.append(f"{key:<{width}}  {text}" + (" (per replica)" if key in per_replica else ""))
    return "\n".join(lines)


def format_comparison(summaries: list[dict], keys: tuple[str, ...], per_replica: frozenset[str] = frozenset()) -> str:
    """Summaries side by side, one column per allocator (or per ``run``, where a summary names one); the keys in
    ``per_replica`` say so, as in `format_summary`."""
    header = ["metric"] + [s.get("run", s["allocator"]) for s in summaries]
    rows = [header]
    for key in keys:
        row = [key + (" (per replica)" if key in per_replica else "")]
        for s in summaries:
            v = s.get(key)
            row.append("-" if v is None else format_number(v) if isinstance(v, float) else str(v))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths,
                                                                                                  strict=True)))
                     for r in rows)
