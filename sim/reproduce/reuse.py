"""Prefix reuse experiments for the notebooks: one workload under several cache designs, side by side.

A *setup* is a name and the `SimConfig` fields that make it (the allocator, prefix caching on or off, a host
tier's size); `run_setups` runs a workload under each on one deployment, `reuse_table` puts the reuse figures
side by side, and `reuse_figure` draws `sim.plots.plot_reuse` from the results, so a notebook cell is one call;
`router_table` runs a workload on fleets behind several routers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from sim.kernel.config import SimConfig
from sim.sweep.grid import one_or_many

NO_REUSE = {"allocator": "paged", "prefix_caching": False}
"""The baseline: vLLM's paged KV cache with prefix caching off."""
REUSE_COLUMNS = ("completed", "rejected", "prefill_tokens", "cached_prompt_tokens", "prefix_hit_frac",
                 "gpu_hit_tokens", "host_hit_tokens", "offload_bytes", "offload_stores_skipped", "reload_bytes",
                 "ttft_p50_s", "ttft_p99_s", "throughput_tok_s")
FLEET_COLUMNS = ("completed", "prefix_hit_frac", "ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "throughput_tok_s",
                 "load_imbalance")


def sessions_workload(num_requests: int = 600, *, turns: int = 4, think_time_s: float = 10.0, rate: float = 4.0,
                      system_prompt_len: int = 1024, seed: int = 0):
    """A synthetic chat workload: sessions of ``turns`` turns (closed loop: a turn arrives ``think_time_s``
    after the previous one ends) starting as a Poisson process at ``rate`` sessions/s, ShareGPT-like message
    and answer lengths, and a shared system prompt on half of them."""
    from workloads import generate

    lengths = "lognormal:prompt_mean=400,prompt_cv=1.0,output_mean=250,output_cv=1.0,max_total=16000"
    return generate(lengths, f"poisson:rate={rate:g}", num_requests, seed, turns=turns, think_time_s=think_time_s,
                    system_prompt_len=system_prompt_len, system_prompt_frac=0.5, name="synthetic sessions")


def run_setups(workload, setups: Mapping[str, Mapping], **deployment) -> dict:
    """One `SimResult` per setup (name -> `SimConfig` fields), all on ``deployment`` (model, gpu, ...)."""
    from sim.kernel.runner import run_simulation

    return {name: run_simulation(SimConfig(**(dict(deployment) | dict(fields))), workload)
            for name, fields in setups.items()}


def router_table(workload, routers: Sequence[str], replicas: Sequence[int], **deployment) -> pd.DataFrame:
    """One fleet run per router and replica count, every replica ``deployment`` (model, gpu, allocator, ...): on
    several replicas a conversation's next turn finds its past in the cache only where the router sends it. A
    row per run: ``router``, ``replicas`` and the summary's `FLEET_COLUMNS` (empty ``load_imbalance`` for one
    replica); `sim.plots.plot_hit_rate_by_router` draws it (with ``x="replicas"``). A lone router or replica
    count is a list of one."""
    from sim.kernel.runner import run_simulation

    rows = []
    for n in one_or_many(replicas, "replicas"):
        for router in one_or_many(routers, "routers"):
            summary = run_simulation(SimConfig(**deployment, replicas=n, router=router), workload).summary
            rows.append({"router": router, "replicas": n} | {k: summary.get(k) for k in FLEET_COLUMNS})
    return pd.DataFrame(rows)


def reuse_table(results: Mapping, baseline: str | None = "no reuse") -> pd.DataFrame:
    """The reuse figures of each run (a key a run's summary lacks, e.g. host hits without a host tier, is
    empty), plus ``prefill_saved_frac``: the share of the ``baseline`` run's prefill tokens each run did not
    compute. ``baseline`` must name one of the runs (a misspelled name would drop the column without a word);
    None leaves the column out."""
    rows = {name: {k: r.summary.get(k) for k in REUSE_COLUMNS} for name, r in results.items()}
    table = pd.DataFrame.from_dict(rows, orient="index")
    if baseline is not None and baseline not in table.index:
        raise ValueError(f"reuse_table: baseline {baseline!r} is not one of the runs "
                         f"({', '.join(map(repr, table.index))}); pass one of them, or baseline=None")
    if baseline is not None:
        table["prefill_saved_frac"] = 1 - table["prefill_tokens"] / table.loc[baseline, "prefill_tokens"]
    return table


def reuse_figure(results: Mapping, title: str | None = "Prefix reuse"):
    """`sim.plots.plot_reuse` of the results: hits by tier over time, prefill saved, TTFT."""
    from sim.plots import plot_reuse

    return plot_reuse({k: r.steps for k, r in results.items()}, {k: r.requests for k, r in results.items()},
                      {k: r.summary for k, r in results.items()}, title=title)
