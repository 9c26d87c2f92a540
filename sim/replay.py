"""Replay a measured run through kvsim and score the per-request latencies against the measurements.

The run's requests (arrival times, prompt and output lengths, shared prefixes) become a workload; kvsim
simulates it under a configuration and a step-cost model; each request's TTFT, TPOT and E2E are compared
with what was measured. Scores are MAPE (mean of |sim - measured| / measured) and bias (mean of
(sim - measured) / measured: positive means kvsim is slow), overall and per load phase, leaving out the
warm-up request.
"""

from __future__ import annotations

from itertools import chain

import numpy as np
import pandas as pd

from sim.kernel.config import SimConfig
from sim.kernel.cost_model import StepCostModel
from sim.measured import HASHES, REPLAYED, MeasuredRun, consecutive_turns, tpot

METRICS = ("ttft_s", "tpot_s", "e2e_s")


def workload_of(run: MeasuredRun, rows: np.ndarray | None = None):
    """The measured requests (all, or the boolean mask ``rows``) as a kvsim workload. A multi-turn session's
    turns carry their session and turn, so that a turn hits what its previous turn computed as the measured
    engine's prefix cache did (without them every turn would be an unrelated request, computed in full); each
    arrives when the run says (no think time). A selection that leaves turns out numbers the rest again. A
    request sampled ``n`` times or searched by ``beam_width`` beams runs that many sequences, as it loaded the
    measured server (under the configuration's ``parallel_sampling``). A request's ``hash_ids`` are its
    ``prefix_hashes`` (at the run's ``prefix_hash_tokens``), so that it hits the blocks earlier requests shared
    with it, as the measured engine's prefix cache did."""
    from workloads import Workload

    frame = run.frame if rows is None else run.frame[rows]
    extra = {c: frame[c].to_numpy() for c in REPLAYED if c in frame}
    if rows is not None and "turn" in frame:
        extra["turn"] = consecutive_turns(frame["session_id"], frame["turn"]).to_numpy()
    if HASHES in frame:
        lists = frame[HASHES].to_list()
        extra["hash_offsets"] = np.concatenate([[0], np.cumsum([len(h) for h in lists], dtype=np.int64)])
        extra["hash_values"] = np.fromiter(chain.from_iterable(lists), np.int64, int(extra["hash_offsets"][-1]))
        extra["prefix_hash_tokens"] = run.prefix_hash_tokens
    return Workload(arrival_time_s=frame["arrival_time_s"].to_numpy(float),
                    prompt_tokens=frame["prompt_tokens"].to_numpy(), output_tokens=frame["output_tokens"].to_numpy(),
                    max_tokens=frame["output_tokens"].to_numpy(), name="measured", source=run.path, **extra)


def replay(run: MeasuredRun, config: SimConfig, cost: StepCostModel | None = None,
           rows: np.ndarray | None = None) -> pd.DataFrame:
    """Simulated ``ttft_s, tpot_s, e2e_s`` of each measured request (in the run's order; ``rows`` selects)."""
    from sim.kernel.runner import run_simulation

    return latencies(run_simulation(config, workload_of(run, rows), cost=cost).requests)


def latencies(requests: pd.DataFrame) -> pd.DataFrame:
    """A simulation's ``ttft_s, tpot_s, e2e_s`` per request, TPOT computed as the measured run's is
    (`sim.measured.tpot`). The requests table's own ``tpot_s`` of a fanned-out request is its children's mean,
    as vLLM times each child; against the measured span it would score the children's stagger as the clock's
    error."""
    out = requests[list(METRICS)].reset_index(drop=True)
    out["tpot_s"] = tpot(requests)
    return out


def errors(measured: pd.DataFrame, simulated: pd.DataFrame) -> pd.DataFrame:
    """Relative error (sim - measured) / measured of each request and metric (NaN where undefined)."""
    out = {}
    for m in METRICS:
        meas = measured[m].to_numpy(float)
        sim = simulated[m].to_numpy(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[m] = np.where(meas > 0, (sim - meas) / meas, np.nan)
    return pd.DataFrame(out)


def score(measured: pd.DataFrame, simulated: pd.DataFrame, scored: np.ndarray | None = None) -> pd.DataFrame:
    """One row per phase (and ``all``) and metric: requests, MAPE, bias. ``scored``: rows that count."""
    err = errors(measured.reset_index(drop=True), simulated)
    err["phase"] = measured["phase"].to_numpy()
    if scored is not None:
        err = err[np.asarray(scored, bool)]
    rows = []
    phases = ["all", *(p for p in dict.fromkeys(err["phase"]) if p != "all")]  # a file without phases: "all"
    for phase in phases:
        part = err if phase == "all" else err[err["phase"] == phase]
        for m in METRICS:
            e = part[m].dropna().to_numpy()
            rows.append({"phase": phase, "metric": m.removesuffix("_s"), "requests": len(e),
                         "mape": float(np.mean(np.abs(e))) if len(e) else np.nan,
                         "bias": float(np.mean(e)) if len(e) else np.nan})
    return pd.DataFrame(rows)


def overall(table: pd.DataFrame) -> dict[str, float]:
    """``{"ttft": mape, "tpot": mape, "e2e": mape}`` of a `score` table's ``all`` rows."""
    part = table[table["phase"] == "all"]
    return dict(zip(part["metric"], part["mape"], strict=True))
