"""One calibration run: pick the device, measure its peaks, time the grid, fit, label the result.

What the fractions are fractions of: on a GPU, the catalog's data-sheet peaks (``GpuSpec``), the same
numbers the simulator multiplies them by; the measured copy bandwidth is recorded beside them. On CPU there
is no catalog entry, so the peaks are measured here (the best of a few square matrix products, a large
copy), single-threaded like the harness; the table is labelled ``"gpu": "cpu"``, ``"device": "cpu"`` and
lives under ``sim/data/calibration/cpu/``, so CPU numbers can never pass for GPU ones.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from allocators.catalog import GPUS, GpuSpec, get_gpu, get_model
from gpu_validation.features import scaled_model
from gpu_validation.fit import FitResult, calibration_table, fit_step_costs, write_table
from gpu_validation.harness import GRIDS, Grid, run_harness
from gpu_validation.timing import Timer, copy_bandwidth, matmul_flops, single_threaded_on_cpu


@dataclass
class CalibrationRun:
    table: dict
    measurements: pd.DataFrame
    fit: FitResult
    copy_bandwidth: float


def match_gpu(device_name: str) -> str | None:
    """The catalog GPU whose name's parts all appear in a CUDA device name ("NVIDIA H100 80GB HBM3" ->
    "h100-80gb"), or None unless exactly one matches."""
    words = set(re.split(r"[^a-z0-9]+", device_name.lower()))
    hits = [name for name in GPUS if set(name.split("-")) <= words]
    return hits[0] if len(hits) == 1 else None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def resolve_device(device: str | None, gpu: str | None) -> tuple[torch.device, str, GpuSpec | None]:
    """(device, label for the table's ``gpu`` field, catalog spec or None on CPU). ValueError if they clash."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cuda", "cpu"):
        raise ValueError(f"--device must be cuda or cpu, got {device!r}")
    if device == "cpu":
        if gpu not in (None, "cpu"):
            raise ValueError(f"--gpu {gpu} names a GPU but --device is cpu; CPU calibrations are labelled 'cpu' (drop --gpu)")
        return torch.device("cpu"), "cpu", None
    if not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is visible to torch (use --device cpu)")
    if gpu is None:
        gpu = match_gpu(torch.cuda.get_device_name())
        if gpu is None:
            raise ValueError(f"cannot tell which catalog GPU {torch.cuda.get_device_name()!r} is; pass --gpu "
                             f"(one of {', '.join(GPUS)})")
    spec = get_gpu(gpu)
    return torch.device("cuda"), spec.name, spec


def measure_peaks(device: torch.device, dtype: torch.dtype, spec: GpuSpec | None, quick: bool
                  ) -> tuple[float, float, float, str]:
    """(peak FLOP/s, peak bytes/s, measured copy bytes/s, where the peaks come from)."""
    timer = Timer(device, warmup=1 if quick else 3, repeats=3 if quick else 10)
    if spec is not None:
        copy = copy_bandwidth(device, 1024**3, timer)
        return spec.bf16_tflops * 1e12, spec.hbm_bandwidth_gb_s * 1e9, copy, f"catalog: {spec.source}"
    with single_threaded_on_cpu(device):
        copy = copy_bandwidth(device, (64 if quick else 256) * 1024**2, timer)
        flops = max(matmul_flops(device, dtype, n, timer) for n in (256, 512, 1024))
    return flops, copy, copy, "measured on this CPU, one thread (square matmul; device copy)"


def calibrate(model: str, *, device: str | None = None, gpu: str | None = None, quick: bool = False,
              grid: Grid | None = None, seed: int = 0, decode_kernel: str | None = None,
              cuda_graphs: bool = True, progress: Callable[[str], None] | None = None,
              deadline: float | None = None) -> CalibrationRun:
    """Run the harness for ``model`` and fit it. Raises ValueError/KeyError with a one-line reason, and
    TimeoutError if the harness crosses ``deadline`` (`harness.run_harness`).

    On a GPU the parts are timed as CUDA graph replays unless ``cuda_graphs`` is False: the engines whose
    clock the table sets (vLLM) replay captured graphs, so eager launch gaps are not theirs to pay."""
    spec = get_model(model)
    dev, gpu_label, gpu_spec = resolve_device(device, gpu)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    grid = grid or GRIDS[(dev.type, quick)]
    timed = scaled_model(spec, grid.model_scale)
    peak_flops, peak_bw, copy_bw, source = measure_peaks(dev, dtype, gpu_spec, quick)
    frame = run_harness(timed, grid, device=dev, dtype=dtype, seed=seed, decode_kernel=decode_kernel,
                        cuda_graphs=cuda_graphs, progress=progress, deadline=deadline)
    fit = fit_step_costs(frame, peak_flops, peak_bw)
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"{cpu_name()} (CPU, 1 thread)"
    table = calibration_table(fit, gpu=gpu_label, model=spec.name, device=dev.type, device_name=device_name,
                              dtype=str(dtype).removeprefix("torch."), peak_flops=peak_flops,
                              peak_bandwidth=peak_bw, peaks_source=source, timed_model=timed.name,
                              timing=str(frame["timing"].iloc[0]))
    frame["modelled_step_s"] = fit.predicted
    frame["compute_bound"] = fit.compute_bound
    return CalibrationRun(table, frame, fit, copy_bw)


def write_run(run: CalibrationRun, path: str | Path) -> tuple[Path, Path]:
    """The table at ``path`` and the measurements beside it (same name, ``.csv``)."""
    path = Path(path)
    write_table(run.table, path)
    csv = path.with_suffix(".csv")
    run.measurements.to_csv(csv, index=False, float_format="%.6g")
    return path, csv
