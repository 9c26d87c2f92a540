"""The step-cost model with coefficients from a ``kvsim-calibration`` table: reading the table, checking it
field by field, and building the roofline model from it (re-exported by ``cost_model.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

from allocators.catalog import GpuSpec, ModelSpec
from sim.kernel.roofline_cost import DEFAULT_PAGED_KERNEL_OVERHEAD, StepCostModel

OPTIONAL_COEFFICIENTS = {"seq_overhead_s": 0.0, "prefill_token_s": 0.0, "mixed_overlap": 1.0,
                         "allreduce_latency_s": 0.0, "allreduce_bus_gb_s": 0.0}
"""Terms a calibration table may leave out (version-1 tables, kernel calibrations that cannot see them):
absent, the step is a plain roofline. The all-reduce terms are for tensor-parallel runs, from the user's own
measurements (nccl-tests' ``all_reduce_perf``: its small-message time and its bus bandwidth); absent, the
summary says communication is left out (``clock_omits``)."""


def coefficients_from_table(data: object, path: str | Path) -> dict:
    """The `StepCostModel` keyword arguments a ``kvsim-calibration`` table gives, checked field by field
    (one-line ValueError naming the file and the field)."""
    if not isinstance(data, dict) or data.get("format") != "kvsim-calibration":
        raise ValueError(f"{path}: not a kvsim calibration file (field 'format' must be 'kvsim-calibration')")
    coeffs = data.get("coefficients")
    if not isinstance(coeffs, dict):
        raise ValueError(f"{path}: field 'coefficients' is missing or not an object")
    values = {}
    for key in ("bandwidth_frac", "flops_frac", "step_overhead_s", *OPTIONAL_COEFFICIENTS):
        value = coeffs.get(key, OPTIONAL_COEFFICIENTS.get(key))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{path}: field 'coefficients.{key}' must be a number")
        values[key] = float(value)
    table = coeffs.get("paged_kernel_overhead", DEFAULT_PAGED_KERNEL_OVERHEAD)
    try:
        values["paged_kernel_overhead"] = {int(k): float(v) for k, v in table.items()}
    except (AttributeError, ValueError, TypeError):
        raise ValueError(f"{path}: field 'coefficients.paged_kernel_overhead' must map block sizes to "
                         "numbers") from None
    return values


def read_calibration(path: str | Path) -> dict:
    """A calibration table's JSON object, or a one-line ValueError naming the file."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read calibration file: {exc}") from None


class CalibratedStepCost(StepCostModel):
    """The step-cost model with coefficients from a calibration table: fitted on a real GPU by ``kvsim
    calibrate``, or to a measured run by ``kvsim calibrate --from-trace`` (``docs/validation.md``)."""

    @classmethod
    def from_file(cls, path: str | Path, model: ModelSpec, gpu: GpuSpec, **kwargs) -> CalibratedStepCost:
        path = Path(path)
        data = read_calibration(path)
        values = coefficients_from_table(data, path)
        if data.get("model") not in (None, model.name) or data.get("gpu") not in (None, gpu.name):
            raise ValueError(f"{path}: calibrated for {data.get('model')} on {data.get('gpu')}, not "
                             f"{model.name} on {gpu.name}")
        kwargs.setdefault("profile", str(path))
        return cls(model=model, gpu=gpu, source=f"calibrated ({path.name})", **values, **kwargs)
