"""Named workloads: the paper's two synthetic ones and one per shared real trace.

- ``sharegpt-paper``, ``alpaca-paper``: lognormal lengths solved to the paper's means after its 2048 cap
  (`workloads.paper_lengths`), Poisson arrivals at ``rate`` (default 1 req/s), ``num_requests`` defaulting to
  one hour's worth (the paper's traces are 1 hour).
- ``sharegpt-demo``: the ``sharegpt-paper`` lengths, 400 requests at 2 req/s by default: a few seconds' run,
  and the workload of ``kvsim run`` and ``kvsim compare`` when they are given no trace and no preset.
- ``azure-code``, ``azure-conv``, ``mooncake-conv``: the real traces with their own timestamps, time-scaled to
  ``rate`` when one is given. ``sharegpt-etalon``: the etalon length statistics with Poisson arrivals at
  ``rate`` (default 1 req/s).

Real traces are read from ``$KVSIM_SHARED_TRACES``, else ``<repo>/../shared/traces``; without them, from the
2,000-row samples shipped in ``<repo>/data/traces`` (and the workload's ``source`` says so).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from workloads.arrivals import Poisson, TraceTimes
from workloads.attribution import ATTRIBUTIONS
from workloads.errors import TraceError
from workloads.generate import generate
from workloads.paper_lengths import PAPER_TARGETS, paper_lengths
from workloads.readers import load_trace
from workloads.workload import Workload

REPO = Path(__file__).resolve().parents[1]
SAMPLES_DIR = REPO / "data" / "traces"

TRACE_PRESETS: dict[str, str] = {
    "azure-code": "AzureLLMInferenceTrace_code.csv",
    "azure-conv": "AzureLLMInferenceTrace_conv.csv",
    "mooncake-conv": "conversation_trace.jsonl",
    "sharegpt-etalon": "sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
}
PAPER_SOURCE = ("synthetic {name}: lognormal lengths matching the means of Kwon et al., SOSP 2023 "
                "(PagedAttention) after its 2048-token cap; Poisson arrivals at {rate:g} req/s; seed {seed}")
DEMO_PRESETS: dict[str, tuple[str, float, int]] = {"sharegpt-demo": ("sharegpt-paper", 2.0, 400)}
"""Small named workloads: the paper preset whose lengths they draw, default rate (req/s) and request count."""
DEFAULT_PRESET = "sharegpt-demo"
"""The workload of ``kvsim run`` and ``kvsim compare`` without a trace or ``--preset``."""
PRESETS: tuple[str, ...] = (*PAPER_TARGETS, *DEMO_PRESETS, *TRACE_PRESETS)


def shared_traces_dir() -> Path | None:
    """``$KVSIM_SHARED_TRACES`` if set, else ``<repo>/../shared/traces`` if it exists, else None."""
    env = os.environ.get("KVSIM_SHARED_TRACES")
    candidate = Path(env) if env else REPO.parent / "shared" / "traces"
    return candidate if candidate.is_dir() else None


def trace_file(name: str) -> tuple[Path, bool]:
    """The file behind a trace preset and whether it is the full trace (False: the shipped sample)."""
    filename = TRACE_PRESETS[name]
    shared = shared_traces_dir()
    if shared is not None and (shared / filename).is_file():
        return shared / filename, True
    sample = SAMPLES_DIR / filename
    if not sample.is_file():
        raise TraceError(f"preset {name}: neither the shared traces nor the sample {sample} are present")
    return sample, False


def load_preset(name: str, *, num_requests: int | None = None, rate: float | None = None,
                seed: int = 0) -> Workload:
    """The named workload (see the module docstring); ``seed`` drives every random draw."""
    if name not in PRESETS:
        raise TraceError(f"unknown preset {name!r} (presets: {', '.join(PRESETS)})")
    if num_requests is not None and num_requests < 1:
        raise TraceError(f"preset {name}: num_requests must be >= 1, got {num_requests}")
    if name in DEMO_PRESETS:
        lengths, default_rate, default_count = DEMO_PRESETS[name]
        rate = default_rate if rate is None else rate
        count = default_count if num_requests is None else num_requests
        source = f"{PAPER_SOURCE.format(name=lengths, rate=rate, seed=seed)}; {count} requests ({name})"
        return generate(paper_lengths(lengths), Poisson(rate), count, seed, name=name, source=source)
    if name in PAPER_TARGETS:
        rate = 1.0 if rate is None else rate
        count = num_requests if num_requests is not None else max(1, round(3600 * rate))
        source = PAPER_SOURCE.format(name=name, rate=rate, seed=seed)
        return generate(paper_lengths(name), Poisson(rate), count, seed, name=name, source=source)
    path, full = trace_file(name)
    workload = load_trace(path)
    file_rows = len(workload)
    if num_requests is not None:
        if num_requests > len(workload):
            raise TraceError(f"preset {name}: asked for {num_requests} requests, the trace has {len(workload)}")
        workload = workload.head(num_requests)
    if name == "sharegpt-etalon":
        process = Poisson(1.0 if rate is None else rate)
    else:
        process = TraceTimes(rate) if rate is not None else None
    if process is not None:
        times = process.times(np.random.default_rng(seed), len(workload), workload)
        workload = workload.with_arrivals(times)
    where = f"full trace {path}" if full else (f"shipped {file_rows}-row sample {path} "
                                               "(the shared traces were not found)")
    arrivals = f"; arrivals {_describe(process)}" if process is not None else ""
    workload.name = name
    workload.source = f"{ATTRIBUTIONS[path.name]} From the {where}{arrivals}."
    return workload


def _describe(process: Poisson | TraceTimes) -> str:
    if isinstance(process, Poisson):
        return f"Poisson at {process.rate:g} req/s"
    return f"the trace's own, time-scaled to {process.rate:g} req/s"


def load_named(name: str) -> Workload:
    """A preset by name, else a trace file by path (for ``empirical:trace=...`` and ``trace:path=...``)."""
    return load_preset(name) if name in PRESETS else load_trace(name)
