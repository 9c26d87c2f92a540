"""Fit the step-cost coefficients to measured step times, and read/write calibration tables; and `fit_link`, the
host-GPU link fitted to timed KV copies. Torch-free, as fitting measurements needs no GPU: the benchmark that scores
the committed runs (``benchmarks/gpu_clock_check.py``, ``--transfers`` too) runs without the ``gpu`` extra.

The model (``docs/architecture.md``) is a roofline::

    t = c0 + max(a * flops, b * (weight_bytes + kv_write_bytes) + q[block_size] * kv_read_bytes)

with ``a = 1 / (flops_frac * peak_flops)``, ``b = 1 / (bandwidth_frac * peak_bw)``, ``c0`` the per-step
overhead and ``q = b * paged_kernel_overhead``. For a fixed assignment of points to the compute or the
memory side it is linear in ``(c0, a, b, q...)``, so the fit alternates: assign each point to the side its
current prediction puts it on, solve a weighted linear least-squares problem, repeat until the assignment
stops changing (a few rounds), keeping the best solution seen. Weights are ``1 / t``, so a 2 ms decode step
counts as much as a 200 ms prefill (relative error), which is what the simulator's latencies need.

Bounds keep the answer physical: ``c0 >= 0``, fractions of peak at most 1, and KV reads no faster than
peak bandwidth (``q >= 1 / peak_bw``). They are enforced by a small active-set loop: solve, pin the worst
violator at its bound, solve again. A coefficient that no point informs (no point clearly, by 5%, on the
compute side; no memory-bound point at some block size) gets a default instead (the simulator's 0.6 and
0.8 for the fractions, a neutral 1.0 for a paging factor) and is listed in ``FitResult.defaulted``.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

FORMAT = "kvsim-calibration"
VERSION = 2
"""Version 2 adds the step-cost model's CPU and overlap terms (``seq_overhead_s``, ``prefill_token_s``,
``mixed_overlap``); the kernel harness times single forward passes, which cannot see them, so its tables write
their neutral values (a plain roofline). ``kvsim calibrate --from-trace`` fits them (`sim.trace_fit`)."""
NEUTRAL_TERMS = {"seq_overhead_s": 0.0, "prefill_token_s": 0.0, "mixed_overlap": 1.0}
DEFAULT_FLOPS_FRAC = 0.6
DEFAULT_BANDWIDTH_FRAC = 0.8
DEFAULT_PAGED_OVERHEAD = 1.0


@dataclass(frozen=True)
class Coefficients:
    bandwidth_frac: float
    flops_frac: float
    step_overhead_s: float
    paged_kernel_overhead: dict[int, float]

    def terms(self, frame: pd.DataFrame, peak_flops: float, peak_bandwidth: float
              ) -> tuple[np.ndarray, np.ndarray]:
        """Compute seconds and memory seconds of each row of a harness table."""
        factor = frame["block_size"].map(lambda bs: self.paged_kernel_overhead.get(int(bs), 1.0)).to_numpy()
        compute = frame["flops"].to_numpy() / (self.flops_frac * peak_flops)
        memory = (frame["weight_bytes"].to_numpy() + frame["kv_write_bytes"].to_numpy()
                  + factor * frame["kv_read_bytes"].to_numpy()) / (self.bandwidth_frac * peak_bandwidth)
        return compute, memory

    def predict(self, frame: pd.DataFrame, peak_flops: float, peak_bandwidth: float) -> np.ndarray:
        """Modelled step seconds for each row of a harness table."""
        return self.step_overhead_s + np.maximum(*self.terms(frame, peak_flops, peak_bandwidth))


@dataclass(frozen=True)
class FitResult:
    coefficients: Coefficients
    points: int
    rmse_s: float
    mape: float
    predicted: np.ndarray
    compute_bound: np.ndarray
    defaulted: tuple[str, ...] = field(default=())


def bounded_lstsq(a: np.ndarray, y: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """Least squares ``min |a x - y|`` subject to ``x >= lower``, by pinning violators one at a time.

    Columns are scaled to unit maximum first, so "worst violator" compares like with like.
    """
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    a_s, lower_s = a / scale, lower * scale
    pinned = np.zeros(a.shape[1], dtype=bool)
    x_s = lower_s.copy()
    for _ in range(a.shape[1] + 1):
        free = ~pinned
        rhs = y - a_s[:, pinned] @ lower_s[pinned]
        x_s[free] = np.linalg.lstsq(a_s[:, free], rhs, rcond=None)[0]
        x_s[pinned] = lower_s[pinned]
        violation = np.where(free, lower_s - x_s, -np.inf)
        if violation.max() <= 0:
            break
        pinned[int(violation.argmax())] = True
    return x_s / scale


def fit_step_costs(frame: pd.DataFrame, peak_flops: float, peak_bandwidth: float,
                   max_rounds: int = 25) -> FitResult:
    """Fit the coefficients to a harness table (columns ``step_s``, ``flops``, ``weight_bytes``,
    ``kv_read_bytes``, ``kv_write_bytes``, ``block_size``)."""
    if len(frame) < 4:
        raise ValueError(f"need at least 4 timed steps to fit 4+ coefficients, got {len(frame)}")
    t = frame["step_s"].to_numpy(dtype=float)
    if not np.all(np.isfinite(t)) or t.min() <= 0:
        raise ValueError("step_s must be positive and finite in every row")
    flops = frame["flops"].to_numpy(dtype=float)
    fixed_bytes = frame["weight_bytes"].to_numpy(dtype=float) + frame["kv_write_bytes"].to_numpy(dtype=float)
    kv_read = frame["kv_read_bytes"].to_numpy(dtype=float)
    sizes = sorted(int(b) for b in frame["block_size"].unique())
    onehot = (frame["block_size"].to_numpy()[:, None] == np.array(sizes)[None, :]).astype(float)
    lower = np.array([0.0, 1 / peak_flops, 1 / peak_bandwidth] + [1 / peak_bandwidth] * len(sizes))
    w = 1.0 / t

    def solve(compute: np.ndarray) -> np.ndarray:
        mem = ~compute
        design = np.column_stack([np.ones_like(t), flops * compute, fixed_bytes * mem,
                                  onehot * (kv_read * mem)[:, None]])
        return bounded_lstsq(design * w[:, None], t * w, lower)

    def terms(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x[1] * flops, x[2] * fixed_bytes + (onehot @ x[3:]) * kv_read

    def predict(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        compute_t, memory_t = terms(x)
        return x[0] + np.maximum(compute_t, memory_t), compute_t > memory_t

    compute = flops / peak_flops > (fixed_bytes + kv_read) / peak_bandwidth  # the nominal roofline
    best = None
    for _ in range(max_rounds):
        x = solve(compute)
        pred, new_compute = predict(x)
        loss = float(np.sum(((pred - t) * w) ** 2))
        if best is None or loss < best[0]:
            best = (loss, x)
        if np.array_equal(new_compute, compute):
            break
        compute = new_compute
    x = best[1]
    # a side informs its coefficient only through points clearly on it (a tie leaves it undetermined)
    compute_t, memory_t = terms(x)
    on_compute, on_memory = compute_t > 1.05 * memory_t, memory_t > 1.05 * compute_t
    defaulted = []
    flops_frac = min(1.0, 1 / (x[1] * peak_flops))  # at the bound, rounding can land a hair above 1
    if not on_compute.any():
        flops_frac = DEFAULT_FLOPS_FRAC
        defaulted.append("flops_frac")
    bandwidth_frac = min(1.0, 1 / (x[2] * peak_bandwidth))
    if not on_memory.any():
        bandwidth_frac = DEFAULT_BANDWIDTH_FRAC
        defaulted.append("bandwidth_frac")
    overhead = {}
    for j, bs in enumerate(sizes):
        if (onehot[:, j] * on_memory * kv_read).any() and "bandwidth_frac" not in defaulted:
            overhead[bs] = float(x[3 + j] / x[2])
        else:
            overhead[bs] = DEFAULT_PAGED_OVERHEAD
            defaulted.append(f"paged_kernel_overhead[{bs}]")
    coefficients = Coefficients(float(bandwidth_frac), float(flops_frac), float(x[0]), overhead)
    compute_t, memory_t = coefficients.terms(frame, peak_flops, peak_bandwidth)
    pred = coefficients.step_overhead_s + np.maximum(compute_t, memory_t)
    return FitResult(coefficients, len(frame), float(np.sqrt(np.mean((pred - t) ** 2))),
                     float(np.mean(np.abs(pred - t) / t)), pred, compute_t > memory_t, tuple(defaulted))


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def calibration_table(fit: FitResult, *, gpu: str, model: str, device: str, device_name: str, dtype: str,
                      peak_flops: float, peak_bandwidth: float, peaks_source: str, timed_model: str,
                      timing: str = "eager", created: str | None = None) -> dict:
    """The JSON object of ``docs/architecture.md``, plus ``peaks`` (what the fractions are fractions of),
    ``timed_model`` (the shapes actually timed, when a quick run scaled the model down) and ``timing``
    (``cuda-graph`` or ``eager``: `harness.timing_mode`)."""
    c = fit.coefficients
    return {
        "format": FORMAT, "version": VERSION, "gpu": gpu, "model": model, "device": device,
        "device_name": device_name, "dtype": dtype, "created": created or _dt.date.today().isoformat(),
        "coefficients": {
            "bandwidth_frac": _sig(c.bandwidth_frac), "flops_frac": _sig(c.flops_frac),
            "step_overhead_s": _sig(c.step_overhead_s), **NEUTRAL_TERMS,
            "paged_kernel_overhead": {str(bs): _sig(v) for bs, v in sorted(c.paged_kernel_overhead.items())},
        },
        "fit": {"points": fit.points, "rmse_s": _sig(fit.rmse_s), "mape": _sig(fit.mape)},
        "peaks": {"flops_s": _sig(peak_flops), "bandwidth_bytes_s": _sig(peak_bandwidth), "source": peaks_source},
        "timed_model": timed_model, "timing": timing,
    }


def write_table(table: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=2) + "\n")
    return path


def read_table(path: str | Path) -> dict:
    """Load a calibration table, with a one-line error naming the file and the field that is wrong."""
    path = Path(path)
    try:
        table = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read calibration table: {exc}") from None
    if not isinstance(table, dict) or table.get("format") != FORMAT:
        raise ValueError(f"{path}: field 'format' must be {FORMAT!r}")
    for key in ("bandwidth_frac", "flops_frac", "step_overhead_s", "paged_kernel_overhead"):
        if key not in table.get("coefficients", {}):
            raise ValueError(f"{path}: field 'coefficients.{key}' is missing")
    return table


def coefficients_from_table(table: dict) -> Coefficients:
    c = table["coefficients"]
    return Coefficients(float(c["bandwidth_frac"]), float(c["flops_frac"]), float(c["step_overhead_s"]),
                        {int(k): float(v) for k, v in c["paged_kernel_overhead"].items()})


def load_calibration(path: str | Path) -> tuple[dict, pd.DataFrame]:
    """A table and the measurements it was fitted to (the ``.csv`` beside it)."""
    path = Path(path)
    table = read_table(path)
    csv = path.with_suffix(".csv")
    if not csv.is_file():
        raise ValueError(f"{path}: its measurements {csv.name} are missing")
    return table, pd.read_csv(csv)


def fit_link(rows: pd.DataFrame) -> pd.DataFrame:
    """Per direction, ``seconds = latency + bytes / bandwidth`` fitted to the contiguous copies by least squares on
    relative error (every size counts alike, 32 KiB as much as 256 MiB): latency_s and gb_s, both NaN where the
    times do not grow with the bytes (a fitted slope of zero or less: a CPU's noisy copies), not a negative link."""
    fits = []
    for direction, group in rows[(rows.pattern == "contiguous") & rows.seconds.notna()].groupby("direction"):
        t = group.seconds.to_numpy()
        a = np.column_stack([np.ones_like(t), group["bytes"].to_numpy(dtype=float)]) / t[:, None]
        (latency, per_byte), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
        fitted = per_byte > 0
        fits.append({"direction": direction, "latency_s": float(latency) if fitted else math.nan,
                     "gb_s": 1 / float(per_byte) / 1e9 if fitted else math.nan,
                     "largest_copy_gb_s": float(group.sort_values("bytes").gb_s.iloc[-1])})
    return pd.DataFrame(fits)
