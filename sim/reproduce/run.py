"""`reproduce_paper`: run every experiment of `sim.reproduce.experiments` and compare with the paper.

The result is data (`Reproduction`): summaries and tidy tables, the sustained rates and the list of checks.
Figures and files are made from it by `sim.reproduce.report`, so a notebook can run a quick reproduction and
draw whichever figure it wants.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from sim.reproduce import checks as C
from sim.reproduce import paper
from sim.reproduce.experiments import (
    QUICK,
    RunOutput,
    Sizes,
    block_size_specs,
    fig2_specs,
    latency_curves,
    preemption_specs,
    run_specs,
    sharing_specs,
    size_curves,
    summary_rows,
)
from sim.reproduce.sustained import LATENCY_BOUND_S_PER_TOKEN, sustained_rates

EXPERIMENTS = ("capacity", "fig2", "curves", "sizes", "block-size", "preemption", "sharing")


@dataclass
class Reproduction:
    """Everything one reproduction measured; tables are empty for experiments that were not run."""

    sizes: Sizes
    capacity: dict = field(default_factory=dict)
    fig2: dict[str, RunOutput] = field(default_factory=dict)
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    sustained: dict[str, dict[str, float]] = field(default_factory=dict)
    size_curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    size_sustained: dict[str, dict[str, float]] = field(default_factory=dict)  # model -> allocator -> req/s
    block_sizes: pd.DataFrame = field(default_factory=pd.DataFrame)
    preemption: pd.DataFrame = field(default_factory=pd.DataFrame)
    sharing: pd.DataFrame = field(default_factory=pd.DataFrame)
    checks: list[C.Check] = field(default_factory=list)
    bound_s_per_token: float = LATENCY_BOUND_S_PER_TOKEN
    wall_s: dict[str, float] = field(default_factory=dict)

    @property
    def fig2_summaries(self) -> dict[str, dict]:
        return {name: out.summary for name, out in self.fig2.items()}


def measure_capacity() -> dict:
    """Fill a real contiguous-max allocator of the paper's size with 2,048-token requests until one does not
    fit; the leftover slots are what Max can never use."""
    from allocators import make_allocator
    from allocators.capacity import fill_to_capacity, kv_capacity
    from allocators.catalog import get_model

    slots = kv_capacity(get_model(paper.MODEL), kv_gib=paper.KV_GIB).kv_tokens
    alloc = make_allocator("contiguous-max", slots, max_model_len=paper.MAX_MODEL_LEN)
    fit = fill_to_capacity(alloc, 1, paper.MAX_MODEL_LEN - 1)
    b = alloc.breakdown(waiting=True)
    return {"slots": slots, "max_fit": fit, "unusable_frac": (b.external_frag + b.free) / slots}


def reproduce_paper(sizes: Sizes = QUICK, *, workers: int = 1, experiments: tuple[str, ...] = EXPERIMENTS,
                    log: Callable[[str], None] | None = None) -> Reproduction:
    """Run the chosen experiments at ``sizes`` and compare them with the paper (``sim.reproduce.paper``)."""
    unknown = set(experiments) - set(EXPERIMENTS)
    if unknown:
        raise ValueError(f"unknown experiment(s) {sorted(unknown)}; choose from {', '.join(EXPERIMENTS)}")
    say = log or (lambda _message: None)
    rep = Reproduction(sizes)

    def timed(name: str, fn: Callable[[], None]) -> None:
        if name in experiments:
            start = time.perf_counter()
            fn()
            rep.wall_s[name] = time.perf_counter() - start
            say(f"{name}: done in {rep.wall_s[name]:.1f} s")

    def capacity() -> None:
        rep.capacity = measure_capacity()
        rep.checks += C.capacity_checks(**rep.capacity)

    def fig2() -> None:
        outputs = run_specs(fig2_specs(sizes), workers)
        rep.fig2 = {o.labels["allocator"]: o for o in outputs}
        rep.checks += C.breakdown_checks(rep.fig2_summaries) + C.batch_checks(rep.fig2_summaries)

    def curves() -> None:
        rep.curves = latency_curves(sizes, workers=workers)
        for preset, group in rep.curves.groupby("workload", sort=False):
            rep.sustained[preset] = sustained_rates(group, rep.bound_s_per_token)
        if "sharegpt-paper" in rep.sustained:
            rep.checks += C.sustained_checks(rep.sustained["sharegpt-paper"])

    def model_sizes() -> None:
        rep.size_curves = size_curves(sizes, workers=workers)
        for model, group in rep.size_curves.groupby("model", sort=False):
            rep.size_sustained[model] = sustained_rates(group, rep.bound_s_per_token)
            rep.checks += C.sustained_checks(rep.size_sustained[model], model)

    def block_size() -> None:
        rep.block_sizes = summary_rows(run_specs(block_size_specs(sizes), workers))
        rep.checks += C.block_size_checks(rep.block_sizes)

    def preemption() -> None:
        rep.preemption = summary_rows(run_specs(preemption_specs(sizes), workers))
        rep.checks += C.preemption_checks(rep.preemption)

    def sharing() -> None:
        rep.sharing = summary_rows(run_specs(sharing_specs(sizes), workers))
        rep.checks += C.sharing_checks(rep.sharing)

    timed("capacity", capacity)
    timed("fig2", fig2)
    timed("curves", curves)
    timed("sizes", model_sizes)
    timed("block-size", block_size)
    timed("preemption", preemption)
    timed("sharing", sharing)
    return rep
