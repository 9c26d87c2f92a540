"""``kvsim trace``: summarise a request trace (``stats``) or write a synthetic one (``generate``).

Heavy imports (pandas, the readers) happen inside the commands so that ``kvsim --help`` stays fast.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from sim.commands.failure import fail
from sim.commands.options import columns_option, trace_format_option

if TYPE_CHECKING:
    from workloads.arrivals import ArrivalProcess
    from workloads.lengths import LengthDistribution

SPEC_HELP = """
\b
Spec grammar: KIND[:key=value[,key=value...]]
\b
--lengths (every kind also takes max_total=T, a cap on prompt + output):
  fixed:prompt=P,output=O
  uniform:prompt_min=A,prompt_max=B,output_min=C,output_max=D
  lognormal:prompt_mean=M,prompt_cv=C,output_mean=M,output_cv=C  (pre-cap lognormal)
  zipf:prompt_s=S,prompt_max=M,output_s=S,output_max=M
  empirical:trace=FILE_OR_PRESET  (resample (prompt, output) pairs)
\b
--arrivals:
  poisson:rate=R            gamma:rate=R,cv=C           constant:rate=R
  trace[:rate=R][,path=FILE_OR_PRESET]  (a trace's own timestamps, time-scaled to R; each used once, so
                             --num-requests is at most its rows; without path=, the empirical trace's)
  closed:users=N[,think_s=T]  (closed loop; arrivals all 0 plus a marker the simulator honours)
\b
Limits: token counts and means up to 10^9 (what a trace row may hold), a cv within [1e-100, 1e100], at most
10^8 requests, --n and --beam-width up to 10^6, and arrival times, gaps and think times up to 1e9 s (32 years,
within which kvsim's clock resolves a step).
\b
Example: --lengths "lognormal:prompt_mean=161,prompt_cv=1.2,output_mean=338,output_cv=1.0,max_total=2048"
         --arrivals "gamma:rate=2,cv=3"
"""


def _fail(error: Exception) -> None:

    fail(error)


def _load(file: str, format_: str | None, skip_bad_rows: bool, columns: str | None = None):
    from pathlib import Path

    from workloads import PRESETS, load_preset, load_trace

    if file in PRESETS and not Path(file).exists():
        return load_preset(file)
    return load_trace(file, format=format_, columns=columns, skip_bad_rows=skip_bad_rows)


def format_stats(stats: dict) -> str:
    """The human-readable form of `workloads.trace_stats`."""
    rate = f"{stats['rate_rps']:.3f} req/s" if stats["rate_rps"] else "n/a"
    cv = f"{stats['interarrival_cv']:.2f}" if stats["interarrival_cv"] is not None else "n/a"
    skipped = ", ".join(f"{n} {r}" for r, n in stats["skipped_reasons"].items()) or "none"
    lines = [
        f"{stats['name']}: {stats['rows']:,} requests; skipped rows: {stats['skipped_rows']} ({skipped})",
        f"source: {stats['source']}",
        f"duration {stats['duration_s']:.1f} s, rate {rate}, inter-arrival CV {cv}"
        + (f" (the {stats['timed_rows']:,} rows that arrive on their own)" if stats["released_turns"] else ""),
        f"{'':15}{'mean':>10}{'p50':>10}{'p99':>10}{'max':>10}",
    ]
    for key in ("prompt_tokens", "output_tokens"):
        s = stats[key]
        lines.append(f"{key.replace('_', ' '):15}{s['mean']:>10.1f}{s['p50']:>10.1f}{s['p99']:>10.1f}{s['max']:>10.0f}")
    if stats["prefix_reuse_share"] is not None:
        lines.append(f"prefix reuse: {stats['prefix_reuse_share']:.1%} of {stats['prefix_reuse_basis']}")
    if stats["closed_loop_users"]:
        lines.append(f"closed loop of {stats['closed_loop_users']} users, think time {stats['think_time_mean_s']:g} s "
                     "(arrival times come from the simulation)")
    if stats["sessions"]:
        lines.append(f"{stats['sessions']:,} sessions, {stats['session_turns'] / stats['sessions']:.1f} turns each on average"
                     + (f"; {stats['released_turns']:,} later turns arrive when their previous turn ends, after a "
                        f"think time of {stats['think_time_mean_s']:g} s on average" if stats["released_turns"] else ""))
    return "\n".join(lines)


def with_samples(workload, n: int, beam_width: int):
    """``workload`` with every request asking for ``n`` parallel samples or a beam of ``beam_width``."""
    import dataclasses

    import numpy as np

    if n < 1 or beam_width < 1:
        raise ValueError(f"--n and --beam-width must be >= 1, got {n} and {beam_width}")
    if n > 1 and beam_width > 1:
        raise ValueError("use either --n (parallel sampling) or --beam-width, not both")
    if n == 1 and beam_width == 1:
        return workload
    size = len(workload)
    label = f"n={n}" if n > 1 else f"beam_width={beam_width}"
    return dataclasses.replace(workload, n=np.full(size, n, np.int64), beam_width=np.full(size, beam_width, np.int64),
                               source=f"{workload.source}; every request {label}")


def check_trace_times(lengths: LengthDistribution, arrivals: ArrivalProcess, arrivals_spec: str,
                      num_requests: int) -> None:
    """Refuse ``--arrivals trace`` for more requests than its trace has timestamps. The trace is ``path=FILE``,
    else the one ``--lengths empirical:trace=FILE`` resamples. `TraceTimes` would repeat the timestamps
    cyclically, with their mean gap invented between repeats, a pattern the trace does not have; `kvsim run
    FILE --num-requests N` refuses N past the trace's rows, and generate says the same (one line, naming the
    file). Other arrival processes draw as many times as asked."""
    from workloads.arrivals import TraceTimes
    from workloads.lengths import Empirical
    from workloads.sessions import closed_loop_turns
    from workloads.specs import parse_spec

    if not isinstance(arrivals, TraceTimes):
        return
    if arrivals.source is not None:  # the file or preset as given (the workload's name is the file's stem)
        source, name = arrivals.source, parse_spec(arrivals_spec, "arrivals")[1].get("path", arrivals.source.name)
    elif isinstance(lengths, Empirical):
        source, name = lengths.workload, lengths.trace or lengths.workload.name
    else:
        return  # no trace to take timestamps from: `TraceTimes` says so
    timed = int((~closed_loop_turns(source)[1]).sum())  # a session's released turns have no time of their own
    if num_requests > timed:
        rows = f"{timed} that arrive on their own" if timed < len(source) else f"{timed}"
        raise ValueError(f"{name}: --num-requests {num_requests} asks for more requests than the trace has "
                         f"({rows}); --arrivals trace uses each of its timestamps once")


@click.group("trace")
def trace() -> None:
    """Read, summarise and generate request traces."""


@trace.command("stats")
@click.argument("file")
@trace_format_option
@columns_option
@click.option("--skip-bad-rows", is_flag=True, help="Skip bad rows (counted and reported) instead of failing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def stats(file: str, trace_format: str | None, trace_columns: str | None, skip_bad_rows: bool,
          as_json: bool) -> None:
    """Rows, duration, rate, inter-arrival CV, token-length percentiles and prefix reuse of FILE.

    FILE is a trace file (CSV, JSONL or Parquet) or a preset name (sharegpt-paper, alpaca-paper,
    sharegpt-demo, azure-code, azure-conv, mooncake-conv, sharegpt-etalon)."""
    from workloads import trace_stats

    try:
        result = trace_stats(_load(file, trace_format, skip_bad_rows, trace_columns))
    except (ValueError, OSError) as error:
        _fail(error)
        return
    click.echo(json.dumps(result, indent=2) if as_json else format_stats(result))


@trace.command("generate", epilog=SPEC_HELP)
@click.option("--preset", default=None, help="A preset name instead of --lengths/--arrivals.")
@click.option("--lengths", default=None, help="Length distribution spec (grammar below).")
@click.option("--arrivals", default=None, help="Arrival process spec (grammar below).")
@click.option("--num-requests", type=int, default=None, help="Requests to generate (presets: optional).")
@click.option("--rate", type=float, default=None, help="Presets only: target request rate in req/s.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random draw.")
@click.option("--n", "n", type=int, default=1, show_default=True, help="Parallel samples per request.")
@click.option("--beam-width", type=int, default=1, show_default=True, help="Beam width per request.")
@click.option("--system-prompt-len", type=int, default=0, show_default=True,
              help="Tokens of a shared system prompt (with --system-prompt-frac).")
@click.option("--system-prompt-frac", type=float, default=0.0, show_default=True,
              help="Share of requests that carry the system prompt (0-1; with --system-prompt-len).")
@click.option("--turns", type=int, default=1, show_default=True,
              help="Turns per multi-turn conversation (fewer where the next turn would pass max_total, or its "
                   "prompt 1e9 tokens, the most a trace row holds, or, "
                   "open loop, where the arrivals end before it: warned). Open "
                   "loop (--turn-gap-s) --arrivals times every request, so its rate stays the request rate and "
                   "K turns start about 1/K as many conversations; closed loop (--think-time-s) it times the "
                   "first turns, so K turns make about K times as many requests a second as its rate.")
@click.option("--turn-gap-s", type=float, default=None,
              help="Least time between a conversation's turns (open loop: from arrival to arrival) "
                   "[default: 30].")
@click.option("--think-time-s", type=float, default=None,
              help="Closed loop per session: each later turn arrives this long after the previous turn ends "
                   "(instead of --turn-gap-s).")
@click.option("--out", required=True, help="Output file; format by extension: .csv, .jsonl, .parquet.")
def generate_command(preset, lengths, arrivals, num_requests, rate, seed, n, beam_width, system_prompt_len,
                     system_prompt_frac, turns, turn_gap_s, think_time_s, out) -> None:
    """Write a synthetic workload (or a preset) in the canonical kvsim format."""
    from workloads import generate, load_preset, write_trace
    from workloads.named import parse_arrivals, parse_lengths

    try:
        if preset is not None:
            if lengths or arrivals:
                raise ValueError("give either --preset or --lengths/--arrivals, not both")
            if (turns != 1 or system_prompt_len or system_prompt_frac or turn_gap_s is not None
                    or think_time_s is not None):
                raise ValueError("--turns, --turn-gap-s, --think-time-s and --system-prompt-* shape synthetic "
                                 "requests; use them "
                                 "with --lengths/--arrivals, not --preset")
            workload = with_samples(load_preset(preset, num_requests=num_requests, rate=rate, seed=seed),
                                    n, beam_width)
        else:
            if not (lengths and arrivals and num_requests is not None):
                raise ValueError("give --preset, or all of --lengths, --arrivals and --num-requests")
            if rate is not None:
                raise ValueError("--rate applies to presets; put the rate in --arrivals")
            dist, process = parse_lengths(lengths), parse_arrivals(arrivals)
            check_trace_times(dist, process, arrivals, num_requests)
            workload = generate(dist, process, num_requests, seed, n=n, beam_width=beam_width,
                                system_prompt_len=system_prompt_len, system_prompt_frac=system_prompt_frac,
                                turns=turns, turn_gap_s=turn_gap_s, think_time_s=think_time_s)
        path = write_trace(workload, out)
    except (ValueError, OSError) as error:
        _fail(error)
        return
    click.echo(f"wrote {len(workload):,} requests to {path} ({workload.source})")


COMMANDS = [trace]
