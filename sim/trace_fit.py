"""Fit step-cost coefficients to a measured run by replaying it through kvsim (``kvsim calibrate --from-trace``).

No GPU and no kernel timings: the measured per-request TTFT and decode time (E2E - TTFT) are the targets,
and each trial set of coefficients is scored by simulating the whole run (every request loads the server)
and comparing the training requests only. The search (`sim.trace_search`) is least squares over the logarithms
of the fitted coefficients. Its cheap model of how they move the residuals comes from the simulated schedule
held fixed: every step the simulation priced is re-priced under slightly changed coefficients
(`sim.schedule_jacobian`). Finite differences of whole simulations over small changes would not do: a
request's TTFT jumps by up to a step as its arrival falls before or after a step boundary, and those jumps swamp
the derivative. Over 5% changes they average out, and such differences see what the fixed schedule cannot, the
queue's feedback on a loaded run, so the search uses both. Each trial point is simulated afresh (the schedule
may change) and kept only if it lowers the error. The search is bounded by a number of simulations and a
wall-clock limit, and deterministic: the training half is a seeded random half of the
requests (or the earlier half by arrival), and the simulation is seeded.

The other half is held out: the fitted coefficients predict it, and its MAPE is reported beside the training
error, per metric and per load phase (`sim.replay.score`). The split chooses only which requests are compared:
every request is simulated in every evaluation, so a multi-turn session's turns (`sim.replay.workload_of`) hit
what their previous turns computed whichever half each turn falls in, as they did in the measured run.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from allocators.catalog import get_gpu, get_model
from allocators.mla_backends import with_backend_kv_layout
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import StepCostModel
from sim.kernel.cost_profiles import get_profile
from sim.kernel.replica import cost_options
from sim.kernel.summary import rejected_reasons
from sim.measured import MeasuredRun
from sim.replay import METRICS, latencies, score, workload_of
from sim.schedule_jacobian import RecordingStepCost, schedule_jacobian
from sim.trace_search import Point, Search

FITTABLE = ("bandwidth_frac", "flops_frac", "step_overhead_s", "seq_overhead_s", "prefill_token_s",
            "mixed_overlap")
DEFAULT_FIT = ("bandwidth_frac", "flops_frac", "seq_overhead_s")
FRACTIONS = ("bandwidth_frac", "flops_frac", "mixed_overlap")
TTFT_GROUP = 16
"""TTFT is compared in sums over this many training requests of similar prompt length (see `fit_trace`)."""
MAX_SECONDS = 0.1
"""Largest value a fitted time coefficient may take (a tenth of a second per step, sequence or token)."""
STEP = 1e-4
"""Forward-difference step in log coefficients for re-pricing a fixed schedule (smooth there)."""
_FLOOR = 1e-7
"""Smallest value a time coefficient starts from (its logarithm must exist)."""


@dataclass
class TraceFit:
    """The fitted coefficients, the errors on both halves, and how the search went."""

    coefficients: dict
    fitted: tuple[str, ...]
    train: np.ndarray
    train_score: pd.DataFrame
    heldout_score: pd.DataFrame
    simulations: int
    seconds: float
    start_profile: str
    rejected: dict[str, int]
    """Scored requests the fitted simulation rejected, by reason (`rejected_reasons`): they have no simulated
    latency, so no score counts them, and the report must say so."""
    length_capped: int = 0
    """Scored requests whose measured output runs past ``max_model_len``, which the simulation stops there
    (`sim.kernel.over_length`): each is scored against a shorter run than was measured, which the report says
    (a sign that the run's ``--max-model-len`` was larger than the one given)."""


def split_halves(n: int, how: str = "random", seed: int = 0) -> np.ndarray:
    """A boolean mask of the training half: a seeded random half, or (``how="time"``) the earlier half. Requests,
    not sessions: the other half is still simulated (`fit_trace`), so no turn loses its previous turn's hits."""
    if how == "time":
        return np.arange(n) < (n + 1) // 2
    if how != "random":
        raise ValueError(f"holdout split must be random or time, got {how!r}")
    mask = np.zeros(n, bool)
    mask[np.random.default_rng(seed).permutation(n)[: (n + 1) // 2]] = True
    return mask


def _targets(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Measured TTFT and decode time (E2E - TTFT; NaN for one-token outputs)."""
    ttft = frame["ttft_s"].to_numpy(float)
    decode = frame["e2e_s"].to_numpy(float) - ttft
    decode = np.where(frame["output_tokens"].to_numpy() > 1, decode, np.nan)
    return ttft, decode


def _log_ratio(sim: np.ndarray, meas: np.ndarray) -> np.ndarray:
    ok = np.isfinite(sim) & np.isfinite(meas) & (meas > 0) & (sim > 0)
    return np.log(np.where(ok, sim, 1.0) / np.where(ok, meas, 1.0))


def fit_trace(run: MeasuredRun, config: SimConfig, *, start_profile: str = "vllm-v1",
              fit: Sequence[str] = DEFAULT_FIT, holdout: str = "random", seed: int = 0, max_evals: int = 60,
              time_limit_s: float = 300.0) -> TraceFit:
    """Fit ``fit`` (names of `FITTABLE` coefficients) to a random (or the earlier) half of ``run``, starting
    from profile ``start_profile``; the other coefficients keep the profile's values. ``max_evals``: most
    simulations of the run, over the search's two starts (`sim.trace_search`)."""
    unknown = [name for name in fit if name not in FITTABLE]
    if unknown or not fit:
        raise ValueError(f"cannot fit {', '.join(unknown) or 'nothing'}; fittable: {', '.join(FITTABLE)}")
    if twice := sorted({name for name in fit if list(fit).count(name) > 1}):
        raise ValueError(f"--fit names {', '.join(twice)} more than once")
    started = time.monotonic()
    gpu = get_gpu(config.gpu)  # the model as the run's capacity has it: its KV dtype, its backend's latent layout
    model = with_backend_kv_layout(get_model(config.model).with_kv_cache_dtype(config.kv_cache_dtype), gpu)
    base = dict(get_profile(start_profile).coefficients)
    common = cost_options(config, model, gpu)
    train = split_halves(len(run.frame), holdout, seed) & run.scored
    heldout = ~train & run.scored
    halves = {"training": train, "held-out": heldout}
    if (empty := _empty_half(halves)) is not None:  # a score over no requests would print nan%
        raise ValueError(f"{run.path}: the {empty} half has no scored requests ({int(run.scored.sum())} "
                         f"scored of {len(run.frame)}; warm-up requests are not scored): the run is too "
                         "short to fit and check")
    ttft, decode = _targets(run.frame)
    names = tuple(fit)
    # One request's TTFT jumps by up to a step as its arrival falls before or after a step boundary, so
    # TTFT is compared in groups of `TTFT_GROUP` training requests of similar prompt length (sums), where the
    # jumps average out; decode times are sums of many steps and are compared one by one.
    rows = np.flatnonzero(train & np.isfinite(ttft))
    rows = rows[np.argsort(run.frame["prompt_tokens"].to_numpy()[rows], kind="stable")]
    groups = np.array_split(rows, max(1, len(rows) // TTFT_GROUP))
    measured_groups = np.array([ttft[g].sum() for g in groups])
    decode_rows = np.flatnonzero(train & np.isfinite(decode))
    workload = workload_of(run)

    def coefficients(x: np.ndarray) -> dict:
        values = dict(base)
        for name, v in zip(names, np.exp(x), strict=True):
            values[name] = min(float(v), 1.0) if name in FRACTIONS else float(v)
        return values

    def evaluate(x: np.ndarray, warn: bool = False) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
        """Residuals (log ratios of TTFT and decode time on the training rows), their Jacobian, requests.
        ``warn``: warn the settings the run ignores (`run_simulation`), the same in every simulation: once."""
        from sim.kernel.runner import run_simulation

        cost = RecordingStepCost(model=model, gpu=gpu, source="trace fit", **coefficients(x), **common)
        result = run_simulation(config, workload, cost=cost, warn=warn)
        req = result.requests
        s_ttft = req["ttft_s"].to_numpy(float)
        s_decode = req["e2e_s"].to_numpy(float) - s_ttft
        s_groups = np.array([s_ttft[g].sum() for g in groups])
        r = np.concatenate([_log_ratio(s_groups, measured_groups),
                            _log_ratio(s_decode[decode_rows], decode[decode_rows])])
        perturbed = []
        for i in range(len(x)):
            xi = x.copy()
            xi[i] += STEP
            perturbed.append(StepCostModel(model=model, gpu=gpu, **coefficients(xi), **common))
        d_ttft, d_decode = schedule_jacobian(result.steps, cost.calls, perturbed, STEP, req)
        with np.errstate(invalid="ignore", divide="ignore"):
            j_ttft = np.nan_to_num(np.array([d_ttft[g].sum(axis=0) for g in groups]) / s_groups[:, None])
            j_decode = np.nan_to_num(d_decode[decode_rows] / s_decode[decode_rows, None])
        return r, np.vstack([j_ttft, j_decode]), req

    x = np.log([max(float(base[name]), _FLOOR) for name in names])
    upper = np.log([1.0 if name in FRACTIONS else MAX_SECONDS for name in names])
    start = Point(x, *evaluate(x, warn=True))
    refused = start.requests["rejected"].to_numpy(bool)  # set by the settings, not the coefficients: known now
    if (empty := _empty_half(halves, ~refused)) is not None:
        raise ValueError(f"{run.path}: the simulation served 0 of the {int(halves[empty].sum())} scored requests of "
                         f"the {empty} half ({int((refused & run.scored).sum())} scored requests rejected in all): "
                         "too few to fit and check; give the run's own settings (--kv-tokens, --max-model-len, ...)")
    search = Search(evaluate, np.full(len(names), np.log(_FLOOR)), upper, max_evals, started + time_limit_s, evals=1)
    best = search.fit(start)
    x, req = best.x, best.requests
    sim = latencies(req)
    rejected = rejected_reasons(req["reject_reason"][req["rejected"].to_numpy(bool) & run.scored])
    capped = int(((req["length_capped_tokens"].to_numpy() > 0) & run.scored).sum())
    return TraceFit(coefficients(x), names, train, score(run.frame, sim, train), score(run.frame, sim, heldout),
                    search.evals, time.monotonic() - started, start_profile, rejected, capped)


def _empty_half(halves: dict[str, np.ndarray], counted: np.ndarray | None = None) -> str | None:
    """The first half (label -> mask of its scored requests) with no request among ``counted`` (all when None):
    a fit needs requests to fit and to score, counted before the fit and again after its first simulation, whose
    rejections (a pool or ``max_model_len`` smaller than the run's) can empty a half."""
    return next((label for label, half in halves.items() if not (half if counted is None else half & counted).any()),
                None)


def _scores(table: pd.DataFrame) -> dict:
    """A score table's ``all`` rows as ``{metric}_{mape,bias}``; None where a metric had nothing to score (no
    request generated two tokens: no TPOT), which JSON writes as null, where NaN is not JSON."""
    part = table[table["phase"] == "all"]

    def value(v: float) -> float | None:
        return round(float(v), 4) if np.isfinite(v) else None

    return {f"{row.metric}_{key}": value(getattr(row, key))
            for row in part.itertuples() for key in ("mape", "bias")} | {"requests": int(part["requests"].max())}


FIT_SETTINGS = ("tensor_parallel", "kv_cache_dtype", "kv_tokens", "kv_gib", "gpu_memory_utilization",
                "max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size", "prefix_caching",
                "chunked_prefill", "parallel_sampling")
"""The deployment a fit was made under, recorded in its table (``fit.settings``): the coefficients are fitted
to that run (an fp8 cache or another tensor-parallel size moves other bytes), so whoever uses the table can
see what it was fitted to."""


def trace_table(result: TraceFit, run: MeasuredRun, config: SimConfig, created: str | None = None) -> dict:
    """The calibration table (``kvsim-calibration`` format, as `gpu_validation.fit` writes it) of a fit."""
    c = result.coefficients
    coefficients = {k: float(f"{c[k]:.4g}") for k in FITTABLE}
    coefficients["paged_kernel_overhead"] = {str(k): v for k, v in sorted(c["paged_kernel_overhead"].items())}
    return {
        "format": "kvsim-calibration", "version": 2, "gpu": config.gpu, "model": config.model,
        "device": "trace", "device_name": f"measured run {run.path} ({run.kind})",
        "created": created or _dt.date.today().isoformat(),
        "coefficients": coefficients,
        "fit": {"method": "replay through kvsim, least squares on log coefficients (secant and schedule-frozen steps)",
                "fitted": list(result.fitted), "start_profile": result.start_profile,
                "simulations": result.simulations, "seconds": round(result.seconds, 1),
                "train": _scores(result.train_score), "heldout": _scores(result.heldout_score),
                "rejected": result.rejected, "length_capped": result.length_capped,
                "metrics": [m.removesuffix("_s") for m in METRICS],
                "settings": {key: getattr(config, key) for key in FIT_SETTINGS}},
    }
