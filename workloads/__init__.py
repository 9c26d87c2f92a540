"""Requests in: trace readers, synthetic generators and presets. Knows nothing of allocators or time.

The public surface: `Request`, `Workload`, `TraceError`, `load_trace`, `generate`, `load_preset`, `PRESETS`,
`write_trace`, `workload_to_frame` / `workload_from_frame` (a workload as a pandas table and back) and
`trace_stats`.
"""

from workloads.errors import TraceError
from workloads.frames import workload_from_frame, workload_to_frame, write_trace
from workloads.named import generate, load_trace
from workloads.presets import PRESETS, load_preset
from workloads.readers import FORMATS
from workloads.request import Request
from workloads.stats import trace_stats
from workloads.workload import ClosedLoop, Workload

__all__ = ["FORMATS", "PRESETS", "ClosedLoop", "Request", "TraceError", "Workload", "generate", "load_preset",
           "load_trace", "trace_stats", "workload_from_frame", "workload_to_frame", "write_trace"]
