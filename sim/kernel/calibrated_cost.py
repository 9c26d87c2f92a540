"""The step-cost model with coefficients from a ``kvsim-calibration`` table: reading the table, checking it
field by field, and building the roofline model from it (re-exported by ``cost_model.py``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from allocators.catalog import GpuSpec, ModelSpec
from sim.kernel.roofline_cost import DEFAULT_PAGED_KERNEL_OVERHEAD, StepCostModel

OPTIONAL_COEFFICIENTS = {"seq_overhead_s": 0.0, "prefill_token_s": 0.0, "mixed_overlap": 1.0,
                         "allreduce_latency_s": 0.0, "allreduce_bus_gb_s": 0.0}
"""Terms a calibration table may leave out (version-1 tables, kernel calibrations that cannot see them):
absent, the step is a plain roofline. The all-reduce terms are for tensor-parallel runs, from the user's own
measurements (nccl-tests' ``all_reduce_perf``: its small-message time and its bus bandwidth); absent, the
summary says communication is left out (``clock_omits``)."""


def _range_error(key: str, value: float) -> str | None:
    """What coefficient ``key`` must be when ``value`` is out of its range (nan and inf included), else None:
    `StepCostModel` checks the same ranges, but its message cannot say which file or value is wrong."""
    if key in ("bandwidth_frac", "flops_frac"):
        return None if 0 < value <= 1 else "in (0, 1]"
    if key == "mixed_overlap":
        return None if 0 <= value <= 1 else "in [0, 1]"
    return None if 0 <= value < math.inf else "a finite number >= 0"


def _paged_kernel_overhead(table: object, path: str | Path) -> dict[int, float]:
    """The table's block size -> factor map, checked entry by entry: `kernel_overhead` reads its smallest
    entry (an empty map is an IndexError there) and multiplies KV reads by the factor, so a factor <= 0, nan
    or inf would fail without the file's name, or run without a word."""
    field = "coefficients.paged_kernel_overhead"
    if not isinstance(table, dict) or not table:
        raise ValueError(f"{path}: field '{field}' must map block sizes to factors (e.g. {{\"16\": 1.0}}), "
                         f"got {table!r}")
    result = {}
    for key, value in table.items():
        try:
            size = int(key)
        except (TypeError, ValueError):
            size = 0
        if size <= 0:
            raise ValueError(f"{path}: field '{field}': block size {key!r} is not a positive integer")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ValueError(f"{path}: field '{field}.{key}' must be a positive finite factor, got {value!r}")
        result[size] = float(value)
    return result


def coefficients_from_table(data: object, path: str | Path) -> dict:
    """The `StepCostModel` keyword arguments a ``kvsim-calibration`` table gives, checked field by field
    (one-line ValueError naming the file, the field and the value) here, where the file is known. A key
    the model does not know (a typo such as ``bandwith_frac``) is an error too: it would leave its
    coefficient at the default without a word."""
    if not isinstance(data, dict) or data.get("format") != "kvsim-calibration":
        raise ValueError(f"{path}: not a kvsim calibration file (field 'format' must be 'kvsim-calibration')")
    coeffs = data.get("coefficients")
    if not isinstance(coeffs, dict):
        raise ValueError(f"{path}: field 'coefficients' is missing or not an object")
    numbers = ("bandwidth_frac", "flops_frac", "step_overhead_s", *OPTIONAL_COEFFICIENTS)
    unknown = sorted(set(coeffs) - {*numbers, "paged_kernel_overhead"})
    if unknown:
        raise ValueError(f"{path}: unknown field(s) {', '.join(f'coefficients.{k}' for k in unknown)}; known: "
                         f"{', '.join(numbers)}, paged_kernel_overhead")
    values = {}
    for key in numbers:
        if key not in coeffs and key not in OPTIONAL_COEFFICIENTS:
            raise ValueError(f"{path}: field 'coefficients.{key}' is missing (it must be a number)")
        value = coeffs.get(key, OPTIONAL_COEFFICIENTS.get(key))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{path}: field 'coefficients.{key}' must be a number, got {value!r}")
        wanted = _range_error(key, value)
        if wanted:
            raise ValueError(f"{path}: field 'coefficients.{key}' must be {wanted}, got {value!r}")
        values[key] = float(value)
    given = [key for key in ("allreduce_latency_s", "allreduce_bus_gb_s") if key in coeffs]
    if len(given) == 1:  # the other term would be 0: half the communication charged, and no clock_omits to say so
        other = ({"allreduce_latency_s", "allreduce_bus_gb_s"} - set(given)).pop()
        raise ValueError(f"{path}: field 'coefficients.{given[0]}' needs 'coefficients.{other}' beside it "
                         "(an all-reduce costs a latency and its bytes over a bus bandwidth; give both or neither)")
    values["paged_kernel_overhead"] = _paged_kernel_overhead(
        coeffs.get("paged_kernel_overhead", DEFAULT_PAGED_KERNEL_OVERHEAD), path)
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
