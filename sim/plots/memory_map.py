"""The physical memory map: the KV arena at one instant, every slot coloured by the sequence that owns it.

Read left to right, top to bottom, like memory addresses. Contiguous allocators show one solid slab per request
with the buddy allocator's rounding and holes between slabs; paged allocators show the same requests scattered
as small blocks with almost nothing free in between. The map needs the ``memory`` table (``time_s, slot,
owner``; owner -1 free, -2 allocator overhead, -3 a block shared by several sequences) that a run records
when asked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import hsv_to_rgb, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from allocators.base import FREE_OWNER, OVERHEAD_OWNER, SHARED_OWNER
from sim.plots.data import require_columns
from sim.plots.style import allocator_label, figure_and_axes, new_figure, order_allocators

FREE_COLOR = "#eeeeee"
OVERHEAD_COLOR = "#212121"
SHARED_COLOR = "#7a7a7a"
"""Copy-on-write blocks held by several sequences: one neutral grey, not a sequence hue."""
OUTSIDE_COLOR = "#ffffff"


def snapshot_times(memory: pd.DataFrame) -> np.ndarray:
    """The instants the memory table holds a snapshot of, in order."""
    require_columns(memory, ["time_s", "slot", "owner"], "memory table")
    return np.sort(memory["time_s"].unique())


def memory_snapshot(memory: pd.DataFrame, time_s: float | None = None) -> tuple[float, np.ndarray]:
    """The owner of every slot at the snapshot nearest ``time_s`` (default: the middle snapshot)."""
    times = snapshot_times(memory)
    chosen = times[len(times) // 2] if time_s is None else times[np.argmin(np.abs(times - time_s))]
    rows = memory[memory["time_s"] == chosen].sort_values("slot")
    slots = rows["slot"].to_numpy()
    if not np.array_equal(slots, np.arange(len(slots))):
        raise ValueError(f"memory snapshot at t={chosen:g}s does not cover slots 0..{len(slots) - 1} once each")
    return float(chosen), rows["owner"].to_numpy(dtype=np.int64)


def owner_colors(owners: np.ndarray) -> np.ndarray:
    """RGB per slot: a stable, well-spread hue per owner id (golden-ratio steps), light grey free, black
    overhead, mid grey shared."""
    hue = (owners.astype(float) * 0.6180339887) % 1.0
    sat = 0.45 + 0.35 * ((owners * 7) % 3) / 2
    hsv = np.stack([hue, sat, np.full(len(owners), 0.88)], axis=-1)
    rgb = hsv_to_rgb(hsv)
    rgb[owners == FREE_OWNER] = to_rgb(FREE_COLOR)
    rgb[owners == OVERHEAD_OWNER] = to_rgb(OVERHEAD_COLOR)
    rgb[owners == SHARED_OWNER] = to_rgb(SHARED_COLOR)
    return rgb


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
) -> Figure:
    """The arena as a grid of ``width`` slots per row, coloured by owner, at the snapshot nearest ``time_s``."""
    chosen, owners = memory_snapshot(memory, time_s)
    capacity = len(owners)
    width = width or default_width(capacity)
    rows = math.ceil(capacity / width)
    image = np.ones((rows * width, 3))
    image[:] = to_rgb(OUTSIDE_COLOR)
    image[:capacity] = owner_colors(owners)
    fig, ax = figure_and_axes(ax, (8, 8 * rows / width + 0.9))
    ax.imshow(image.reshape(rows, width, 3), aspect="auto", interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    live = owners[owners >= 0]
    free = np.count_nonzero(owners == FREE_OWNER) / capacity
    overhead = np.count_nonzero(owners == OVERHEAD_OWNER) / capacity
    shared = np.count_nonzero(owners == SHARED_OWNER) / capacity
    shared_text = f"{shared:.0%} shared, " if shared else ""
    caption = (f"t = {chosen:.1f} s: {len(np.unique(live))} sequences, {shared_text}{free:.0%} free, "
               f"{overhead:.1%} allocator overhead ({capacity:,} slots, {width} per row)")
    ax.set_title(f"{title}\n{caption}" if title else caption, fontsize="small", loc="left")
    handles = [Patch(color=FREE_COLOR, label="free"), Patch(color=OVERHEAD_COLOR, label="overhead"),
               Patch(color=hsv_to_rgb((0.1, 0.6, 0.88)), label="one colour per sequence")]
    if shared:
        handles.append(Patch(color=SHARED_COLOR, label="shared by several sequences"))
    ax.legend(handles=handles,
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="x-small", frameon=False)
    return fig


def plot_memory_maps(memory_by_allocator: Mapping[str, pd.DataFrame], *, time_s: float | None = None,
                     width: int | None = None) -> Figure:
    """Memory maps of several runs stacked, at the same instant, to contrast slabs with scattered blocks."""
    if not memory_by_allocator:
        raise ValueError("no memory tables to plot")
    names = order_allocators(memory_by_allocator)
    fig = new_figure((9, 2.3 * len(names)))
    axes = fig.subplots(len(names), 1, squeeze=False)[:, 0]
    for ax, name in zip(axes, names, strict=True):
        plot_memory_map(memory_by_allocator[name], time_s=time_s, width=width, ax=ax, title=allocator_label(name))
    return fig
