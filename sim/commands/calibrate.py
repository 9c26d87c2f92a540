"""``kvsim calibrate``: fit the step-cost model's coefficients, by timing kernels or from a measured run.

Without ``--from-trace`` it times a model's steps on this machine (`gpu_validation.calibration`; torch is
imported inside the command, so ``kvsim --help`` never loads it). With ``--from-trace FILE`` it fits to a
measured serving run by replaying it through kvsim (`sim.trace_fit`), no GPU needed. ``--list`` prints the
named cost profiles. Both fits write a ``kvsim-calibration`` table that ``--calibration`` and
``--cost-profile`` accept.
"""

from __future__ import annotations

import json
import math

import click

from gpu_validation import needs_torch
from sim.commands.failure import fail
from sim.commands.one_spelling import OneSpellingCommand
from sim.commands.options import catalog_option, kv_cache_dtype_option, vllm_lookalike_options, vllm_option
from sim.kernel.over_length import OVER_LENGTH
from sim.kernel.parallel_sampling import PARALLEL_SAMPLING


def _list_profiles() -> None:
    from sim.kernel.cost_profiles import DEFAULT_PROFILE, PROFILES

    for profile in PROFILES.values():
        default = " (default)" if profile.name == DEFAULT_PROFILE else ""
        click.echo(f"{profile.name}{default}: {profile.system}")
        for key, value in profile.coefficients.items():
            shown = ", ".join(f"{k}: {v:g}" for k, v in value.items()) if isinstance(value, dict) else f"{value:g}"
            click.echo(f"  {key} = {shown}")
            click.echo(f"      source: {profile.sources[key]}")
        for check in profile.checked:
            click.echo(f"  checked against: {check}")
    from sim.kernel.calibration_store import SHIPPED_DIR, kvsim_home

    click.echo("calibration tables (a run on that GPU and model uses one unless --cost-profile or --calibration "
               "says otherwise; yours before kvsim's; --cost-profile FILE or --calibration FILE takes any):")
    for label, root in (("shipped with kvsim", SHIPPED_DIR), ("yours", kvsim_home() / "calibration")):
        tables = sorted(root.glob("*/*.json"))
        click.echo(f"  {label} ({root}): " + (", ".join(f"--gpu {t.parent.name} --model {t.stem}" for t in tables)
                                              if tables else "none"))


def _check_fit_options(opts: dict) -> None:
    """The fit's own options, before the file is read. A NaN or negative --time-limit would stop the search
    after its first simulation without a word; the fit starts from a named profile's coefficients only
    (`sim.trace_fit` looks the name up), so a calibration table is refused here with a message that says so,
    rather than by the profile lookup, whose message offers tables (they work for --cost-profile)."""
    from sim.kernel.cost_profiles import PROFILES

    limit = opts["time_limit"]
    if not 0 < limit < math.inf:
        raise ValueError(f"--time-limit must be a finite number of seconds > 0, got {limit!r}")
    if opts["start_profile"] not in PROFILES:
        raise ValueError(f"--start-profile must be a named profile ({', '.join(PROFILES)}), got "
                         f"{opts['start_profile']!r}; a calibration table cannot be the fit's start (use it with "
                         "--calibration or --cost-profile)")


KERNEL_OPTIONS = ("device", "quick", "cuda_graphs")
"""Options of the kernel timing only (the default mode)."""


def _check_mode(ctx: click.Context, list_profiles: bool, from_trace: str | None) -> None:
    """The three modes take their own options: one mode's option given to another was dropped without a word
    (``--list --from-trace F`` listed; ``--from-trace F --quick`` fitted; ``--kv-tokens N`` without
    ``--from-trace`` went on to time kernels). Only options given on the command line count."""
    given = [p.name for p in ctx.command.params
             if p.name and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
    flag = {p.name: p.opts[0] for p in ctx.command.params if p.name}
    fit_only = [n for n in given if n not in KERNEL_OPTIONS + ("model", "gpu", "catalog", "out", "list_profiles",
                                                                "from_trace")]
    if list_profiles and len(given) > 1:
        fail(f"--list takes no other option (got {', '.join(flag[n] for n in given if n != 'list_profiles')})")
    if from_trace and (kernel := [n for n in given if n in KERNEL_OPTIONS]):
        fail(f"{', '.join(flag[n] for n in kernel)}: options of timing kernels, not of fitting a measured run "
             "(--from-trace)")
    if not from_trace and not list_profiles and fit_only:
        fail(f"{', '.join(flag[n] for n in fit_only)}: options of fitting a measured run; give --from-trace FILE")


FIT_WARNING_MAPE = 0.5
"""A held-out MAPE past which `calibrate --from-trace` warns that its table is no fit of the run: a fitted clock
is within tens of percent (`docs/validation.md`), latencies in milliseconds read as seconds land near 100% (the
simulation a thousand times short of them)."""


IMPLAUSIBLE_FRAC = 0.05
"""A fitted ``bandwidth_frac`` or ``flops_frac`` under which `calibrate --from-trace` warns: real servers reach tens of
percent of their GPU's peaks (vLLM 0.11 on an H100: 0.83 and 0.66, `docs/validation.md`), and latencies in
milliseconds read as seconds fit at about a thousandth of them."""


def _from_trace(path: str, opts: dict) -> None:
    from sim.kernel.config import SimConfig
    from sim.kernel.summary import counts_text
    from sim.measured import read_measured
    from sim.trace_fit import fit_trace, trace_table

    fields = ("model", "gpu", "kv_tokens", "kv_gib", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
              "block_size", "tensor_parallel", "gpu_memory_utilization", "kv_cache_dtype", "prefix_caching",
              "chunked_prefill", "parallel_sampling", "watermark", "seed", "catalog", "over_length", "async_scheduling")
    try:
        _check_fit_options(opts)
        if opts["gpu"] is None:
            raise ValueError("--from-trace needs --gpu (the catalog GPU the run was measured on)")
        config = SimConfig(**{k: opts[k] for k in fields if opts[k] is not None})
        run = read_measured(path)
        fit = tuple(name.strip() for name in opts["fit"].split(",") if name.strip())
        result = fit_trace(run, config, start_profile=opts["start_profile"], fit=fit, holdout=opts["holdout"],
                           seed=config.seed, max_evals=opts["max_evals"], time_limit_s=opts["time_limit"])
    except (ValueError, KeyError, OSError) as exc:
        fail(exc)
    table = trace_table(result, run, config)
    out = opts["out"] or f"calibration-{config.model}-{config.gpu}.json"
    try:
        with open(out, "w") as fh:
            fh.write(json.dumps(table, indent=2) + "\n")
    except OSError as exc:
        fail(f"{out}: cannot write: {exc}")
    c, f = table["coefficients"], table["fit"]
    click.echo(f"fit of {run.path} ({run.kind}, {len(run.frame)} requests) on {config.model} / {config.gpu}: "
               f"{f['simulations']} simulations, {f['seconds']} s, from profile {result.start_profile}")
    click.echo("  " + "  ".join(f"{k} {c[k]:g}" for k in result.fitted))
    for label, part in (("train", result.train_score), ("held-out", result.heldout_score)):
        rows = part[part["phase"] == "all"]
        click.echo(f"  {label} ({int(rows['requests'].max())} requests): " + ", ".join(
            f"{r.metric} MAPE {r.mape:.1%} bias {r.bias:+.1%}" if r.mape == r.mape
            else f"{r.metric} n/a (no request generated two tokens)" for r in rows.itertuples()))
    held = result.heldout_score
    worst = held[(held["phase"] == "all") & (held["mape"] > FIT_WARNING_MAPE)]
    if len(worst):  # a table is still written (the user asked for it), with a reason not to trust it
        click.echo(f"Warning: the fit misses the held-out half by {worst['mape'].max():.0%} "
                   f"({', '.join(worst['metric'])} MAPE): check that the run's latencies are in seconds and that "
                   "the settings are the run's own (--kv-tokens, --max-num-seqs, ...)", err=True)
    low = [k for k in ("bandwidth_frac", "flops_frac") if k in result.fitted and c[k] < IMPLAUSIBLE_FRAC]
    if low:  # a fit can absorb a unit error into the fractions and still score within FIT_WARNING_MAPE
        click.echo(f"Warning: the fit puts {' and '.join(f'{k} at {c[k]:.3g}' for k in low)}: a GPU running at under "
                   f"{IMPLAUSIBLE_FRAC:.0%} of its peak is implausible; check that the run's latencies are in seconds "
                   "and that --model and --gpu are the run's", err=True)
    if result.rejected:  # no simulated latency: left out of both scores, never silently
        click.echo(f"  {sum(result.rejected.values())} scored request(s) rejected by the simulation, left out of "
                   f"the scores: {counts_text(result.rejected)}")
    if result.length_capped:  # scored against a shorter run than was measured
        click.echo(f"  {result.length_capped} scored request(s) measured past max_model_len, their outputs stopped "
                   "there in the simulation as vLLM stops them (give the run's own --max-model-len, or "
                   "--over-length reject to leave them out)")
    if opts["as_json"]:
        click.echo(json.dumps(table))
    click.echo(f"wrote {out} (use it with --calibration or --cost-profile)")


@click.command("calibrate", cls=OneSpellingCommand)
@click.option("--model", "model", default="llama-3-8b", show_default=True,
              help="Catalog model to time (its shapes, random weights), or that the measured run served.")
@click.option("--gpu", "gpu", default=None, help="Catalog GPU this is (default: recognised from the device).")
@catalog_option
@click.option("--device", "device", type=click.Choice(["cuda", "cpu"]), default=None,
              help="Where to time (default: cuda if torch sees one, else cpu).")
@click.option("--quick", is_flag=True, help="A small grid (and on CPU, a model scaled down 8x).")
@click.option("--cuda-graphs/--no-cuda-graphs", "cuda_graphs", default=True, show_default=True,
              help="On a GPU, time each part as a CUDA graph's replay, as vLLM runs its forward pass (off: eager "
                   "launches, whose gaps at small batches are PyTorch's, not the engine's).")
@click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
              help="Table path (default $KVSIM_HOME/calibration/<gpu>/<model>.json, KVSIM_HOME defaulting to "
                   "~/.local/share/kvsim, where kvsim run finds it by --gpu and --model; never kvsim's shipped "
                   "tables; with --from-trace calibration-<model>-<gpu>.json); kernel measurements go beside it "
                   "(.csv).")
@click.option("--list", "list_profiles", is_flag=True, help="List the named cost profiles with their sources.")
@click.option("--from-trace", "from_trace", type=click.Path(dir_okay=False),
              help="Fit to a measured run: a per-request CSV (arrival_time_s,prompt_tokens,output_tokens,ttft_s,"
                   "e2e_s; a multi-turn session run's session_id,turn give each turn its previous turn's cache "
                   "hits, a shared system prompt's prefix_group,prefix_len and Mooncake-style hash_ids (block "
                   "hashes separated by spaces, prefix_hash_tokens each, default 512) the hits on shared "
                   "prompts), vLLM benchmark_serving --save-result JSON (arriving at its start_times, else at its "
                   "request_rate), or guidellm results JSON.")
@click.option("--kv-tokens", type=int, help="--from-trace: the run's KV pool in token slots (vLLM's log).")
@click.option("--kv-gib", type=float, help="--from-trace: the run's KV memory in GiB, all GPUs together.")
@click.option("--max-num-seqs", type=int, help="--from-trace: the run's vLLM setting.")
@click.option("--max-num-batched-tokens", type=int, help="--from-trace: the run's vLLM setting.")
@click.option("--max-model-len", type=int, help="--from-trace: the run's vLLM setting.")
@click.option("--over-length", type=click.Choice(OVER_LENGTH), default=None,
              help="--from-trace: a measured request past --max-model-len: stopped there in the simulation as "
                   "vLLM stops it (cap, the default) or left out of the scores (reject).")
@click.option("--block-size", type=int, help="--from-trace: the run's vLLM setting.")
@vllm_option("--tensor-parallel", "tensor_parallel", type=int, help="--from-trace: the run's vLLM setting.")
@click.option("--gpu-memory-utilization", type=float, help="--from-trace: the run's vLLM setting.")
@kv_cache_dtype_option
@vllm_option("--prefix-caching/--no-prefix-caching", "prefix_caching", default=None,
             help="--from-trace: the run's vLLM setting.")
@vllm_option("--chunked-prefill/--no-chunked-prefill", "chunked_prefill", default=None,
             help="--from-trace: the run's vLLM setting.")
@click.option("--async-scheduling/--no-async-scheduling", "async_scheduling", default=None,
              help="--from-trace: the run's vLLM setting (vLLM 0.33 turns it on by default; kvsim's default is "
                   "off: `kvsim run --async-scheduling`).")
@click.option("--parallel-sampling", type=click.Choice(PARALLEL_SAMPLING), default=None,
              help="--from-trace: how the run's requests sampled n > 1 times ran (its n column): fan-out "
                   "(vLLM v1: n requests sharing the prompt; what auto, the default, does on paged) or fork "
                   "(one group, vLLM v0's and kvsim's fork runs).")
@click.option("--watermark", type=float, default=0.0, show_default=True,
              help="--from-trace: admission watermark (vLLM V1 has none).")
@click.option("--start-profile", default="vllm-v1", show_default=True,
              help="--from-trace: profile the fit starts from and takes the unfitted coefficients of.")
@click.option("--fit", "fit", default="bandwidth_frac,flops_frac,seq_overhead_s", show_default=True,
              help="--from-trace: coefficients to fit (also step_overhead_s, prefill_token_s, mixed_overlap).")
@click.option("--holdout", type=click.Choice(["random", "time"]), default="random", show_default=True,
              help="--from-trace: fit a seeded random half of the requests (or the earlier half) and report "
                   "the error on the other half.")
@click.option("--seed", type=int, default=0, show_default=True, help="--from-trace: seed of the split and the run.")
@click.option("--max-evals", type=click.IntRange(min=2), default=60, show_default=True,
              help="--from-trace: most simulations of the run, over the search's two starts (the first gets half).")
@click.option("--time-limit", type=float, default=300.0, show_default=True,
              help="--from-trace: wall-clock limit of the fit, seconds.")
@click.option("--json", "as_json", is_flag=True, help="--from-trace: also print the table as JSON.")
@vllm_lookalike_options
def calibrate_command(model: str, gpu: str | None, catalog: str | None, device: str | None, quick: bool,
                      cuda_graphs: bool, out: str | None, list_profiles: bool, from_trace: str | None,
                      **opts) -> None:
    """Fit the step-cost model: time kernels on this machine (default), fit a measured run (--from-trace),
    or list the named cost profiles (--list). A CPU calibration (--device cpu) is labelled 'cpu' and drives
    `kvsim run --gpu cpu --model MODEL`."""
    from sim.kernel.calibration_store import user_table_path

    _check_mode(click.get_current_context(), list_profiles, from_trace)
    if list_profiles:
        _list_profiles()
        return
    if from_trace:
        _from_trace(from_trace, {"model": model, "gpu": gpu, "catalog": catalog, "out": out, **opts})
        return
    try:
        from gpu_validation.calibration import calibrate, write_run
        from gpu_validation.timing import GraphCaptureError
    except ImportError as exc:  # torch is the optional "gpu" extra
        fail(needs_torch("kvsim calibrate", exc))
    try:
        run = calibrate(model, device=device, gpu=gpu, quick=quick, cuda_graphs=cuda_graphs,
                        progress=lambda line: click.echo(f"  {line}", err=True))
    except (ValueError, KeyError, GraphCaptureError) as exc:
        fail(exc)
    table = run.table
    path = out or user_table_path(table["gpu"], table["model"])
    table_path, csv_path = write_run(run, path)
    c, f = table["coefficients"], table["fit"]
    label = "CPU numbers" if table["device"] == "cpu" else f"{table['device_name']}, {table['timing']}"
    click.echo(f"calibration of {table['model']} on {table['gpu']} ({label}, {table['dtype']}, "
               f"timed as {table['timed_model']})")
    click.echo(f"  bandwidth_frac {c['bandwidth_frac']}  flops_frac {c['flops_frac']}  "
               f"step_overhead_s {c['step_overhead_s']}")
    click.echo("  paged_kernel_overhead " + "  ".join(f"{k}: {v}" for k, v in c["paged_kernel_overhead"].items()))
    click.echo(f"  fit: {f['points']} points, rmse {f['rmse_s'] * 1e3:.3g} ms, mape {f['mape']:.1%}")
    click.echo(f"wrote {table_path} and {csv_path}")
    click.echo(f"use it: kvsim run --gpu {table['gpu']} --model {table['model']}"
               + ("" if out is None else f" --calibration {table_path}"))


COMMANDS = [calibrate_command]
