"""``kvsim compare``: several allocators on the same workload, their summaries side by side.

Every allocator sees the same requests and arrivals (the workload is resolved once); the flags are `kvsim
run`'s (``run.py``'s `simulation_options`), with ``--allocators`` a comma-separated list.
"""

from __future__ import annotations

import json

import click

from sim.commands.failure import fail
from sim.commands.one_spelling import OneSpellingCommand
from sim.commands.options import ALLOCATOR_NAMES
from sim.commands.run import announce, build_config, simulate, simulation_options, warn_on_summary, write_run
from sim.commands.sweep import skipped_rows_lines

COMPARE_KEYS = ("completed", "rejected", "preemptions", "sim_time_s", "throughput_tok_s", "throughput_req_s",
                "mean_running", "max_running", "normalized_latency_s_per_tok", "ttft_p50_s", "ttft_p99_s",
                "tpot_p50_s", "e2e_p50_s", "token_states_frac", "reservation_frac", "internal_frag_frac",
                "external_frag_frac", "free_frac", "block_usage_frac", "shared_saved_frac", "prefill_tokens",
                "cached_prompt_tokens", "prefix_hit_frac", "prefix_cache_hit_rate", "preempted_hit_tokens",
                "gpu_hit_tokens", "host_hit_tokens", "offload_bytes", "reload_bytes", "cached_frac", "wall_time_s")


def allocator_names(allocator: str | None, old_spelling: str | None) -> list[str]:
    """The names ``--allocator`` (or its old spelling ``--allocators``) lists, in order; empty when neither is
    given. Both given is an error rather than one silently winning, and so is a name listed twice: its two
    runs would be one run's repeat, and with ``--out DIR`` the second would overwrite DIR/NAME."""
    if allocator is not None and old_spelling is not None:
        raise ValueError(f"--allocator {allocator} and --allocators {old_spelling}: give one of --allocator and "
                         "--allocators (the old spelling of --allocator)")
    flag, given = ("--allocator", allocator) if allocator is not None else ("--allocators", old_spelling)
    if not given:
        return []
    names = [name.strip() for name in given.split(",")]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ValueError(f"{flag} lists {name} twice; give each allocator once")
    return names


@click.command("compare", cls=OneSpellingCommand)
@click.option("--allocator", "allocators", default=None,
              help=f"Comma-separated allocator names (default: all of {ALLOCATOR_NAMES}).")
@click.option("--allocators", "allocators_alias", default=None, hidden=True,
              help="The old spelling of --allocator; giving both is an error, as TRACE and --trace.")
@click.option("--reuse-baseline", is_flag=True,
              help="Also run each allocator whose prefix cache hit anything without prefix caching (named "
                   "ALLOCATOR-no-reuse), to show what reuse does to prefill and TTFT; a note names each allocator "
                   "that gets no such run, and why.")
@simulation_options
def compare_command(allocators: str | None, allocators_alias: str | None, reuse_baseline: bool, **opts) -> None:
    """Run several allocators on the same workload and show their summaries side by side.

    TRACE and the options are those of `kvsim run`; every allocator sees the same requests and arrivals.
    --out DIR writes each allocator's run to DIR/ALLOCATOR (for `kvsim plot DIR/*`; `--kind reuse` draws hits
    by tier, prefill saved and TTFT)."""
    from dataclasses import replace
    from pathlib import Path

    from allocators import ALLOCATORS
    from sim.kernel.fleet_summary import PER_REPLICA_KEYS
    from sim.kernel.runner import resolve_workload
    from sim.kernel.summary import format_comparison

    summaries, no_baseline = [], []
    try:
        names = allocator_names(allocators, allocators_alias) or list(ALLOCATORS)
        workload = None
        for name in names:
            config = build_config(name, opts)
            if workload is None:
                workload = resolve_workload(config)
                announce(config, workload)
            runs = [(name, config)]
            if reuse_baseline and config.prefix_caching:
                runs.append((f"{name}-no-reuse", replace(config, prefix_caching=False)))
            elif reuse_baseline:
                no_baseline.append(f"{name}: prefix caching is off (--no-prefix-caching)")
            for run_name, run_config in runs:
                if run_name != name and not summaries[-1]["cached_prompt_tokens"]:
                    no_baseline.append(f"{name}: it reused no cached prompt token (cached_prompt_tokens 0), so {run_name} "
                                       "would repeat its run")
                    break
                result = simulate(run_config, workload, opts["as_json"], opts["workers"], note=not summaries)
                if run_name != name:
                    result.summary["run"] = run_name
                if opts["out"]:
                    write_run(result, Path(opts["out"]) / run_name, opts["out_format"])
                summaries.append(result.summary)
    except (ValueError, KeyError, OSError) as exc:
        fail(exc)
    for i, summary in enumerate(summaries):
        warn_on_summary(summary, clock=i == 0, settings="run" not in summary)  # one deployment, one clock
    for why in no_baseline:  # a column the user asked for and does not get: said, not left out in silence
        click.echo(f"Note: --reuse-baseline: no run without reuse for {why}", err=True)
    if opts["as_json"]:
        click.echo(json.dumps(summaries))
        return
    first = summaries[0]
    click.echo(f"workload: {first['workload']} ({first['requests']} requests) - {first['workload_source']}")
    # as `kvsim run`'s summary table says them (--json: each summary's skipped_rows and skipped_reasons); one
    # workload, so the first summary's count is every run's
    trace = opts["trace_option"] or opts["trace"]
    for line in skipped_rows_lines([{**first, "trace": trace, "skip_bad_rows": opts["skip_bad_rows"]}]):
        click.echo(line)
    fleet = PER_REPLICA_KEYS if "per_replica" in first else frozenset()
    click.echo(f"deployment: {first['model']} on {first['gpu']}, {first['kv_capacity_tokens']} KV token slots"
               + (f" per replica ({first['replicas']} replicas)" if fleet else "") + ", "
               f"block size {first['block_size']}, {first['scheduler']} batching, {first['cost_model']}"
               + "".join(f"; {s['allocator']}: {s['page_tokens']}-token pages of {s['page_size_kib']} KiB"
                         for s in summaries if s.get("page_tokens")))
    click.echo(format_comparison(summaries, COMPARE_KEYS, fleet))


COMMANDS = [compare_command]
