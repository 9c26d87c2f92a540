"""Everything a GPU session should run, in one call: ``python -m gpu_validation.run_all DIR``.

1. Correctness: every kernel (reference, FlexAttention, the Triton kernel with and without split-K) on
   random and allocator-driven scenarios, fp32 and bf16, block sizes 8/16/32, decode and chunked prefill.
2. A quick calibration of Llama-3-8B (`calibration.calibrate`; on a GPU, parts timed as CUDA graph replays),
   written as ``DIR/llama-3-8b.json`` with its measurements in ``DIR/llama-3-8b.csv``.
3. Decode bandwidth at 64 sequences x 4,096 tokens for each kernel against a measured device copy.
4. Whole steps (`whole_step.whole_steps`): a few Llama-3-8B steps run as one forward pass over all 32 layers,
   beside the calibration's composition of the same step from one layer's parts (``DIR/whole_steps.csv``).
5. Host transfers (`host_transfer.host_transfers`): KV copied between pinned host memory and the GPU, contiguous,
   in vLLM's per-block pattern and by a transfer kernel a layer (HiCache's), for the swap and host-tier clock
   (``DIR/host_transfers.csv``).

It prints a short table last and exits 1 unless every check ran and passed and every stage completed.
Without a GPU (or with ``--device cpu``) it runs the same steps on CPU at sizes a CPU finishes quickly
(scaled-down model, smaller bandwidth point), FlexAttention eager unless ``--compile-flex``; ``--quick``
trims the correctness grid further (for CI).

The run is made for one unattended try on a machine lent for minutes, so no stage can stop the others: a
stage that fails is reported (its traceback in the log, its reason in the table) and the next one runs.
``--budget-s`` bounds the wall time: the checks stop starting scenarios early enough to leave the
calibration and the bandwidth point their share, each stage is skipped if its share is gone, and a watchdog
ends the process (printing every thread's stack) 60 s past the budget should anything hang.
"""

from __future__ import annotations

import argparse
import faulthandler
import math
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from gpu_validation import refuse_without_torch

try:
    import torch
except ImportError as exc:  # torch is the optional "gpu" extra
    if __name__ == "__main__":
        refuse_without_torch("python -m gpu_validation.run_all", exc)
    raise

from allocators.catalog import get_model
from gpu_validation.bandwidth import decode_bandwidth
from gpu_validation.calibration import CalibrationRun, calibrate, write_run
from gpu_validation.checks import run_checks
from gpu_validation.features import scaled_model
from gpu_validation.host_transfer import default_timer, describe, host_transfers
from gpu_validation.timing import Timer, copy_bandwidth, device_of
from gpu_validation.triton_paged import triton_available
from gpu_validation.whole_step import whole_steps

MODEL = "llama-3-8b"
DEFAULT_BUDGET_S = 360.0
"""Default wall-clock budget: with the watchdog's grace and start-up, well inside an 8-minute slot."""
WATCHDOG_GRACE_S = 60.0
MAX_BUDGET_S = 7 * 86_400.0
"""Longest --budget-s, a week: far past any run, and the watchdog's timer refused inf, NaN and 1e12 s with a
traceback."""
RESERVE_S = {"cuda": (90.0, 45.0, 30.0, 10.0), "cpu": (80.0, 40.0, 20.0, 10.0)}
"""Seconds of the budget kept back, by device, for (calibration and what follows, bandwidth and what follows,
whole steps and what follows, host transfers). Measured on an H200 (2026-12-04): checks 55-61 s, the quick
calibration 8-10 s, the bandwidth point 2 s, the whole steps 3-4 s (16 GB of weights, up to 34 GB of KV); the
reserves are about six times that, for slower GPUs. Reserves of (180, 90, 30) left the checks only 60 s of a 240 s
budget: 35 of 112 were skipped."""


def _log(start: float):
    return lambda line: print(f"[{time.perf_counter() - start:6.1f}s] {line}", flush=True)


def summary(checks: pd.DataFrame | None, run: CalibrationRun | None, bandwidth: pd.DataFrame | None,
            errors: dict[str, str], whole: pd.DataFrame | None = None,
            transfers: pd.DataFrame | None = None, unchecked: str | None = None) -> str:
    """The short table printed last: what each stage found, each stage that did not complete, and
    ``unchecked``, what no stage could check here (`triton_unchecked`)."""
    lines = ["", "== kvsim GPU validation summary =="]
    if checks is not None and len(checks):
        verdicts = checks.groupby(["kernel", "dtype"]).agg(cases=("passed", "size"), passed=("passed", "sum"),
                                                            worst=("rel_error", "max"))
        lines.append("correctness (relative error vs dense float64):")
        for (kernel, dtype), r in verdicts.iterrows():
            lines.append(f"  {kernel:14s} {dtype:9s} {int(r.passed):3d}/{int(r.cases):<3d} passed  "
                         f"worst {r.worst:.2e}")
    if run is not None:
        t, c, f = run.table, run.table["coefficients"], run.table["fit"]
        kernels = ", ".join(sorted(run.measurements["attention_kernel"].unique()))
        lines.append(f"calibration {t['model']} on {t['gpu']} ({t['device']}, {t['dtype']}, timed as "
                     f"{t['timed_model']}, {t['timing']}, attention by {kernels}):")
        lines.append(f"  bandwidth_frac {c['bandwidth_frac']}  flops_frac {c['flops_frac']}  "
                     f"step_overhead_s {c['step_overhead_s']}  paged_kernel_overhead {c['paged_kernel_overhead']}")
        lines.append(f"  fit {f['points']} points  rmse {f['rmse_s'] * 1e3:.3g} ms  mape {f['mape']:.1%}")
    if bandwidth is not None and len(bandwidth):
        first = bandwidth.iloc[0]
        lines.append(f"decode attention, one layer, {first.batch_size} x {first.context_len} tokens, block "
                     f"{first.block_size}, {first['dtype']} (device copy {first.copy_gb_s:.0f} GB/s):")
        flex = bandwidth[bandwidth.kernel.str.startswith("flex")].seconds
        flex_s = float(flex.iloc[0]) if len(flex) else math.nan
        for r in bandwidth.itertuples():
            if r.error:
                lines.append(f"  {r.kernel:14s} not timed: {r.error}")
                continue
            vs_flex = f"  {flex_s / r.seconds:.2f}x flex" if math.isfinite(flex_s) else ""
            lines.append(f"  {r.kernel:14s} {r.seconds * 1e6:9.1f} us  {r.bandwidth_gb_s:7.1f} GB/s  "
                         f"{r.share_of_copy:6.1%} of copy{vs_flex}")
    if whole is not None and len(whole):
        lines.append(f"whole steps ({whole['timing'].iloc[0]}), one forward pass against the calibration's "
                     "composition of it:")
        for r in whole.itertuples():
            point = f"  {r.kind:7s} batch {r.batch_size:3d} context {r.context_len:5d}  "
            lines.append(point + (r.note if r.note else f"whole {r.whole_step_s * 1e3:8.2f} ms  composed "
                                  f"{r.composed_step_s * 1e3:8.2f} ms  {r.whole_over_composed:.3f}x"))
    if transfers is not None and len(transfers):
        lines.append("host transfers (each per-block call one layer's K or V of one block):")
        lines += describe(transfers)
    if checks is not None:
        failed = checks[~checks.passed]
        skipped = checks.attrs.get("skipped", 0)
        lines.append(f"checks: {len(checks) - len(failed)}/{len(checks)} passed"
                     + (f", {skipped} more skipped (time budget spent)" if skipped else ""))
        for r in failed.itertuples():
            lines.append(f"  FAILED {r.kernel} {r.scenario} {r.dtype}: error {r.rel_error:.2e} {r.note}")
    for stage, error in errors.items():
        lines.append(f"{stage} did not complete: {error}")
    if unchecked:
        lines.append(f"triton: {unchecked}")
    return "\n".join(lines)


def triton_unchecked(device: str) -> str | None:
    """What to say when the Triton kernels cannot run on ``device``: their checks and timings are then left out,
    which on a GPU leaves the run incomplete (`main`) and on CPU is said, not hidden."""
    if triton_available(device):
        return None
    try:
        import triton  # noqa: F401
        why = "on CPU they run only under TRITON_INTERPRET=1"
    except ImportError:
        why = "triton is not importable"
    return f"the Triton kernels were not checked or timed here ({why})"


def complete(checks: pd.DataFrame | None, bandwidth: pd.DataFrame | None, errors: dict[str, str]) -> bool:
    """Every stage ran to the end, every check ran and passed, every kernel was timed."""
    return (not errors and checks is not None and bool(checks.passed.all()) and not checks.attrs.get("skipped")
            and bandwidth is not None and not bandwidth["error"].astype(bool).any())


def _whole_steps(device: str, log: Callable[[str], None]) -> pd.DataFrame:
    model = get_model(MODEL)
    if device == "cuda":
        timer, dtype = Timer(device, warmup=2, repeats=5, graphs=True), torch.bfloat16
    else:
        timer, dtype, model = Timer(device, warmup=1, repeats=3), torch.float32, scaled_model(model, 8)
    return whole_steps(model, device=device, dtype=dtype, timer=timer, progress=log)


def _host_transfers(device: str, log: Callable[[str], None]) -> pd.DataFrame:
    return host_transfers(get_model(MODEL), device=device, timer=default_timer(device), progress=log)


def _stage(name: str, deadline: float, log: Callable[[str], None], errors: dict[str, str], fn: Callable[[], object]):
    """``fn()``, or None with the reason in ``errors`` if it raises or its share of the budget is gone."""
    if time.monotonic() > deadline:
        errors[name] = "skipped: time budget spent"
        log(f"{name}: skipped, time budget spent")
        return None
    try:
        return fn()
    except Exception as exc:  # the next stage still runs; the log has the whole traceback
        log(f"{name} failed:\n{traceback.format_exc()}")
        errors[name] = f"{type(exc).__name__}: {exc}"[:300]
        return None


CALIBRATION_FALLBACKS = ({}, {"cuda_graphs": False}, {"cuda_graphs": False, "decode_kernel": "reference"})
"""What the calibration tries, in order, while each try fails: CUDA graphs with the default kernels, then
eager launches, then eager with the reference decode kernel; a later try still says something."""


def _calibrate(device: str, log: Callable[[str], None], deadline: float) -> CalibrationRun:
    for i, options in enumerate(CALIBRATION_FALLBACKS):
        try:
            return calibrate(MODEL, device=device, quick=True, progress=log, deadline=deadline, **options)
        except TimeoutError:
            raise
        except Exception:
            if i + 1 == len(CALIBRATION_FALLBACKS):
                raise
            log(f"calibration failed:\n{traceback.format_exc()}retrying with {CALIBRATION_FALLBACKS[i + 1]}")
    raise AssertionError("unreachable")


def _bandwidth(device: str, compile_flex: bool, copy_bytes_s: float | None, deadline: float) -> pd.DataFrame:
    """The bandwidth point; the device copy is measured here unless ``copy_bytes_s`` is given."""
    model = get_model(MODEL)
    if device == "cuda":
        timer = Timer(device, warmup=3, repeats=10)
        point = dict(batch_size=64, context_len=4096, block_size=16)
    else:  # a point a CPU does in well under a second per call, on the scaled-down model
        timer = Timer(device, warmup=1, repeats=3)
        model, point = scaled_model(model, 8), dict(batch_size=4, context_len=256, block_size=16)
    if copy_bytes_s is None:
        copy_bytes_s = copy_bandwidth(device, 1024**3 if device == "cuda" else 64 * 1024**2, timer)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    return decode_bandwidth(model, device=device, dtype=dtype, timer=timer, copy_bytes_s=copy_bytes_s,
                            compile_flex=compile_flex, deadline=deadline, **point)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_validation.run_all", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None)
    parser.add_argument("--quick", action="store_true", help="fewer correctness cases (CI)")
    parser.add_argument("--compile-flex", action=argparse.BooleanOptionalAction, default=None,
                        help="check and time compiled FlexAttention (default: on with cuda)")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help=f"wall-clock budget in seconds (default {DEFAULT_BUDGET_S:g}); a watchdog ends the "
                             f"run {WATCHDOG_GRACE_S:g} s past it")
    args = parser.parse_args(argv)
    device = device_of(parser, args.device)
    if not 0 < args.budget_s <= MAX_BUDGET_S:  # NaN and inf too: the watchdog's timer took neither
        parser.error(f"--budget-s must be positive and at most {MAX_BUDGET_S:g} s (a week), got {args.budget_s:g}")
    compile_flex = device == "cuda" if args.compile_flex is None else args.compile_flex
    args.out_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    end = start + args.budget_s
    reserve_all, reserve_bandwidth, reserve_whole, reserve_transfers = RESERVE_S[device]
    faulthandler.dump_traceback_later(args.budget_s + WATCHDOG_GRACE_S, exit=True, file=sys.__stderr__)
    try:
        log = _log(time.perf_counter())
        log(f"device {device} ({torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}), torch "
            f"{torch.__version__}, budget {args.budget_s:g} s")
        errors: dict[str, str] = {}
        block_sizes = (16,) if args.quick else (8, 16, 32)
        checks = _stage("checks", end, log, errors, lambda: run_checks(
            device, block_sizes=block_sizes, compile_flex=compile_flex, progress=log,
            deadline=max(start, end - reserve_all)))
        if checks is not None:
            checks.to_csv(args.out_dir / "checks.csv", index=False)
        run = _stage("calibration", end - reserve_bandwidth, log, errors,
                     lambda: _calibrate(device, log, end - reserve_bandwidth))
        if run is not None:
            write_run(run, args.out_dir / f"{MODEL}.json")
        # the calibration's copy on a GPU; on CPU it was single-threaded, while the kernels here are not
        copy = run.copy_bandwidth if run is not None and device == "cuda" else None
        bandwidth = _stage("bandwidth", end - reserve_whole, log, errors,
                           lambda: _bandwidth(device, compile_flex, copy, end - reserve_whole))
        if bandwidth is not None:
            bandwidth.to_csv(args.out_dir / "bandwidth.csv", index=False)
        whole = _stage("whole steps", end - reserve_transfers, log, errors, lambda: _whole_steps(device, log))
        if whole is not None:
            whole.to_csv(args.out_dir / "whole_steps.csv", index=False, float_format="%.6g")
        transfers = _stage("host transfers", end, log, errors, lambda: _host_transfers(device, log))
        if transfers is not None:
            transfers.to_csv(args.out_dir / "host_transfers.csv", index=False, float_format="%.6g")
        log(f"wrote {', '.join(sorted(p.name for p in args.out_dir.iterdir()))} to {args.out_dir}")
        unchecked = triton_unchecked(device)
        if unchecked and device == "cuda":
            errors["triton"] = unchecked
            unchecked = None
        print(summary(checks, run, bandwidth, errors, whole, transfers, unchecked), flush=True)
        return 0 if complete(checks, bandwidth, errors) else 1
    finally:
        faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    sys.exit(main())
