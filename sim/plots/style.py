"""Shared look of kvsim's figures: one colour per allocator and per memory share, and readable labels.

Every figure draws allocators in the same order and colours (the paper's order: Max, Pow2, Oracle, paged), so
a reader who has learnt one figure can read the next at a glance. Memory shares use the same five colours in
every stacked chart, from the useful (token states, dark green) to the idle (free, pale grey).
"""

from __future__ import annotations

from collections.abc import Iterable

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from allocators import ALLOCATORS
from allocators.base import SHARE_NAMES

ALLOCATOR_ORDER = tuple(ALLOCATORS)
"""The catalog's order, which is the paper's (Max, Pow2, Oracle, paged), then the allocators it adds."""

ALLOCATOR_COLORS = {
    "contiguous-max": "#c44e52",
    "contiguous-pow2": "#dd8452",
    "contiguous-oracle": "#ccb974",
    "paged": "#4c72b0",
    "paged-cow": "#55a868",
    "vattention": "#8172b3",
    "radix": "#da8bc3",
}
SERIES_COLORS = ("#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#64b5cd", "#2f4b7c")
"""Colours for series that are not allocators (workloads, block sizes), and for unknown allocators."""

ALLOCATOR_LABELS = {
    "contiguous-max": "Max (contiguous)",
    "contiguous-pow2": "Pow2 (contiguous)",
    "contiguous-oracle": "Oracle (contiguous)",
    "paged": "Paged",
    "paged-cow": "Paged + CoW",
    "vattention": "vAttention",
    "radix": "Radix tree",
}

SHARES = SHARE_NAMES
"""The five shares of KV capacity (`docs/paper-facts.md` section 4), bottom to top in stacked charts."""

SHARE_LABELS = {
    "token_states": "Token states",
    "reservation": "Reservation",
    "internal_frag": "Internal frag.",
    "external_frag": "External frag. & overhead",
    "free": "Free (idle)",
    "external_and_free": "External frag. & others",
    "waste_together": "Waste (not split)",
}

SHARE_COLORS = {
    "token_states": "#2e7d32",
    "reservation": "#90caf9",
    "internal_frag": "#ef6c00",
    "external_frag": "#c62828",
    "free": "#e0e0e0",
    "external_and_free": "#c62828",
    "waste_together": "#9e9e9e",
}

PAPER_HATCH = "///"
"""Hatching marks bars drawn from the paper's values rather than from a kvsim run."""


def allocator_label(name: str) -> str:
    return ALLOCATOR_LABELS.get(name, name)


def allocator_tick_label(name: str) -> str:
    """The label on two lines (``Max\\n(contiguous)``) so that side-by-side bars' labels never overlap."""
    return allocator_label(name).replace(" (", "\n(")


def allocator_color(name: str) -> str:
    """The allocator's fixed colour; unknown names get a stable colour from a fallback cycle."""
    if name in ALLOCATOR_COLORS:
        return ALLOCATOR_COLORS[name]
    return SERIES_COLORS[sum(name.encode()) % len(SERIES_COLORS)]


def run_colors(names: Iterable[str]) -> dict[str, str]:
    """Colours for the runs of one figure: an allocator keeps its fixed colour, any other run (``paged + host``,
    ``no reuse``) takes the next series colour no earlier run of the figure uses, so no two runs share one
    (`allocator_color` alone hashes unknown names, and two can collide). Past the series colours come those of
    allocators the figure does not draw; past those, colours repeat."""
    names = list(dict.fromkeys(names))
    colors = {n: ALLOCATOR_COLORS[n] for n in names if n in ALLOCATOR_COLORS}
    palette = dict.fromkeys((*SERIES_COLORS, *ALLOCATOR_COLORS.values()))
    spare = [c for c in palette if c not in colors.values()] or list(SERIES_COLORS)
    others = [n for n in names if n not in colors]
    colors.update({n: spare[i % len(spare)] for i, n in enumerate(others)})
    return {n: colors[n] for n in names}


def order_allocators(names: Iterable[str]) -> list[str]:
    """Known allocators in the paper's order, then any others in the order given."""
    names = list(dict.fromkeys(names))
    known = [n for n in ALLOCATOR_ORDER if n in names]
    return known + [n for n in names if n not in ALLOCATOR_ORDER]


def figure_and_axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """Draw into the caller's axes when given (so figures compose), else into a new figure.

    New figures are plain `Figure` objects, not pyplot ones: nothing accumulates in pyplot's global figure
    list when a sweep draws hundreds, and a notebook shows each figure once (as the cell's value).
    """
    if ax is not None:
        return ax.figure, ax
    fig = new_figure(figsize)
    return fig, fig.add_subplot()


def new_figure(figsize: tuple[float, float]) -> Figure:
    return Figure(figsize=figsize, layout="constrained")


def percent_axis(ax: Axes, axis: str = "y") -> None:
    """Format a 0-1 axis as percentages, with as many decimals as the axis range needs (whole percents on
    a 0-100% axis; a panel of waste under 2% gets 0.5%, 1.0%, ... rather than repeated "1%" labels)."""
    from matplotlib.ticker import PercentFormatter

    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(PercentFormatter(xmax=1.0, decimals=None))


def count_axis(ax: Axes, axis: str = "x") -> None:
    """Format an axis of large counts with SI prefixes (200k, 1.5M): no "1e6" offset text, which sits beside
    the axis label and reads as part of it."""
    from matplotlib.ticker import EngFormatter

    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(EngFormatter(sep=""))


def wrap_label(label: str, width: int = 28) -> str:
    """A tick label broken at spaces onto lines of at most ``width`` characters, so one long run name does not
    widen its panel's margin at the other panels' expense."""
    import textwrap

    return "\n".join(textwrap.wrap(label, width, break_on_hyphens=False)) or label


AXIS_LABELS = {
    "rate": "arrival rate (req/s)",
    "block_size": "block size (tokens)",
    "kv_gib": "KV memory (GiB)",
    "kv_tokens": "KV memory (token slots)",
    "max_num_seqs": "max running sequences",
    "max_num_batched_tokens": "token budget per step (tokens)",
    "num_requests": "requests",
    "tensor_parallel": "tensor-parallel GPUs",
    "gpu_memory_utilization": "GPU memory utilization (share)",
    "swap_space_gib": "swap space (GiB per GPU)",
    "normalized_latency_s_per_tok": "normalized latency (s/token)",
    "throughput_tok_s": "throughput (tokens/s)",
    "throughput_req_s": "throughput (req/s)",
    "ttft_p50_s": "time to first token, median (s)",
    "ttft_p99_s": "time to first token, p99 (s)",
    "tpot_p50_s": "time per output token, median (s)",
    "e2e_p50_s": "end-to-end latency, median (s)",
    "mean_running": "mean running requests",
    "max_running": "max running requests",
    "sim_time_s": "simulated time (s)",
    "wall_time_s": "wall time (s)",
}
"""Axis labels with units for configuration fields and summary metrics; `axis_label` derives the rest."""

_UNIT_SUFFIXES = (("_s_per_tok", "s/token"), ("_tok_s", "tokens/s"), ("_req_s", "req/s"), ("_gib", "GiB"),
                  ("_frac", "share of KV capacity"), ("_s", "s"))


def axis_label(name: str) -> str:
    """A readable axis label with its unit (``ttft_p50_s`` -> "time to first token, median (s)"), not the
    raw column name; unknown names get their unit from the suffix (``_s``, ``_frac``, ``_tok_s`` ...)."""
    if name in AXIS_LABELS:
        return AXIS_LABELS[name]
    if name in SHARE_LABELS or name.removesuffix("_frac") in SHARE_LABELS:
        return f"{SHARE_LABELS[name.removesuffix('_frac')].lower()} (share of KV capacity)"
    for suffix, unit in _UNIT_SUFFIXES:
        if name.endswith(suffix):
            return f"{name.removesuffix(suffix).replace('_', ' ')} ({unit})"
    return name.replace("_", " ")
