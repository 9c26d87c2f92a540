"""Small experiments the notebooks run: a few allocators side by side, shared system prompts, prefix caching.

Each returns results or a tidy frame, so a notebook cell is one call and one plot, and nothing in a notebook
needs logic of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from sim.kernel.config import SimConfig
from sim.reproduce.experiments import paper_config
from sim.sweep.grid import one_or_many

SUMMARY_COLUMNS = ("allocator", "completed", "rejected", "preemptions", "mean_running", "throughput_tok_s",
                   "normalized_latency_s_per_tok", "ttft_p50_s", "token_states_frac", "reservation_frac",
                   "internal_frag_frac", "external_frag_frac", "free_frac", "shared_saved_frac")


def compare_allocators(allocators: Sequence[str], preset: str = "sharegpt-paper", rate: float = 2.0,
                       num_requests: int = 600, **overrides) -> dict:
    """One `SimResult` per allocator on the same workload, in the paper's setup (`paper_config`).

    ``overrides`` are `SimConfig` fields; the paper's others stay. Overriding ``model`` or ``gpu`` keeps the
    paper's ``kv_gib=12``, ``max_model_len=2048`` and ``paper-2023`` cost profile unless you override those too
    (``kv_gib=None`` sizes the KV memory from the GPU as vLLM does). A lone name is one allocator."""
    from sim.kernel.runner import run_config

    return {a: run_config(paper_config(a, preset, rate, num_requests, **overrides))
            for a in one_or_many(allocators, "allocators")}


def run_workload(workload, allocators: Sequence[str], **config_fields) -> dict:
    """One `SimResult` per allocator on a workload you already have (a trace you loaded, a generated one);
    ``config_fields`` are `SimConfig` fields (model, gpu, kv_gib, block_size, ...). A lone name is one
    allocator."""
    from sim.kernel.runner import run_simulation

    return {a: run_simulation(SimConfig(allocator=a, **config_fields), workload)
            for a in one_or_many(allocators, "allocators")}


def summaries_table(results: dict, columns: Sequence[str] = SUMMARY_COLUMNS) -> pd.DataFrame:
    """The chosen summary keys of several results, one row per run. A key no run's summary has is refused
    (a misspelled name would be a column of empty cells); one some runs lack is empty for those."""
    if not results:
        raise ValueError("summaries_table: no results to tabulate")
    columns = one_or_many(columns, "columns")
    known = set().union(*(r.summary for r in results.values()))
    unknown = [k for k in columns if k not in known]
    if unknown:
        raise ValueError(f"summaries_table: no run's summary has {', '.join(map(repr, unknown))}; "
                         f"the keys are {', '.join(sorted(known))}")
    rows = [{k: r.summary.get(k) for k in columns} | {"run": name} for name, r in results.items()]
    return pd.DataFrame(rows).set_index("run")


def prefill_tokens_computed(result) -> int:
    """Prompt tokens the engine actually prefilled (cache hits and shared prefixes are not computed; a
    recomputed preemption is computed again)."""
    return int(result.steps["prefill_tokens"].sum())


def system_prompt_sharing(allocators: Sequence[str] = ("paged", "paged-cow"), *, system_prompt_len: int = 512,
                          system_prompt_frac: float = 1.0, rate: float = 2.0, num_requests: int = 400,
                          seed: int = 0) -> pd.DataFrame:
    """Paper-length ShareGPT requests that all start with the same system prompt, per allocator: a sharing
    allocator keeps one copy of the prompt's blocks, a plain one a copy per request. A lone name is one
    allocator."""
    from sim.kernel.runner import run_simulation
    from workloads import generate
    from workloads.arrivals import Poisson
    from workloads.paper_lengths import paper_lengths

    workload = generate(paper_lengths("sharegpt-paper"), Poisson(rate), num_requests, seed,
                        system_prompt_len=system_prompt_len, system_prompt_frac=system_prompt_frac,
                        name=f"sharegpt-paper + {system_prompt_len}-token system prompt")
    rows = []
    for allocator in one_or_many(allocators, "allocators"):
        result = run_simulation(paper_config(allocator, None, None, None), workload)
        rows.append({**{k: result.summary.get(k) for k in SUMMARY_COLUMNS},
                     "prefill_tokens": prefill_tokens_computed(result)})
    return pd.DataFrame(rows).set_index("allocator")


def prefix_caching_effect(preset: str = "mooncake-conv", num_requests: int = 300, *, model: str = "qwen3-8b",
                          gpu: str = "h200", allocator: str = "paged", **overrides) -> pd.DataFrame:
    """The same trace with vLLM's prefix caching off and on: prefill work saved, TTFT and throughput.

    The default deployment has a 40K-token context, since Mooncake's prompts average 12K tokens (longer
    requests are rejected and counted)."""
    from sim.kernel.runner import run_config

    rows = []
    for caching in (False, True):
        config = SimConfig(allocator=allocator, model=model, gpu=gpu, preset=preset, num_requests=num_requests,
                           prefix_caching=caching, **({"max_num_batched_tokens": 8192} | overrides))
        result = run_config(config)
        rows.append({"prefix_caching": caching, "completed": result.summary["completed"],
                     "rejected": result.summary["rejected"], "prefill_tokens": prefill_tokens_computed(result),
                     "ttft_p50_s": result.summary["ttft_p50_s"], "ttft_p99_s": result.summary["ttft_p99_s"],
                     "throughput_tok_s": result.summary["throughput_tok_s"]})
    table = pd.DataFrame(rows).set_index("prefix_caching")
    table["prefill_saved_frac"] = 1 - table["prefill_tokens"] / table.loc[False, "prefill_tokens"]
    return table
