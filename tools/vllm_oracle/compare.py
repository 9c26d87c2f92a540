"""Replay every harness case through kvsim and compare it with vLLM's reference outputs.

    PYTHONPATH=$PWD python tools/vllm_oracle/compare.py [--data tests/sim/data/vllm_oracle] [--markdown] [CASE ...]

kvsim runs at its defaults plus the case's settings (`kvsim_config`), with ``--step-time 1`` so that one
simulated second is one engine step. Needs kvsim only, not vLLM.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

DATA = Path(__file__).resolve().parents[2] / "tests" / "sim" / "data" / "vllm_oracle"
METRICS = ("total_steps", "mean_running", "max_running", "preemptions", "prefill_tokens", "first_token_steps",
           "finish_steps", "request_preemptions", "request_cached_tokens")
"""Run-wide metrics, then per-request arrays (compared request by request)."""
MTP_MODEL = "deepseek-v3"
"""kvsim's attention-only model with one MTP module (``num_nextn_predict_layers``) for the cases whose ``method`` is
``"mtp"`` (``spec_cases.py --async-scheduling``): vLLM's scheduler reads only ``num_speculative_tokens`` and the
lookahead it gives, EAGLE's (the pool is ``num_blocks`` blocks, whatever the model)."""
HYBRID_MODEL = "gpt-oss-20b"
"""kvsim's model for the cases with a sliding window: 12 window layers (128 tokens) and 12 full ones, two KV cache
groups of one page size, as the driver's two groups."""
CHUNKED_MODEL = "llama-4-scout-17b-16e"
"""kvsim's model for the cases with chunked-local attention, its chunk set to the case's: 36 chunked layers and 12
full ones, three chunked KV cache groups and a full one, as the driver's four groups."""


def chunked_model(chunk: int) -> str:
    """The name of `CHUNKED_MODEL` with an attention chunk of ``chunk`` tokens, added to the catalog."""
    import dataclasses

    from allocators.catalog import MODELS, get_model

    name = f"{CHUNKED_MODEL}-chunk{chunk}"
    MODELS.setdefault(name, dataclasses.replace(get_model(CHUNKED_MODEL), name=name, attention_chunk_size=chunk))
    return name


def kvsim_config(settings: dict, trace: Path, *, step_by_step: bool = False):
    """The kvsim configuration matching a case's vLLM settings (the flags a user would pass)."""
    import dataclasses

    from allocators.catalog import get_model
    from allocators.kv_cache_groups import split_kv_groups
    from sim.kernel.config import SimConfig
    from sim.kernel.replica import host_slot_bytes, hybrid_kv_groups

    model = MTP_MODEL if settings.get("method") == "mtp" else SimConfig().model
    if settings.get("sliding_window"):  # two KV cache groups in one pool of num_blocks blocks
        model = HYBRID_MODEL
        assert get_model(model).sliding_window == settings["sliding_window"], "the case's window is the model's"
    if settings.get("attention_chunk_size"):  # four KV cache groups in one pool
        model = chunked_model(settings["attention_chunk_size"])
    kv_tokens = settings["num_blocks"] * settings["block_size"]
    config = SimConfig(
        model=model, trace=str(trace), kv_tokens=kv_tokens,
        block_size=settings["block_size"], max_num_batched_tokens=settings["max_num_batched_tokens"],
        max_num_seqs=settings["max_num_seqs"], max_model_len=settings["max_model_len"],
        prefix_caching=settings["enable_prefix_caching"],
        long_prefill_token_threshold=settings["long_prefill_token_threshold"],
        scheduler_reserve_full_isl=settings["scheduler_reserve_full_isl"],
        scheduling_policy=settings["scheduling_policy"], step_time=1.0, step_by_step=step_by_step,
        parallel_sampling=settings.get("parallel_sampling", "auto"),
        prefix_cache_retention_interval=settings.get("prefix_cache_retention_interval", 0),
        watermark=settings.get("watermark", 0.0), memory_snapshots=0,
        cache_aware_admission_window=settings.get("cache_aware_admission_window", 0),
        cache_aware_admission_threshold=settings.get("cache_aware_admission_threshold", 0.5),
        prefill_schedule_interval=settings.get("prefill_schedule_interval", 1),
        max_num_active_seqs=settings.get("max_num_active_seqs"),
        long_prefill_token_threshold_adaptive=settings.get("long_prefill_token_threshold_adaptive", False),
        async_scheduling=settings.get("async_scheduling", False),
        **spec_options(settings))
    if groups := hybrid_kv_groups(config, get_model(model)):
        # a block is a token in a group's layers (an EAGLE drafter's layer joins the full ones: 12 and 13 layers,
        # groups of 13): the fewest full tokens whose slots make num_blocks blocks
        unit = split_kv_groups(groups)[0]
        config = dataclasses.replace(config, kv_tokens=-(-kv_tokens * unit // sum(g.layers for g in groups)))
    if not settings.get("cpu_offload_blocks"):
        return config
    # that many host blocks of kvsim's model (a drafter's KV layers included), vLLM's connector as it runs
    block_bytes = host_slot_bytes(config, get_model(model)) * settings["block_size"]
    return dataclasses.replace(config, cpu_offload_gib=settings["cpu_offload_blocks"] * block_bytes / 2**30,
                               offload_write_policy="write_through", offload_loads="async",
                               offload_eviction_policy=settings.get("offload_eviction_policy", "lru"),
                               offload_prompt_only=settings.get("offload_prompt_only", True))


def spec_options(settings: dict) -> dict:
    """kvsim's flags for a case with vLLM's speculative decoding (``num_speculative_tokens``): ngram, an EAGLE
    drafter where the case's ``method`` is ``"eagle"`` (``spec_cases.py --method eagle``; its checkpoint's name is
    not read), or the model's MTP drafter where it is ``"mtp"`` (``gdn_driver.py --mtp``)."""
    if not settings.get("num_speculative_tokens"):
        return {}
    method = settings.get("method", "ngram")
    spec = {"method": method, "num_speculative_tokens": settings["num_speculative_tokens"]}
    if method == "eagle":
        spec["model"] = "drafter"
    return dict(speculative_config=json.dumps(spec), spec_acceptance_rate=settings["spec_acceptance_rate"])


def kvsim_metrics(case: Path, *, step_by_step: bool = False) -> dict:
    from sim.kernel.runner import run_config

    settings = json.loads((case / "settings.json").read_text())
    result = run_config(kvsim_config(settings, case / "trace.csv", step_by_step=step_by_step))
    req = result.requests
    if req["rejected"].any():
        raise AssertionError(f"{case.name}: kvsim rejected {int(req['rejected'].sum())} requests")
    return run_metrics(result, total_steps(result, settings.get("async_scheduling", False)))


def total_steps(result, asynchronous: bool) -> int:
    """A kvsim run's steps as vLLM counts them: to the last finish, or under async scheduling to the run's end (the
    engine's last step only hands the last outputs back, `async_gap.py`)."""
    steps = result.steps
    end = (steps["time_s"] + steps["duration_s"]).max() if asynchronous else result.requests["finished_s"].max()
    return int(round(float(end)))


def run_metrics(result, total: int) -> dict:
    """The compared metrics of a kvsim run whose steps, counted as vLLM counts them, number ``total``."""
    req, steps = result.requests, result.steps
    return {
        "total_steps": total,
        "mean_running": float((steps["running"] * steps["duration_s"]).sum()) / total,
        "max_running": int(steps["running"].max()),
        "preemptions": int(result.summary["preemptions"]),
        "prefill_tokens": int(steps["prefill_tokens"].sum()),
        "first_token_steps": np.rint(req["first_token_s"].to_numpy() - 1).astype(np.int64),
        "finish_steps": np.rint(req["finished_s"].to_numpy() - 1).astype(np.int64),
        "request_preemptions": req["preemptions"].to_numpy(np.int64),
        "request_cached_tokens": req["cached_tokens"].to_numpy(np.int64),
    }


def oracle_metrics(case: Path) -> dict:
    steps = pd.read_csv(case / "steps.csv.gz")
    req = pd.read_csv(case / "requests.csv").sort_values("id")
    return {
        "total_steps": len(steps), "mean_running": float(steps["running"].mean()),
        "max_running": int(steps["running"].max()), "preemptions": int(steps["preemptions"].iloc[-1]),
        "prefill_tokens": int(steps["prefill_tokens"].sum()),
        "first_token_steps": req["first_token_step"].to_numpy(np.int64),
        "finish_steps": req["finish_step"].to_numpy(np.int64),
        "request_preemptions": req["preemptions"].to_numpy(np.int64),
        "request_cached_tokens": req["cached_tokens"].to_numpy(np.int64),
    }


def differences(ours: dict, theirs: dict) -> dict[str, str]:
    """Metric -> '' when equal, else a short description of the difference."""
    out = {}
    for m in METRICS:
        a, b = ours[m], theirs[m]
        if isinstance(a, np.ndarray):
            diff = a - b
            bad = np.flatnonzero(diff)
            out[m] = "" if not len(bad) else (f"{len(bad)}/{len(a)} requests differ (max |d| "
                                              f"{int(np.abs(diff).max())} steps)")
        elif isinstance(a, float):
            out[m] = "" if abs(a - b) < 1e-9 else f"{a:.4f} vs {b:.4f}"
        else:
            out[m] = "" if a == b else f"{a} vs {b}"
    return out


def cell(value) -> str:
    if isinstance(value, np.ndarray):
        return f"{len(value)} req"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*")
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--step-by-step", action="store_true")
    a = p.parse_args()
    data = Path(a.data)
    names = a.names or sorted(d.name for d in data.iterdir() if (d / "steps.csv.gz").exists())
    print("| case | " + " | ".join(METRICS) + " |")
    print("|---" * (len(METRICS) + 1) + "|")
    failed = False
    for name in names:
        ours, theirs = kvsim_metrics(data / name, step_by_step=a.step_by_step), oracle_metrics(data / name)
        diff = differences(ours, theirs)
        failed |= any(diff.values())
        cells = [f"{cell(theirs[m])} (exact)" if not diff[m] else f"kvsim {diff[m]}" for m in METRICS]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
