"""The physical memory map: the KV arena at one instant, every slot coloured by its state, with a line
around each request's slots (the paper's Fig. 3 view).

Read left to right, top to bottom, like memory addresses. A slot is a live token, reserved (the request will
fill it), internal fragmentation (held, never filled), allocator overhead (buddy rounding, the null block),
external fragmentation (free, while a request waits that cannot be given it) or free (while nobody waits): the
breakdown's shares slot for slot, overhead and external fragmentation together its external share, in its
colours. Contiguous Max shows one slab per request that is mostly orange, never to be filled; paged shows the
same requests as small, almost full blocks. The map needs the ``memory`` table (``time_s, slot, owner``, and
``state`` since kvsim records it; owner -1 free, -2 overhead, -3 shared) that a run records; older tables
without ``state`` are coloured by owner kind only (token for owned slots). A hybrid pool's table has a
``group`` column (the attention group whose block holds the slot: sliding-window or full layers); the map then
outlines each group's blocks in the group's colour and gives each group's share of the slots.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from allocators.base import (
    FREE_OWNER,
    OVERHEAD_OWNER,
    SHARED_OWNER,
    SLOT_FREE,
    SLOT_OVERHEAD,
    SLOT_STATES,
    SLOT_TOKEN,
)
from sim.plots.data import require_columns, require_count, run_table, tables_by_run
from sim.plots.style import SHARE_COLORS, allocator_label, figure_and_axes, new_figure, order_allocators

STATE_COLORS = {
    "token": SHARE_COLORS["token_states"],
    "reserved": SHARE_COLORS["reservation"],
    "internal_frag": SHARE_COLORS["internal_frag"],
    "overhead": "#212121",
    "external_frag": SHARE_COLORS["external_frag"],
    "free": "#eeeeee",
}
"""The breakdown charts' share colours, so a map and a stacked bar read alike; overhead is black."""
STATE_LABELS = {"token": "token states", "reserved": "reserved (will be filled)",
                "internal_frag": "internal fragmentation", "overhead": "allocator overhead",
                "external_frag": "external frag. (free, a request waits)", "free": "free"}
FREE_COLOR = STATE_COLORS["free"]
OVERHEAD_COLOR = STATE_COLORS["overhead"]
SHARED_COLOR = "#7a7a7a"
"""Token slots of blocks several sequences share (copy-on-write, prefix hits): one neutral grey."""
OUTSIDE_COLOR = "#ffffff"
BOUNDARY_COLOR = "#000000"
GROUP_COLORS = ("#6a1b9a", "#00838f", "#ad1457", "#5d4037")
"""Outline colours of a hybrid pool's attention groups, in ``group`` category order: none is a slot state's
colour (a red or blue outline read as external fragmentation or reservation)."""


@dataclass(frozen=True)
class Snapshot:
    """One memory snapshot: when it was taken, which instant was asked for, and every slot's owner and state."""

    time_s: float
    requested_s: float | None
    times: np.ndarray
    owners: np.ndarray
    states: np.ndarray
    groups: pd.Categorical | None = None
    replica: tuple[int, int] | None = None  # a fleet's: (the replica shown, how many the table has)

    def caption_time(self) -> str:
        """Which instant (and, of a fleet, which replica) is shown, said plainly when it is not the one asked
        for."""
        shown = f"t = {self.time_s:.2f} s"
        if self.replica is not None:
            shown = f"replica {self.replica[0]} of {self.replica[1]}, {shown}"
        if self.requested_s is None:
            return f"{shown} (middle of {len(self.times)} snapshots)"
        if math.isclose(self.requested_s, self.time_s, rel_tol=1e-9, abs_tol=1e-9):
            return shown
        return (f"{shown}, the nearest of {len(self.times)} snapshots ({self.times[0]:.2f}-{self.times[-1]:.2f} s) "
                f"to the {self.requested_s:g} s asked for")


def snapshot_times(memory: pd.DataFrame) -> np.ndarray:
    """The instants the memory table holds a snapshot of, in order."""
    require_columns(memory, ["time_s", "slot", "owner"], "memory table")
    times = np.sort(memory["time_s"].unique())
    if not len(times):
        raise ValueError("the run recorded no memory snapshots (its pool may be too large for a memory map: "
                         "see the summary's memory_snapshots)")
    return times


def memory_snapshot(memory: pd.DataFrame, time_s: float | None = None, replica: int | None = None) -> Snapshot:
    """Every slot's owner and state at the snapshot nearest ``time_s`` (default: the middle snapshot). A fleet's
    table (a ``replica`` column) holds each replica's own snapshots, of its own pool: ``replica`` picks one
    (default the first)."""
    shown = None
    if "replica" in memory:
        numbers = np.sort(memory["replica"].unique())
        if replica is None:
            replica = int(numbers[0]) if len(numbers) else 0
        if replica not in numbers:
            raise ValueError(f"memory table: no replica {replica} (it has {', '.join(map(str, numbers))})")
        memory, shown = memory[memory["replica"] == replica], (replica, len(numbers))
    elif replica is not None:
        raise ValueError(f"replica {replica} asked for, but the memory table is of one replica (no fleet run)")
    times = snapshot_times(memory)
    chosen = times[len(times) // 2] if time_s is None else times[np.argmin(np.abs(times - time_s))]
    rows = memory[memory["time_s"] == chosen].sort_values("slot")
    slots = rows["slot"].to_numpy()
    if not np.array_equal(slots, np.arange(len(slots))):
        raise ValueError(f"memory snapshot at t={chosen:g}s does not cover slots 0..{len(slots) - 1} once each")
    owners = rows["owner"].to_numpy(dtype=np.int64)
    if "state" in rows:
        codes = {name: code for code, name in enumerate(SLOT_STATES)}
        states = rows["state"].astype(str).map(codes).to_numpy()
        if np.isnan(states.astype(float)).any():
            raise ValueError(f"memory table: column 'state' holds values other than {', '.join(SLOT_STATES)}")
        states = states.astype(np.int8)
    else:
        states = np.where(owners == FREE_OWNER, SLOT_FREE, np.where(owners == OVERHEAD_OWNER, SLOT_OVERHEAD,
                                                                  SLOT_TOKEN)).astype(np.int8)
    groups = pd.Categorical(rows["group"]) if "group" in rows else None
    return Snapshot(float(chosen), time_s, times, owners, states, groups, shown)


def slot_colors(owners: np.ndarray, states: np.ndarray) -> np.ndarray:
    """RGB per slot from its state code; shared slots grey."""
    palette = np.array([to_rgb(STATE_COLORS[name]) for name in SLOT_STATES])
    rgb = palette[states]
    rgb[owners == SHARED_OWNER] = to_rgb(SHARED_COLOR)
    return rgb


def owner_boundaries(owners: np.ndarray, width: int) -> np.ndarray:
    """Line segments ``(n, 2, 2)``, in image coordinates, between horizontally or vertically adjacent slots
    of different owners where at least one is held by a request (free and overhead slots need no outline)."""
    rows = math.ceil(len(owners) / width)
    grid = np.full(rows * width, FREE_OWNER, dtype=np.int64)
    grid[:len(owners)] = owners
    grid = grid.reshape(rows, width)
    held = (grid >= 0) | (grid == SHARED_OWNER)
    r, c = np.nonzero((grid[:, 1:] != grid[:, :-1]) & (held[:, 1:] | held[:, :-1]))
    vertical = np.stack([np.stack([c + 0.5, r - 0.5], -1), np.stack([c + 0.5, r + 0.5], -1)], 1)
    r, c = np.nonzero((grid[1:] != grid[:-1]) & (held[1:] | held[:-1]))
    horizontal = np.stack([np.stack([c - 0.5, r + 0.5], -1), np.stack([c + 0.5, r + 0.5], -1)], 1)
    return np.concatenate([vertical, horizontal]).astype(float)


def default_width(capacity: int) -> int:
    """Slots per row: a power of two (so 16-slot blocks never straddle rows) giving about a 4:1 strip."""
    return max(16, 2 ** round(math.log2(math.sqrt(4 * capacity))))


def plot_memory_map(
    memory: pd.DataFrame,
    *,
    time_s: float | None = None,
    width: int | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    replica: int | None = None,
) -> Figure:
    """The arena as a grid of ``width`` slots per row, coloured by slot state, a black line around each
    request's slots, at the snapshot nearest ``time_s`` (the caption says which instant that is, and of a
    fleet run which ``replica``: default the first). ``memory`` is one run's memory table or its `SimResult`."""
    memory = run_table(memory, "memory", "plot_memory_map", "memory", several="plot_memory_maps")
    snap = memory_snapshot(memory, time_s, replica)
    owners, states = snap.owners, snap.states
    capacity = len(owners)
    width = default_width(capacity) if width is None else require_count("plot_memory_map", "width", width)
    rows = math.ceil(capacity / width)
    image = np.ones((rows * width, 3))
    image[:] = to_rgb(OUTSIDE_COLOR)
    image[:capacity] = slot_colors(owners, states)
    fig, ax = figure_and_axes(ax, (9, 7 * rows / width + 1.2))
    ax.imshow(image.reshape(rows, width, 3), aspect="auto", interpolation="nearest")
    ax.add_collection(LineCollection(owner_boundaries(owners, width), colors=BOUNDARY_COLOR,
                                     linewidths=0.4 if width <= 256 else 0.25))
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    counts = np.bincount(states, minlength=len(SLOT_STATES)) / capacity
    share = dict(zip(SLOT_STATES, counts, strict=True))
    requests = len(np.unique(owners[owners >= 0]))
    shared = np.count_nonzero(owners == SHARED_OWNER) / capacity
    shared_text = f" ({shared:.0%} shared)" if shared else ""
    caption = (f"{snap.caption_time()}\n{requests} sequences; tokens {share['token']:.0%}{shared_text}, reserved "
               f"{share['reserved']:.0%}, internal frag. {share['internal_frag']:.0%}, overhead "
               f"{share['overhead']:.1%}, external frag. {share['external_frag']:.0%}, free {share['free']:.0%} "
               f"({capacity:,} slots, {width} per row)")
    handles = [Patch(color=STATE_COLORS[name], label=STATE_LABELS[name]) for name in SLOT_STATES]
    if snap.groups is not None:
        caption += "\n" + _draw_groups(ax, snap.groups, width, handles)
    ax.set_title(f"{title}\n{caption}" if title else caption, fontsize="small", loc="left")
    if shared:
        handles.insert(1, Patch(color=SHARED_COLOR, label="shared by several sequences"))
    handles.append(Patch(facecolor="white", edgecolor=BOUNDARY_COLOR, label="one request's slots"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="x-small", frameon=False)
    return fig


def _draw_groups(ax: Axes, groups: pd.Categorical, width: int, handles: list) -> str:
    """Outline each attention group's slots in its colour (a legend entry each); returns the caption line of
    the groups' shares of the slots."""
    codes = np.asarray(groups.codes, dtype=np.int64)
    parts = []
    for code, name in enumerate(groups.categories):
        color = GROUP_COLORS[code % len(GROUP_COLORS)]
        mask = np.where(codes == code, 0, FREE_OWNER)
        ax.add_collection(LineCollection(owner_boundaries(mask, width), colors=color,
                                         linewidths=0.6 if width <= 256 else 0.35))
        handles.append(Patch(facecolor="white", edgecolor=color, label=f"{name} layers' blocks"))
        parts.append(f"{name} {np.count_nonzero(codes == code) / len(codes):.0%}")
    return "KV groups: " + ", ".join(parts) + " of the slots"


def plot_memory_maps(memory_by_allocator: Mapping[str, pd.DataFrame], *, time_s: float | None = None,
                     width: int | None = None, replica: int | None = None) -> Figure:
    """Memory maps of several runs stacked, at the same instant, to contrast slabs with scattered blocks.
    ``memory_by_allocator`` maps run names to memory tables or `SimResult` objects; one table is one run."""
    memory_by_allocator = tables_by_run(memory_by_allocator, "memory", "plot_memory_maps", "memory_by_allocator")
    if not memory_by_allocator:
        raise ValueError("no memory tables to plot")
    names = order_allocators(memory_by_allocator)
    fig = new_figure((9, 2.6 * len(names)))
    axes = fig.subplots(len(names), 1, squeeze=False)[:, 0]
    for ax, name in zip(axes, names, strict=True):
        plot_memory_map(memory_by_allocator[name], time_s=time_s, width=width, ax=ax, title=allocator_label(name),
                        replica=replica)
    return fig
