"""Bad values in a calibration table (``--calibration FILE`` or ``--cost-profile FILE``): out-of-range, nan or
inf coefficients, an empty or bad ``paged_kernel_overhead``, a misspelled coefficient and bad measured CPU
peaks. Each is one line naming the file, the field and the value, checked when the table is read."""

import json

import pytest
from click.testing import CliRunner

from allocators.catalog import get_gpu, get_model
from sim.cli import main
from sim.kernel.calibration_store import peaks_of
from sim.kernel.cost_model import CalibratedStepCost
from sim.kernel.cost_profiles import make_step_cost

MODEL, GPU = get_model("llama-3-8b"), get_gpu("a100-80gb")
COEFFICIENTS = {"bandwidth_frac": 0.8276, "flops_frac": 0.6537, "step_overhead_s": 0.0018, "seq_overhead_s": 7.339e-05,
                "prefill_token_s": 0.0, "mixed_overlap": 0.75, "paged_kernel_overhead": {"16": 1.0}}
TABLE = {"format": "kvsim-calibration", "version": 2, "gpu": "a100-80gb", "model": "llama-3-8b", "device": "trace",
         "created": "2026-12-03", "coefficients": COEFFICIENTS}
NAN, INF = float("nan"), float("inf")
PKO = "coefficients.paged_kernel_overhead"

BAD = [
    ({"bandwidth_frac": -0.5}, "field 'coefficients.bandwidth_frac' must be in (0, 1], got -0.5"),
    ({"bandwidth_frac": NAN}, "field 'coefficients.bandwidth_frac' must be in (0, 1], got nan"),
    ({"bandwidth_frac": 50.0}, "field 'coefficients.bandwidth_frac' must be in (0, 1], got 50.0"),
    ({"bandwidth_frac": 0}, "field 'coefficients.bandwidth_frac' must be in (0, 1], got 0"),
    ({"flops_frac": INF}, "field 'coefficients.flops_frac' must be in (0, 1], got inf"),
    ({"mixed_overlap": -2}, "field 'coefficients.mixed_overlap' must be in [0, 1], got -2"),
    ({"step_overhead_s": -1.0}, "field 'coefficients.step_overhead_s' must be a finite number >= 0, got -1.0"),
    ({"seq_overhead_s": INF}, "field 'coefficients.seq_overhead_s' must be a finite number >= 0, got inf"),
    ({"allreduce_bus_gb_s": NAN}, "field 'coefficients.allreduce_bus_gb_s' must be a finite number >= 0, got nan"),
    ({"flops_frac": "0.5"}, "field 'coefficients.flops_frac' must be a number, got '0.5'"),
    ({"paged_kernel_overhead": {}},
     f"field '{PKO}' must map block sizes to factors (e.g. {{\"16\": 1.0}}), got {{}}"),
    ({"paged_kernel_overhead": [1.0]}, f"field '{PKO}' must map block sizes to factors (e.g. {{\"16\": 1.0}}), "
                                       "got [1.0]"),
    ({"paged_kernel_overhead": {"16": NAN}}, f"field '{PKO}.16' must be a positive finite factor, got nan"),
    ({"paged_kernel_overhead": {"16": -3}}, f"field '{PKO}.16' must be a positive finite factor, got -3"),
    ({"paged_kernel_overhead": {"16": 0}}, f"field '{PKO}.16' must be a positive finite factor, got 0"),
    ({"paged_kernel_overhead": {"16": "1"}}, f"field '{PKO}.16' must be a positive finite factor, got '1'"),
    ({"paged_kernel_overhead": {"abc": 1}}, f"field '{PKO}': block size 'abc' is not a positive integer"),
    ({"paged_kernel_overhead": {"-16": 1}}, f"field '{PKO}': block size '-16' is not a positive integer"),
    ({"allreduce_latency_s": 3e-5}, "field 'coefficients.allreduce_latency_s' needs 'coefficients.allreduce_bus_gb_s' "
                                    "beside it (an all-reduce costs a latency and its bytes over a bus bandwidth; "
                                    "give both or neither)"),
    ({"allreduce_bus_gb_s": 90.0}, "field 'coefficients.allreduce_bus_gb_s' needs 'coefficients.allreduce_latency_s' "
                                   "beside it (an all-reduce costs a latency and its bytes over a bus bandwidth; "
                                   "give both or neither)"),
    ({"bandwith_frac": 0.5}, "unknown field(s) coefficients.bandwith_frac; known: bandwidth_frac, flops_frac, "
                             "step_overhead_s, seq_overhead_s, prefill_token_s, mixed_overlap, allreduce_latency_s, "
                             "allreduce_bus_gb_s, paged_kernel_overhead"),
]


def write(tmp_path, name="cal.json", **coefficients):
    path = tmp_path / name
    path.write_text(json.dumps(dict(TABLE, coefficients=dict(COEFFICIENTS, **coefficients))))
    return path


@pytest.mark.parametrize(("coefficients", "message"), BAD)
def test_a_bad_coefficient_is_one_line_naming_file_field_and_value(tmp_path, coefficients, message):
    path = write(tmp_path, **coefficients)
    for load in (lambda: CalibratedStepCost.from_file(path, MODEL, GPU),  # --calibration
                 lambda: make_step_cost(str(path), MODEL, GPU)):  # --cost-profile
        with pytest.raises(ValueError) as info:
            load()
        assert str(info.value) == f"{path}: {message}"


def test_a_missing_coefficient_says_so(tmp_path):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(dict(TABLE, coefficients={k: v for k, v in COEFFICIENTS.items()
                                                         if k != "bandwidth_frac"})))
    with pytest.raises(ValueError) as info:
        CalibratedStepCost.from_file(path, MODEL, GPU)
    assert str(info.value) == f"{path}: field 'coefficients.bandwidth_frac' is missing (it must be a number)"


@pytest.mark.parametrize("option", ["--calibration", "--cost-profile"])
@pytest.mark.parametrize(("coefficients", "message"), [BAD[10], BAD[12], BAD[13], BAD[0], BAD[5], BAD[-1]])
def test_the_command_line_prints_that_one_line(tmp_path, option, coefficients, message):
    """An empty ``paged_kernel_overhead`` was an IndexError traceback, a nan factor an unnamed error, a
    negative one ran silently, and out-of-range fractions named neither the file nor the value. The table is
    checked with the configuration, so the error is all the run prints (no workload line before it)."""
    trace = tmp_path / "ok.csv"
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,100,50\n1,200,50\n")
    path = write(tmp_path, **coefficients)
    result = CliRunner().invoke(main, ["run", str(trace), "--model", "llama-3-8b", "--gpu", "a100-80gb",
                                       option, str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.output.splitlines() == [f"Error: {path}: {message}"]


def test_good_tables_still_load(tmp_path):
    """Factors below 1 (a fitted kernel can read KV faster than the roofline's bandwidth fraction) and large
    ones (a CPU's) are in range, as are the fractions' upper bound 1 and the overheads' 0."""
    path = write(tmp_path, bandwidth_frac=1, mixed_overlap=0, step_overhead_s=0,
                 paged_kernel_overhead={"8": 9.2, "16": 0.85})
    cost = CalibratedStepCost.from_file(path, MODEL, GPU)
    assert cost.paged_kernel_overhead == {8: 9.2, 16: 0.85} and cost.bandwidth_frac == 1.0


@pytest.mark.parametrize(("peaks", "message"), [
    ({"flops_s": -1.0, "bandwidth_bytes_s": 2.2e10}, "field 'peaks.flops_s' must be a positive finite number "
                                                     "(the peak this CPU calibration measured), got -1.0"),
    ({"flops_s": 8.6e10, "bandwidth_bytes_s": NAN}, "field 'peaks.bandwidth_bytes_s' must be a positive finite "
                                                    "number (the peak this CPU calibration measured), got nan"),
    ({"flops_s": INF, "bandwidth_bytes_s": 2.2e10}, "field 'peaks.flops_s' must be a positive finite number "
                                                    "(the peak this CPU calibration measured), got inf"),
    ({"flops_s": 8.6e10}, "field 'peaks.bandwidth_bytes_s' must be a positive finite number (the peak this CPU "
                          "calibration measured), got None"),
    ("fast", "field 'peaks' must be an object with flops_s and bandwidth_bytes_s, got 'fast'"),
])
def test_bad_measured_cpu_peaks_are_an_error_not_the_nominal_figures(tmp_path, peaks, message):
    """A CPU table's fractions are relative to the peaks it measured: bad ones used to fall back to the
    catalog's nominal ``cpu`` figures without a word."""
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(dict(TABLE, gpu="cpu", peaks=peaks)))
    with pytest.raises(ValueError) as info:
        peaks_of(path, get_gpu("cpu"))
    assert str(info.value) == f"{path}: {message}"


def test_cost_profile_file_brings_the_measured_cpu_peaks(tmp_path):
    """``--cost-profile FILE`` reads the table as ``--calibration FILE`` does, measured CPU peaks included."""
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(dict(TABLE, gpu="cpu", peaks={"flops_s": 1e11, "bandwidth_bytes_s": 3e10})))
    cost = make_step_cost(str(path), MODEL, get_gpu("cpu"))
    assert (cost.gpu.bf16_tflops, cost.gpu.hbm_bandwidth_gb_s) == (0.1, 30.0)
    table_without_peaks = write(tmp_path, "gpu.json")
    assert peaks_of(table_without_peaks, get_gpu("cpu")) == get_gpu("cpu")
