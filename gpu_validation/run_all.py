"""Everything a GPU session should run, in one call: ``python -m gpu_validation.run_all DIR``.

1. Correctness: every kernel (reference, FlexAttention, the Triton kernel with and without split-K) on
   random and allocator-driven scenarios, fp32 and bf16, block sizes 8/16/32, decode and chunked prefill.
2. A quick calibration of Llama-3-8B (`calibration.calibrate`), written as ``DIR/llama-3-8b.json`` with
   its measurements in ``DIR/llama-3-8b.csv``.
3. Decode bandwidth at 64 sequences x 4,096 tokens for each kernel against a measured device copy.

It prints a short table last and exits 1 if any check failed. Without a GPU (or with ``--device cpu``) it
runs the same steps on CPU at sizes a CPU finishes quickly (scaled-down model, smaller bandwidth point),
FlexAttention eager unless ``--compile-flex``; ``--quick`` trims the correctness grid further (for CI).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

import torch

from allocators.catalog import get_model
from gpu_validation.bandwidth import decode_bandwidth
from gpu_validation.calibration import calibrate, write_run
from gpu_validation.checks import run_checks
from gpu_validation.features import scaled_model
from gpu_validation.timing import Timer, copy_bandwidth

MODEL = "llama-3-8b"


def _log(start: float):
    return lambda line: print(f"[{time.perf_counter() - start:6.1f}s] {line}", flush=True)


def summary(checks, run, bandwidth) -> str:
    """The short table printed last."""
    lines = ["", "== kvsim GPU validation summary =="]
    verdicts = checks.groupby(["kernel", "dtype"]).agg(cases=("passed", "size"), passed=("passed", "sum"),
                                                        worst=("rel_error", "max"))
    lines.append("correctness (relative error vs dense float64):")
    for (kernel, dtype), r in verdicts.iterrows():
        lines.append(f"  {kernel:14s} {dtype:9s} {int(r.passed):3d}/{int(r.cases):<3d} passed  worst {r.worst:.2e}")
    t, c, f = run.table, run.table["coefficients"], run.table["fit"]
    lines.append(f"calibration {t['model']} on {t['gpu']} ({t['device']}, {t['dtype']}, timed as {t['timed_model']}):")
    lines.append(f"  bandwidth_frac {c['bandwidth_frac']}  flops_frac {c['flops_frac']}  "
                 f"step_overhead_s {c['step_overhead_s']}  paged_kernel_overhead {c['paged_kernel_overhead']}")
    lines.append(f"  fit {f['points']} points  rmse {f['rmse_s'] * 1e3:.3g} ms  mape {f['mape']:.1%}")
    first = bandwidth.iloc[0]
    lines.append(f"decode attention, one layer, {first.batch_size} x {first.context_len} tokens, block "
                 f"{first.block_size}, {first['dtype']} (device copy {first.copy_gb_s:.0f} GB/s):")
    flex = bandwidth[bandwidth.kernel.str.startswith("flex")]
    for r in bandwidth.itertuples():
        if r.error:
            lines.append(f"  {r.kernel:14s} failed: {r.error}")
            continue
        vs_flex = f"  {flex.seconds.iloc[0] / r.seconds:.2f}x flex" if len(flex) else ""
        lines.append(f"  {r.kernel:14s} {r.seconds * 1e6:9.1f} us  {r.bandwidth_gb_s:7.1f} GB/s  "
                     f"{r.share_of_copy:6.1%} of copy{vs_flex}")
    failed = checks[~checks.passed]
    lines.append(f"checks: {len(checks) - len(failed)}/{len(checks)} passed")
    for r in failed.itertuples():
        lines.append(f"  FAILED {r.kernel} {r.scenario} {r.dtype}: error {r.rel_error:.2e} {r.note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_validation.run_all", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None)
    parser.add_argument("--quick", action="store_true", help="fewer correctness cases (CI)")
    parser.add_argument("--compile-flex", action=argparse.BooleanOptionalAction, default=None,
                        help="check and time compiled FlexAttention (default: on with cuda)")
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    compile_flex = device == "cuda" if args.compile_flex is None else args.compile_flex
    args.out_dir.mkdir(parents=True, exist_ok=True)
    log = _log(time.perf_counter())
    log(f"device {device} ({torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}), torch {torch.__version__}")

    block_sizes = (16,) if args.quick else (8, 16, 32)
    checks = run_checks(device, block_sizes=block_sizes, compile_flex=compile_flex, progress=log)
    checks.to_csv(args.out_dir / "checks.csv", index=False)

    try:
        run = calibrate(MODEL, device=device, quick=True, progress=log)
    except Exception:  # keep going: a calibration on the reference kernel still says something
        log("calibration failed:\n" + traceback.format_exc() + "retrying with the reference decode kernel")
        run = calibrate(MODEL, device=device, quick=True, decode_kernel="reference", progress=log)
    write_run(run, args.out_dir / f"{MODEL}.json")

    model = get_model(MODEL)
    timer = Timer(device, warmup=3, repeats=10) if device == "cuda" else Timer(device, warmup=1, repeats=3)
    if device == "cuda":
        point = dict(batch_size=64, context_len=4096, block_size=16)
        copy = run.copy_bandwidth
    else:  # a point a CPU does in well under a second per call, on the scaled-down model
        model, point = scaled_model(model, 8), dict(batch_size=4, context_len=256, block_size=16)
        copy = copy_bandwidth(device, 64 * 1024**2, timer)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    bandwidth = decode_bandwidth(model, device=device, dtype=dtype, timer=timer, copy_bytes_s=copy,
                                 compile_flex=compile_flex, **point)
    bandwidth.to_csv(args.out_dir / "bandwidth.csv", index=False)
    log(f"wrote {', '.join(sorted(p.name for p in args.out_dir.iterdir()))} to {args.out_dir}")
    print(summary(checks, run, bandwidth), flush=True)
    return 0 if bool(checks.passed.all()) and not bandwidth["error"].astype(bool).any() else 1


if __name__ == "__main__":
    sys.exit(main())
