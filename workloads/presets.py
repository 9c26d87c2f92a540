"""Named workloads: the paper's two synthetic ones and one per shared real trace.

- ``sharegpt-paper``, ``alpaca-paper``: lognormal lengths solved to the paper's means after its 2048 cap
  (`workloads.paper_lengths`), Poisson arrivals at ``rate`` (default 1 req/s), ``num_requests`` defaulting to
  one hour's worth (the paper's traces are 1 hour).
- ``sharegpt-demo``: the ``sharegpt-paper`` lengths, 400 requests at 2 req/s by default: a few seconds' run,
  and the workload of ``kvsim run`` and ``kvsim compare`` when they are given no trace and no preset.
- ``azure-code``, ``azure-conv``, ``mooncake-conv``: the real traces with their own timestamps, time-scaled to
  ``rate`` when one is given. ``sharegpt-etalon``: the etalon length statistics with Poisson arrivals at
  ``rate`` (default 1 req/s).

Real traces are read from the directory ``$KVSIM_TRACES`` names (``$KVSIM_SHARED_TRACES`` is the old name);
without it, from the 2,000-row samples shipped inside the package (``workloads/data/traces``, package data found
with `importlib.resources`), and the workload's ``source`` says so, with where the full file comes from
(`TRACE_ORIGINS`). Nothing outside the installed package is read unless that variable names it.
"""

from __future__ import annotations

import math
import os
import warnings
from importlib.resources import files
from pathlib import Path

import numpy as np

from workloads.arrivals import Poisson, TraceTimes
from workloads.attribution import ATTRIBUTIONS
from workloads.errors import TraceError, TraceWarning, check_seed, real_number, show_value, whole_number
from workloads.generate import MAX_REQUESTS, generate
from workloads.paper_lengths import PAPER_TARGETS, paper_lengths
from workloads.readers import load_trace
from workloads.workload import Workload

SAMPLES_DIR = Path(str(files("workloads") / "data" / "traces"))
"""The 2,000-row trace samples with their README and licences (package data; a wheel installs unzipped)."""

TRACE_PRESETS: dict[str, str] = {
    "azure-code": "AzureLLMInferenceTrace_code.csv",
    "azure-conv": "AzureLLMInferenceTrace_conv.csv",
    "mooncake-conv": "conversation_trace.jsonl",
    "sharegpt-etalon": "sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
}
TRACE_ORIGINS: dict[str, str] = {
    "AzureLLMInferenceTrace_code.csv": "github.com/Azure/AzurePublicDataset, data/AzureLLMInferenceTrace_code.csv",
    "AzureLLMInferenceTrace_conv.csv": "github.com/Azure/AzurePublicDataset, data/AzureLLMInferenceTrace_conv.csv",
    "conversation_trace.jsonl": "github.com/kvcache-ai/Mooncake, FAST25-release/traces/conversation_trace.jsonl",
    "sharegpt_8k_filtered_stats_llama2_tokenizer.csv": (
        "github.com/project-etalon/etalon, data/processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv"),
}
"""Where each full public trace is published (repository, path), for the hint to download it."""
TRACES_HELP = ("The trace presets read the full public traces from the directory $KVSIM_TRACES names (download "
               "them from the repositories workloads/data/traces/README.md lists); without it, the 2,000-row samples "
               "shipped with kvsim.")
PAPER_SOURCE = ("synthetic {name}: lognormal lengths matching the means of Kwon et al., SOSP 2023 "
                "(PagedAttention) after its 2048-token cap; Poisson arrivals at {rate:g} req/s; seed {seed}")
DEMO_PRESETS: dict[str, tuple[str, float, int]] = {"sharegpt-demo": ("sharegpt-paper", 2.0, 400)}
"""Small named workloads: the paper preset whose lengths they draw, default rate (req/s) and request count."""
DEFAULT_PRESET = "sharegpt-demo"
"""The workload of ``kvsim run`` and ``kvsim compare`` without a trace or ``--preset``."""
PRESETS: tuple[str, ...] = (*PAPER_TARGETS, *DEMO_PRESETS, *TRACE_PRESETS)


TIMELESS_PRESETS = frozenset({"sharegpt-etalon"})
"""Trace presets whose file has no timestamps (lengths only): their arrivals are drawn, so they lend none."""


def _traces_variable() -> tuple[str, str] | None:
    """The variable that names the full traces' folder and its value: ``$KVSIM_TRACES``, or the older
    ``$KVSIM_SHARED_TRACES``; None when neither is set."""
    for name in ("KVSIM_TRACES", "KVSIM_SHARED_TRACES"):
        if value := os.environ.get(name):
            return name, value
    return None


def shared_traces_dir() -> Path | None:
    """The folder of full public traces ``$KVSIM_TRACES`` (or the older ``$KVSIM_SHARED_TRACES``) names, if it
    is one, else None."""
    variable = _traces_variable()
    return Path(variable[1]) if variable and Path(variable[1]).is_dir() else None


def trace_file(name: str) -> tuple[Path, bool]:
    """The file behind a trace preset and whether it is the full trace (False: the shipped sample). A variable
    set to a folder that is not there, or that lacks this trace, is a warning: it asked for the full trace, and
    the sample's numbers must not pass for it."""
    filename = TRACE_PRESETS[name]
    shared = shared_traces_dir()
    if shared is not None and (shared / filename).is_file():
        return shared / filename, True
    if variable := _traces_variable():
        where = f"${variable[0]} ({variable[1]})"
        missing = f"{where} has no {filename}" if shared is not None else f"{where} is not a folder"
        warnings.warn(TraceWarning(f"preset {name}: {missing}, so the shipped sample is read, not the full trace"),
                      stacklevel=2)
    sample = SAMPLES_DIR / filename
    if not sample.is_file():
        raise TraceError(f"preset {name}: neither the shared traces nor the sample {sample} are present")
    return sample, False


def load_preset(name: str, *, num_requests: int | None = None, rate: float | None = None,
                seed: int = 0) -> Workload:
    """The named workload (see the module docstring); ``seed`` drives every random draw."""
    if name not in PRESETS:
        raise TraceError(f"unknown preset {name!r} (presets: {', '.join(PRESETS)})")
    context = f"preset {name}"
    seed = check_seed(context, seed)
    if num_requests is not None:
        num_requests = whole_number(context, "num_requests", num_requests, 1, MAX_REQUESTS)
    if rate is not None:
        rate = real_number(context, "rate", rate)
        if not 0 < rate < math.inf:  # (an infinite rate failed as "cannot convert float infinity to integer")
            raise TraceError(f"{context}: rate must be a positive finite number (got {show_value(rate)})")
    if name in DEMO_PRESETS:
        lengths, default_rate, default_count = DEMO_PRESETS[name]
        rate = default_rate if rate is None else rate
        count = default_count if num_requests is None else num_requests
        source = f"{PAPER_SOURCE.format(name=lengths, rate=rate, seed=seed)}; {count} requests ({name})"
        return generate(paper_lengths(lengths), Poisson(rate), count, seed, name=name, source=source)
    if name in PAPER_TARGETS:
        rate = 1.0 if rate is None else rate
        if num_requests is None and 3600 * rate > MAX_REQUESTS:
            raise TraceError(f"{context}: an hour at rate {rate:g} is {3600 * rate:.3g} requests, more than "
                             f"{MAX_REQUESTS:g}; give --num-requests")
        count = num_requests if num_requests is not None else max(1, round(3600 * rate))
        source = PAPER_SOURCE.format(name=name, rate=rate, seed=seed)
        return generate(paper_lengths(name), Poisson(rate), count, seed, name=name, source=source)
    path, full = trace_file(name)
    workload = load_trace(path)
    file_rows = len(workload)
    if num_requests is not None:
        if num_requests > len(workload):
            sample = "" if full else ", a shipped sample; set KVSIM_TRACES for the full trace"
            raise TraceError(f"preset {name}: --num-requests {num_requests} asks for more requests than the trace "
                             f"has ({len(workload)}{sample})")
        workload = workload.head(num_requests)
    if name == "sharegpt-etalon":
        process = Poisson(1.0 if rate is None else rate)
    else:
        process = TraceTimes(rate) if rate is not None else None
    if process is not None:
        times = process.times(np.random.default_rng(seed), len(workload), workload)
        workload = workload.with_arrivals(times)
    where = f"full trace {path}" if full else (
        f"shipped {file_rows}-row sample workloads/data/traces/{path.name} (package data; the full trace, "
        f"from {TRACE_ORIGINS[path.name]}, is read from $KVSIM_TRACES/{path.name} when that is set)")
    arrivals = f"; arrivals {_describe(process)}" if process is not None else ""
    workload.name = name
    workload.source = f"{ATTRIBUTIONS[path.name]} From the {where}{arrivals}."
    return workload


def _describe(process: Poisson | TraceTimes) -> str:
    if isinstance(process, Poisson):
        return f"Poisson at {process.rate:g} req/s"
    return f"the trace's own, time-scaled to {process.rate:g} req/s"
