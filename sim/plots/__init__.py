"""kvsim's figures: functions that take result tables (or summaries) and return a matplotlib Figure.

None of them reads or writes files; `kvsim plot` and the notebooks do that. Each takes an optional ``ax`` where
a single panel makes sense, so figures compose.
"""

from sim.plots.batch import plot_batch_over_time, plot_batch_sizes
from sim.plots.block_size import plot_block_size_sweep
from sim.plots.breakdown import plot_breakdown
from sim.plots.capacity import plot_capacity
from sim.plots.fleet import plot_hit_rate_by_router, plot_replicas_over_time
from sim.plots.latency import plot_latency_cdf, plot_latency_vs_rate
from sim.plots.memory import plot_memory_comparison, plot_memory_over_time
from sim.plots.memory_map import plot_memory_map, plot_memory_maps
from sim.plots.reuse import plot_reuse
from sim.plots.sharing import plot_sharing_savings

__all__ = [
    "plot_batch_over_time",
    "plot_batch_sizes",
    "plot_block_size_sweep",
    "plot_breakdown",
    "plot_capacity",
    "plot_hit_rate_by_router",
    "plot_latency_cdf",
    "plot_latency_vs_rate",
    "plot_memory_comparison",
    "plot_memory_map",
    "plot_memory_maps",
    "plot_memory_over_time",
    "plot_replicas_over_time",
    "plot_reuse",
    "plot_sharing_savings",
]
