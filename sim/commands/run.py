"""``kvsim run``: one simulation, and the flags it shares with ``kvsim compare`` (``compare.py``).

With no trace and no preset both use the default preset, ``sharegpt-demo`` (the paper's ShareGPT lengths,
400 requests at 2 req/s), on the configuration's default deployment (OPT-13B on an A100-40GB, KV memory
derived from --gpu-memory-utilization as for any other workload), so ``kvsim compare`` alone shows paged
against contiguous in a few seconds. Each prints the workload and the KV capacity's source first, on stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sim.commands.failure import fail
from sim.commands.one_spelling import OneSpellingCommand
from sim.commands.options import (
    ALLOCATOR_NAMES,
    BLOCK_SIZE_HELP,
    TRACE_FORMAT_HELP,
    catalog_option,
    columns_option,
    data_parallel_option,
    decode_context_parallel_option,
    enforce_eager_option,
    expert_parallel_option,
    kv_cache_dtype_option,
    retention_option,
    vllm_lookalike_options,
    vllm_spellings,
)
from sim.kernel.config import (
    OFFLOAD_EVICTION_POLICIES,
    OFFLOAD_LOAD_MODES,
    OFFLOAD_WRITE_POLICIES,
    OVER_LENGTH,
    PARALLEL_SAMPLING,
    PREEMPTION_MODES,
    SCHEDULERS,
    SCHEDULING_POLICIES,
    SimConfig,
)
from sim.kernel.routers import ROUTERS

if TYPE_CHECKING:
    from sim.kernel.replica import SimResult

_DEFAULTS = SimConfig()


def _field_option(flags: str, *names: str, **kwargs):
    """A flag for the `SimConfig` field it spells (``--block-size`` -> ``block_size``), defaulting to the
    field's own default, so the command line and the configuration cannot disagree; vLLM's spellings of it
    (``--tensor-parallel-size``, `sim.kernel.vllm_names`) are further flags of the same option."""
    name = names[-1] if names else flags.split("/")[0].removeprefix("--").replace("-", "_")
    return click.option(flags, *names[:-1], *vllm_spellings(name, flags), name, default=getattr(_DEFAULTS, name),
                        show_default=True, **kwargs)


def simulation_options(func):
    """The flags `run` and `compare` share; each maps onto the `SimConfig` field of the same name."""
    options = [
        click.argument("trace", required=False, type=click.Path(dir_okay=False)),
        click.option("--trace", "trace_option", type=click.Path(dir_okay=False), metavar="FILE",
                     help="The trace file, as in kvsim sweep (the same as TRACE)."),
        click.option("--trace-format", help=TRACE_FORMAT_HELP),
        columns_option,
        click.option("--skip-bad-rows", is_flag=True,
                     help="Skip bad rows of TRACE (counted in the summary's skipped_rows) instead of failing."),
        click.option("--arrivals",
                     help="Arrival process replacing TRACE's timestamps: 'trace:rate=R' keeps the trace's own "
                          "timestamps time-scaled to R req/s; 'poisson:rate=R', 'gamma:rate=R,cv=C', "
                          "'constant:rate=R' draw new ones (seeded by --seed). --rate R alone means Poisson."),
        click.option("--preset", help="Named workload (e.g. sharegpt-paper, alpaca-paper, azure-conv; default "
                                      "sharegpt-demo: 400 requests at 2 req/s). The trace presets read the full "
                                      "public traces from the directory $KVSIM_TRACES (sources in "
                                      "workloads/data/traces/README.md), else 2,000-row samples shipped with kvsim."),
        _field_option("--model", help="Model from the catalog (e.g. opt-13b, llama-2-7b, llama-3-8b)."),
        _field_option("--gpu", help="GPU from the catalog."),
        catalog_option,
        click.option("--kv-gib", type=float,
                     help="KV memory in GiB, all --tensor-parallel GPUs together (vLLM's kv_cache_memory_bytes "
                          "is per GPU) [default: derived from the GPU]."),
        click.option("--kv-tokens", type=int, help="KV memory in token slots (the whole pool)."),
        _field_option("--tensor-parallel", type=int, help="GPUs the model and its KV cache are split over."),
        _field_option("--gpu-memory-utilization", type=float,
                      help="Share of GPU memory vLLM may use (weights + activations + KV); sizes the KV "
                           "memory unless --kv-gib or --kv-tokens is given."),
        kv_cache_dtype_option,
        click.option("--disable-hybrid-kv-cache-manager", is_flag=True,
                     help="Treat sliding-window (and chunked-local) layers as full attention in the KV cache (vLLM's "
                          "flag): one block table for all layers, nothing freed out of the window (paged on a hybrid "
                          "model)."),
        enforce_eager_option,
        _field_option("--block-size", type=int, help=BLOCK_SIZE_HELP),
        _field_option("--page-size-kib", type=int,
                      help="Physical page size of the vattention allocator, KiB per layer per K/V tensor (2048: "
                           "the CUDA driver's 2 MB pages; 64-256: vAttention's driver extension)."),
        _field_option("--placement", help="Where contiguous slabs go in memory: buddy, first-fit or best-fit."),
        click.option("--max-model-len", type=int, help="Longest sequence (default: the model's)."),
        _field_option("--over-length", type=click.Choice(OVER_LENGTH),
                      help="A request whose prompt fits --max-model-len but prompt + output does not: cap "
                           "(vLLM: its output stops at max_model_len; the requests table's length_capped_tokens "
                           "says by how much) or reject it. A prompt of max_model_len tokens or more is "
                           "rejected either way."),
        click.option("--rate", type=float,
                     help="Arrival rate, requests per second. A synthetic preset's Poisson rate; a trace preset "
                          "(azure-code, azure-conv, mooncake-conv) keeps its own timestamps, time-scaled to it; "
                          "for TRACE, new Poisson arrivals replace its timestamps (see --arrivals)."),
        click.option("--num-requests", type=int, help="Use only (or generate) this many requests."),
        _field_option("--seed", type=int,
                      help="Seed for generated arrivals and lengths, and for beam-search choices."),
        _field_option("--scheduler", type=click.Choice(SCHEDULERS),
                      help="continuous: iteration-level batching (vLLM); static: whole batches "
                           "(FasterTransformer)."),
        _field_option("--max-num-seqs", type=int, help="Most sequences running at once."),
        _field_option("--max-num-active-seqs", type=int,
                      help="Most sequences admitted to run at once, at most --max-num-seqs (vLLM's; there "
                           "--max-num-seqs also sizes the model runner and its CUDA graphs, which kvsim's clock "
                           "does not model, so here this acts as a lower --max-num-seqs). Default: --max-num-seqs."),
        _field_option("--max-num-batched-tokens", type=int,
                      help="Most tokens (prefill + decode) one step computes."),
        _field_option("--chunked-prefill/--no-chunked-prefill",
                      help="Split long prompts over several steps within the token budget."),
        _field_option("--prefix-caching/--no-prefix-caching", "prefix_caching",
                      help="Automatic prefix caching (paged allocators; on by default, as in vLLM v1); the "
                           "summary reports prefix_hit_frac."),
        _field_option("--long-prefill-token-threshold", type=int,
                      help="Most prefill tokens one request computes in a step (vLLM's; 0 = no cap)."),
        _field_option("--long-prefill-token-threshold-adaptive/--no-long-prefill-token-threshold-adaptive",
                      "long_prefill_token_threshold_adaptive",
                      help="Floor --long-prefill-token-threshold at a fair share of the token budget: "
                           "--max-num-batched-tokens divided by the requests running and queued (vLLM's)."),
        _field_option("--max-num-queued-reqs", type=int,
                      help="Turn a request away (HTTP 503, reported rejected) when the requests in flight (queued "
                           "or running; n samples count n) and it would exceed N (vLLM's API-server limit; "
                           "default: none)."),
        _field_option("--max-num-queued-tokens", type=int,
                      help="Turn a request away (HTTP 503, reported rejected) when the prompt tokens of the "
                           "requests in flight still waiting for their first token are already N or more (vLLM's "
                           "TTFT guard; default: none)."),
        _field_option("--prefill-schedule-interval", type=int,
                      help="Admit prefill only once every N engine steps, the steps between decoding alone, "
                           "unless the last admission round left requests waiting (vLLM's; 1 = every step). "
                           "Steadier inter-token gaps for later first tokens."),
        _field_option("--scheduler-reserve-full-isl/--no-scheduler-reserve-full-isl", "scheduler_reserve_full_isl",
                      help="Admit a request only if its whole sequence fits (vLLM's default), not just its "
                           "first chunk."),
        _field_option("--async-scheduling/--no-async-scheduling", "async_scheduling",
                      help="vLLM v1's async scheduling (its engine schedules step t + 1 before it processes step "
                           "t's output: a finished request frees its blocks and seat a step later). Off by "
                           "default so earlier runs keep their numbers; vLLM 0.33 turns it on by default. The "
                           "clock is not changed. Needs --allocator paged, chunked prefill, recompute "
                           "preemption; a host tier only as vLLM's offloading connector runs it (write-through, "
                           "async loads); n > 1 only fanned out; no beams. A finish releases a "
                           "closed loop's next request or a session's next turn once the next step is scheduled."),
        _field_option("--speculative-config", type=str, metavar="JSON",
                      help="vLLM's speculative decoding, as its engine argument: '{\"method\": \"ngram\", "
                           "\"num_speculative_tokens\": 3}' (no drafter model, KV or GPU time) or method eagle, "
                           "eagle3 (with \"model\") or mtp (a catalog model with num_nextn_predict_layers): their "
                           "drafter's KV layers share every block (fewer slots), each step holds "
                           "num_speculative_tokens lookahead slots, the drafter's passes add GPU time, and prefix "
                           "caching hashes each block with the token after it (a trace's hash_ids too, and behind a "
                           "host tier, as vLLM 0.34 does). On a hybrid "
                           "Mamba model: ngram, and Qwen3-Next's mtp (prefix caching on needs a Hopper GPU); on a "
                           "sliding-window model (gpt-oss, Gemma 3): ngram and eagle/eagle3, each window group "
                           "holding blocks for the drafts too (the drafter's layer joins the full group). Each "
                           "decode step verifies the drafts (slots for all of them, as vLLM allocates them); "
                           "decoders are then stepped one step at a time. Needs "
                           "--spec-acceptance-rate, --allocator paged, chunked prefill, recompute preemption; n > 1 "
                           "only fanned out; no beams; a host tier only as vLLM's offloading connector "
                           "(--offload-write-policy write_through --offload-loads async). Runs synchronously or with "
                           "--async-scheduling (vLLM 0.33's default). The summary's spec_decoding gives vLLM's "
                           "counters."),
        _field_option("--spec-acceptance-rate", type=float,
                      help="kvsim's model of the drafter with --speculative-config: each draft token is accepted "
                           "with this probability, a verification's drafts as a prefix up to the first rejection "
                           "(the drafter is assumed to propose num_speculative_tokens every step)."),
        _field_option("--scheduling-policy", type=click.Choice(SCHEDULING_POLICIES),
                      help="fcfs, priority (the trace's priority column: lower first; the preemption "
                           "victim is the lowest priority, latest arrival), or lpm (longest cached prefix "
                           "first, as SGLang's cache-aware scheduling: ties in queue order, a request sharing "
                           "an uncached prefix with one before it last, and no sorting past --lpm-max-queue "
                           "queued)."),
        _field_option("--parallel-sampling", type=click.Choice(PARALLEL_SAMPLING),
                      help="How a request sampled n > 1 times runs: fan-out (vLLM v1's engine: n requests "
                           "sharing the prompt through the prefix cache, each admitted and preempted alone; "
                           "--allocator paged; a fleet routes a request's children together, except dp-lb, vLLM's "
                           "front end, which routes each child) or fork (one group "
                           "of n sequences, admitted and preempted together, forked at the first token: vLLM "
                           "v0's). auto (default): fan-out where modelled (paged, no sessions or closed loop), "
                           "else fork."),
        _field_option("--beam-keep-prob", type=float,
                      help="Beam search's model: the chance a beam keeps its own lineage at a step, else it "
                           "continues a random beam (kvsim has no token probabilities; sim/kernel/beam.py)."),
        _field_option("--lpm-max-queue", type=int,
                      help="The most queued requests lpm sorts; past it the queue keeps its order (the "
                           "default is SGLang's; 0 = no bound, what the policy would do if the sort were free)."),
        _field_option("--cache-aware-admission-window", type=int,
                      help="vLLM 0.34's cache-aware admission under fcfs: before each admission round, the "
                           "requests among the first N queued that have never run are reordered by the tokens "
                           "they find cached in GPU memory, most first (ties in arrival order); preempted ones "
                           "keep their places. 0 (default): strict arrival order. Needs prefix caching."),
        _field_option("--cache-aware-admission-threshold", type=float,
                      help="KV cache usage below which --cache-aware-admission-window does not reorder "
                           "(vLLM's; default 0.5)."),
        _field_option("--preemption", type=click.Choice(PREEMPTION_MODES),
                      help="What happens to a preempted request: recompute its KV later, or swap it to host "
                           "memory."),
        _field_option("--swap-space-gib", type=float,
                      help="Host memory for swapped KV, per GPU (full: recompute instead)."),
        _field_option("--cpu-offload-gib", type=float,
                      help="Host memory (GiB, for the whole replica) for a KV tier behind the prefix cache: "
                           "cached blocks are kept there (when the GPU evicts them, or as computed: "
                           "--offload-write-policy; dropped LRU, or ARC: --offload-eviction-policy), and host "
                           "hits are loaded back over PCIe (0: no tier). With it, --preemption swap parks KV in "
                           "this memory."),
        _field_option("--offload-write-policy", type=click.Choice(OFFLOAD_WRITE_POLICIES),
                      help="When a block reaches the host tier: write_back (when the GPU evicts it) or "
                           "write_through (as soon as it is computed: vLLM's offloading connector, SGLang "
                           "HiCache's recommended policy)."),
        _field_option("--offload-loads", type=click.Choice(OFFLOAD_LOAD_MODES),
                      help="How host-tier hits are loaded: sync (default: charged to the step that admits the "
                           "request) or async (beside the steps, as vLLM's offloading connector: the request "
                           "waits for its load, the others do not; --allocator paged)."),
        _field_option("--offload-eviction-policy", type=click.Choice(OFFLOAD_EVICTION_POLICIES),
                      help="With --offload-write-policy write_through: how the host tier picks what to drop, "
                           "lru (default) or arc (vLLM's eviction_policy)."),
        _field_option("--offload-store-threshold", type=int,
                      help="With --offload-write-policy write_through: store a block on the host only once this "
                           "many requests have offered it (vLLM's store_threshold; below 2: every block)."),
        _field_option("--offload-prompt-only/--no-offload-prompt-only", "offload_prompt_only",
                      help="With --offload-write-policy write_through: store a request's prompt blocks only, "
                           "not the blocks it generates (vLLM's offload_prompt_only, on by default)."),
        _field_option("--watermark", type=float,
                      help="Fraction of blocks an admission must leave free (paged allocators)."),
        click.option("--step-time", type=float, help="Every step takes this many seconds (no cost model)."),
        click.option("--calibration", type=click.Path(dir_okay=False), help="Calibration JSON for the cost model."),
        click.option("--cost-profile", help="Step-cost profile: vllm-v1 (default; vLLM 0.11), paper-2023 (the "
                                            "SOSP'23 vLLM), or a calibration table .json (kvsim calibrate --list)."),
        click.option("--step-by-step", is_flag=True, help="No decode fast-forward (slow; for checking)."),
        _field_option("--replicas", type=int,
                      help="Serving replicas, each with its own scheduler, KV memory and cost model."),
        click.option("--router", type=click.Choice(list(ROUTERS)), default=None,
                     help="How a fleet of replicas routes each arriving request (sim/kernel/routers.py) "
                          "[default: round-robin; dp-lb, vLLM's load balancer, with --data-parallel-size > 1]."),
        data_parallel_option,
        _field_option("--api-server-count", type=int,
                      help="vLLM's API server processes in front of --router dp-lb's engines, each balancing the "
                           "requests that reach it (a request goes to the one with the fewest open; "
                           "sim/kernel/api_servers.py) [default: vLLM's, the number of engines]; vLLM's flag."),
        expert_parallel_option,
        decode_context_parallel_option,
        retention_option,
        _field_option("--router-load-weight", type=float,
                      help="prefix-aware: weight of a replica's pending prefill tokens against the prompt "
                           "tokens the request would compute there."),
        _field_option("--router-kv-overlap-score-weight", type=float,
                      help="kv-cost: weight of the prefill tokens (the request's uncached ones and those "
                           "queued) against the KV the replica's requests hold (Dynamo's "
                           "--router-kv-overlap-score-weight; higher favours cache hits, lower spreads load)."),
        _field_option("--prefill-replicas", type=int,
                      help="Disaggregated prefill/decode (with --decode-replicas and --kv-transfer-config): "
                           "replicas that only prefill. Each request is prefilled on one (round-robin, max_tokens=1, "
                           "as vLLM's P/D proxy sends it), its blocks held until a decode replica has pulled its "
                           "KV, then decoded there; TTFT is the decode side's first token (sim/kernel/"
                           "disaggregation.py). 0: no P/D fleet."),
        _field_option("--decode-replicas", type=int,
                      help="Disaggregated prefill/decode: replicas that pull each prompt's KV (waiting as vLLM's "
                           "WAITING_FOR_REMOTE_KVS), recompute its last token and decode (round-robin)."),
        _field_option("--kv-transfer-config", type=str, metavar="JSON",
                      help="vLLM's engine argument for a P/D fleet: '{\"kv_connector\": \"NixlConnector\", "
                           "\"kv_role\": \"kv_both\"}' (only NixlConnector is modelled; paged, chunked prefill, "
                           "no async scheduling, speculative decoding, host tier, sessions, n > 1 or beams)."),
        _field_option("--kv-transfer-gb-s", type=float,
                      help="P/D: each GPU's link for KV pulls, GB/s (default: one 400 Gb/s ConnectX-7 NIC per "
                           "H100, as in a DGX H100); a pull takes --kv-transfer-latency-s + its shard's bytes / "
                           "this, pulls into one decode replica one after another."),
        _field_option("--kv-transfer-latency-s", type=float,
                      help="P/D: fixed seconds each KV pull takes on top of its bytes (kvsim's; no sourced "
                           "default, so 0)."),
        click.option("--workers", type=int, default=1, show_default=True,
                     help="Parallel worker processes for a fleet whose router reads no replica state "
                          "(round-robin, random): its replicas are split among them, results identical; 1 runs "
                          "in this process. Other routers run in one process (a note says so)."),
        click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON."),
        click.option("--out", type=click.Path(file_okay=False),
                     help="Write requests/steps/memory tables and JSON here (compare: one directory per "
                          "allocator under it)."),
        click.option("--format", "out_format", type=click.Choice(["parquet", "csv"]), default="parquet",
                     show_default=True, help="File format of the tables written by --out."),
    ]
    for option in reversed(options):
        func = option(func)
    return vllm_lookalike_options(func)


def build_config(allocator: str, opts: dict) -> SimConfig:
    """The configuration the flags spell; nothing is added that the flags do not say (no hidden defaults
    beyond `SimConfig`'s own). ``--workers`` is checked here too: it says how to run, not what."""
    from sim.kernel.fleet_parallel import check_workers

    check_workers(opts.get("workers", 1))
    fields = {k: v for k, v in opts.items() if k not in ("as_json", "out", "out_format", "trace_option", "workers")}
    if opts["trace_option"] is not None:
        if opts["trace"] not in (None, opts["trace_option"]):
            raise ValueError(f"two traces: TRACE {opts['trace']} and --trace {opts['trace_option']}; give one")
        fields["trace"] = opts["trace_option"]
    return SimConfig(**fields, allocator=allocator)


def announce(config: SimConfig, workload) -> None:
    """The setup line (workload, deployment, KV capacity and its source) on stderr, before the run."""
    from sim.describe import setup_line
    from sim.kernel.runner import resolve_capacity

    click.echo(setup_line(config, workload, resolve_capacity(config)), err=True)


def simulate(config, workload, as_json: bool, workers: int = 1, note: bool = True):
    """One run for the CLI (a progress bar on a terminal); ``note``: print the line saying why ``workers`` does
    not apply, if it does not (compare says it once for all its runs)."""
    from sim.kernel.fleet_parallel import parallel_note
    from sim.kernel.runner import run_simulation

    note = note and parallel_note(config, workers, workload)
    if note:
        click.echo(note, err=True)
    if as_json or not sys.stdout.isatty():  # warn=False: the note above and `warn_on_summary` say it as lines
        return run_simulation(config, workload, workers=workers, warn=False)
    from tqdm import tqdm

    with tqdm(total=len(workload), unit="req", desc=config.allocator, leave=False) as bar:
        return run_simulation(config, workload, progress=bar.update, workers=workers, warn=False)


TABLE_FORMATS = ("parquet", "csv")
"""The formats ``--format`` writes a run's tables in (`sim.kernel.runner.write_result`)."""


def write_run(result: SimResult, out_dir: str | Path, fmt: str) -> None:
    """`write_result` into ``out_dir``, then remove that run directory's tables of the other format, those of
    an earlier run there: `kvsim plot` reads ``NAME.parquet`` before ``NAME.csv``, so an old run's parquet
    beside a new run's csv would be drawn under the new summary. Only the tables just written, by exact name
    (``requests.csv`` -> ``requests.parquet``), are removed, never another file; one stderr line says which."""
    from sim.kernel.runner import write_result

    written = write_result(result, out_dir, fmt)
    stale = [path.with_suffix(f".{other}") for path in written if path.suffix == f".{fmt}"
             for other in TABLE_FORMATS if other != fmt]
    removed = []
    for path in stale:
        if path.is_file():
            path.unlink()
            removed.append(path.name)
    if removed:
        click.echo(f"Note: removed an earlier run's {', '.join(removed)} from {out_dir}, so that only this run's "
                   f".{fmt} tables are there", err=True)


def warn_on_summary(summary: dict, *, clock: bool = True, settings: bool = True) -> None:
    """One-line stderr warnings of what is easy to miss in a table or in JSON: requests rejected
    (`sim.kernel.summary.rejection_warning`), settings that changed nothing (``ignored_settings``;
    ``settings=False`` skips them, for a run kvsim derived from the user's, such as compare's no-reuse
    baseline, whose own changes would read as the user's), costs the step clock leaves out (``clock_omits``;
    ``clock=False`` skips them, for runs of one deployment after the first) and what the allocator's memory
    leaves out (``memory_omits``, per allocator), which requests the latency figures and throughputs leave out
    (`sim.kernel.summary.exclusion_note`) and which latency figures rest on too few requests
    (``latency_notes``), a ``--max-model-len`` beyond the model's context
    (``beyond_model_context``, with the clock's) and why vLLM would not start the server (``vllm_would_refuse``,
    per allocator). Each names the run (``run``, else the allocator)."""
    from sim.kernel.ignored_settings import ignored_lines
    from sim.kernel.summary import exclusion_note, rejection_warning

    name = summary.get("run", summary["allocator"])
    line = rejection_warning(summary)
    if line:
        click.echo(line, err=True)
    if line := exclusion_note(summary):
        click.echo(line, err=True)
    figures_by_why: dict[str, list[str]] = {}
    for figure, why in summary.get("latency_notes", {}).items():  # one line per reason, not per figure
        figures_by_why.setdefault(why, []).append(figure)
    for why, figures in figures_by_why.items():
        click.echo(f"Note: {name}: {', '.join(figures)}: {why}", err=True)
    if capped := summary.get("length_capped"):
        click.echo(f"Note: {name}: {capped} of {summary['requests']} requests' outputs stopped at max_model_len, as "
                   "vLLM stops them (length_capped_tokens in the requests table; --over-length reject rejects "
                   "them instead)", err=True)
    for line in ignored_lines(summary) if settings else ():
        click.echo(f"Warning: {line}", err=True)
    for what in summary.get("clock_omits", []) if clock else ():
        click.echo(f"Note: the step clock omits {what}", err=True)
    for what in summary.get("memory_omits", []):
        click.echo(f"Note: {name}'s KV memory omits {what}", err=True)
    if clock and summary.get("beyond_model_context"):  # a deployment's note, as the clock's: once
        click.echo(f"Note: {summary['beyond_model_context']}", err=True)
    for why in summary.get("vllm_would_refuse", []):  # per allocator: each holds its own longest request
        click.echo(f"Warning: {name}: vLLM would refuse to start this server: {why}; kvsim runs it, rejecting with "
                   "their reason the requests that cannot fit", err=True)


@click.command("run", cls=OneSpellingCommand)
@click.option("--allocator", default="paged", show_default=True,
              help=f"{ALLOCATOR_NAMES}.")
@simulation_options
def run_command(allocator: str, **opts) -> None:
    """Simulate one allocator on a trace, a preset or the default preset.

    TRACE is a request trace file, its format detected from its columns (Azure, Mooncake, BurstGPT, Vidur or
    kvsim's own; `kvsim trace stats TRACE` shows how it reads). Without TRACE or --preset: the sharegpt-demo
    preset (the paper's ShareGPT lengths, 400 requests at 2 req/s) on OPT-13B and an A100-40GB, the KV memory
    derived from --gpu-memory-utilization. The first line (stderr) names the workload and the KV capacity's
    source."""
    from sim.kernel.runner import resolve_workload
    from sim.kernel.summary import format_summary

    try:
        config = build_config(allocator, opts)
        workload = resolve_workload(config)
        announce(config, workload)
        result = simulate(config, workload, opts["as_json"], opts["workers"])
        if opts["out"]:
            write_run(result, opts["out"], opts["out_format"])
    except (ValueError, KeyError, OSError) as exc:
        fail(exc)
    warn_on_summary(result.summary)
    if opts["as_json"]:
        click.echo(json.dumps(result.summary))
    elif "per_replica" in result.summary:
        from sim.kernel.fleet_summary import PER_REPLICA_KEYS, format_replicas

        click.echo(format_summary({k: v for k, v in result.summary.items() if k != "per_replica"}, PER_REPLICA_KEYS))
        click.echo(format_replicas(result.summary["per_replica"]))
    else:
        click.echo(format_summary(result.summary))


COMMANDS = [run_command]
