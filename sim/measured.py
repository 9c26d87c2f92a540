"""A measured serving run, per request: what ``kvsim calibrate --from-trace`` fits to and scores against.

Three inputs are read into one table (`MeasuredRun.frame`, columns ``arrival_time_s, prompt_tokens,
output_tokens, ttft_s, e2e_s, tpot_s, phase, warmup`` and, where given, ``prefix_group, prefix_len``):

- a per-request CSV with at least ``arrival_time_s,prompt_tokens,output_tokens,ttft_s,e2e_s`` (optional:
  ``phase``, ``warmup`` 0/1, ``prefix_group``, ``prefix_len``); ``tpot_s`` is recomputed as
  ``(e2e - ttft) / (output - 1)``;
- vLLM's ``benchmark_serving.py --save-result`` JSON: per-request lists ``input_lens``, ``output_lens``,
  ``ttfts`` and ``itls`` (E2E = TTFT + the sum of the request's ITLs); it records no arrival times, so its
  requests are taken to arrive at ``request_rate`` (Poisson is not reproducible without its seed: evenly
  spaced; all at 0 when the rate is ``inf``), which the fit replays;
- guidellm's results JSON (``benchmarks[].requests.successful[]``, each with ``prompt_tokens``,
  ``output_tokens``, ``first_token_time``/``start_time``/``end_time`` or ``time_to_first_token_ms``/
  ``request_latency``); each benchmark is a phase, arrivals are the requests' start times.

Every bad input is a one-line ValueError naming the file, row and field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

REQUIRED = ("arrival_time_s", "prompt_tokens", "output_tokens", "ttft_s", "e2e_s")


@dataclass
class MeasuredRun:
    """Per-request measurements sorted by arrival, and the file they came from."""

    frame: pd.DataFrame
    path: str
    kind: str

    @property
    def scored(self) -> np.ndarray:
        """Rows that count in scores: not the warm-up request."""
        return ~self.frame["warmup"].to_numpy(bool)


def _finish(frame: pd.DataFrame, path: Path, kind: str) -> MeasuredRun:
    for col in REQUIRED:
        values = pd.to_numeric(frame[col], errors="coerce")
        bad = ~np.isfinite(values.to_numpy(float)) | (values.to_numpy(float) < 0)
        if col in ("prompt_tokens", "output_tokens"):
            bad |= values.to_numpy(float) < 1
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(f"{path}: row {row + 1}: field {col!r}: bad value {frame[col].iloc[row]!r}")
        frame[col] = values
    if "phase" not in frame:
        frame["phase"] = "all"
    frame["phase"] = frame["phase"].astype(str)
    frame["warmup"] = frame["warmup"].astype(int) if "warmup" in frame else 0
    frame["prompt_tokens"] = frame["prompt_tokens"].astype(np.int64)
    frame["output_tokens"] = frame["output_tokens"].astype(np.int64)
    out = frame["output_tokens"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        frame["tpot_s"] = np.where(out > 1, (frame["e2e_s"] - frame["ttft_s"]) / np.maximum(out - 1, 1), np.nan)
    frame = frame.sort_values("arrival_time_s", kind="stable").reset_index(drop=True)
    frame["arrival_time_s"] -= frame["arrival_time_s"].iloc[0]
    keep = [*REQUIRED, "tpot_s", "phase", "warmup"] + [c for c in ("prefix_group", "prefix_len") if c in frame]
    return MeasuredRun(frame[keep], str(path), kind)


def _read_csv(path: Path) -> MeasuredRun:
    frame = pd.read_csv(path)
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (a measured run needs "
                         f"{','.join(REQUIRED)})")
    return _finish(frame, path, "measured CSV")


def _benchmark_serving(data: dict, path: Path) -> MeasuredRun:
    lists = {key: data.get(key) for key in ("input_lens", "output_lens", "ttfts", "itls")}
    for key, value in lists.items():
        if not isinstance(value, list) or len(value) != len(lists["input_lens"] or []):
            raise ValueError(f"{path}: field {key!r} must be a list with one entry per request")
    rate = data.get("request_rate", "inf")
    rate = float("inf") if rate in (None, "inf") else float(rate)
    n = len(lists["input_lens"])
    arrivals = np.zeros(n) if math.isinf(rate) else np.arange(n) / rate
    e2e = []
    for i, (ttft, itl) in enumerate(zip(lists["ttfts"], lists["itls"], strict=True)):
        if not isinstance(itl, list):
            raise ValueError(f"{path}: request {i + 1}: field 'itls' must be a list of seconds")
        e2e.append(float(ttft) + float(sum(itl)))
    frame = pd.DataFrame({"arrival_time_s": arrivals, "prompt_tokens": lists["input_lens"],
                          "output_tokens": lists["output_lens"], "ttft_s": lists["ttfts"], "e2e_s": e2e})
    return _finish(frame, path, "vLLM benchmark_serving result")


def _guidellm_request(req: dict, where: str) -> dict:
    def num(*keys: str) -> float | None:
        for key in keys:
            value = req.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        return None

    start = num("start_time", "request_start_time")
    end = num("end_time", "request_end_time")
    first = num("first_token_time")
    ttft = (first - start) if first is not None and start is not None else num("time_to_first_token_ms")
    if ttft is not None and first is None:
        ttft /= 1000.0
    e2e = (end - start) if end is not None and start is not None else num("request_latency")
    prompt, output = num("prompt_tokens"), num("output_tokens")
    for name, value in (("start_time", start), ("time to first token", ttft), ("latency", e2e),
                        ("prompt_tokens", prompt), ("output_tokens", output)):
        if value is None:
            raise ValueError(f"{where}: field {name!r} is missing")
    return {"arrival_time_s": start, "prompt_tokens": prompt, "output_tokens": output, "ttft_s": ttft,
            "e2e_s": e2e}


def _guidellm(data: dict, path: Path) -> MeasuredRun:
    rows = []
    for b, bench in enumerate(data.get("benchmarks") or []):
        requests = bench.get("requests", {})
        successful = requests.get("successful") if isinstance(requests, dict) else None
        if not isinstance(successful, list):
            raise ValueError(f"{path}: benchmarks[{b}]: field 'requests.successful' must be a list")
        args = bench.get("args", {}) if isinstance(bench.get("args"), dict) else {}
        strategy = args.get("strategy", {}) if isinstance(args.get("strategy"), dict) else {}
        phase = str(strategy.get("type_", strategy.get("type", f"benchmark-{b}")))
        if "rate" in strategy:
            phase += f"@{strategy['rate']:.3g}"
        for r, req in enumerate(successful):
            row = _guidellm_request(req, f"{path}: benchmarks[{b}].requests.successful[{r}]")
            rows.append(row | {"phase": phase})
    if not rows:
        raise ValueError(f"{path}: no successful requests under 'benchmarks'")
    return _finish(pd.DataFrame(rows), path, "guidellm results")


def read_measured(path: str | Path) -> MeasuredRun:
    """Read a measured run from any of the three formats (JSON by its keys, anything else as CSV)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    if path.suffix.lower() != ".json":
        return _read_csv(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read JSON: {exc}") from None
    if isinstance(data, dict) and "input_lens" in data:
        return _benchmark_serving(data, path)
    if isinstance(data, dict) and "benchmarks" in data:
        return _guidellm(data, path)
    raise ValueError(f"{path}: neither a vLLM benchmark_serving result (input_lens, ttfts, itls) nor guidellm "
                     "results (benchmarks)")
