"""``--kv-cache-dtype`` on the commands that size KV memory: run and compare take it (and a sweep takes it as
an axis, being a SimConfig field); fp8 doubles the token slots of the same memory and makes decode steps read
fewer bytes; a bad value is a one-line error."""


import pytest
from click.testing import CliRunner

from allocators.catalog import get_gpu, get_model
from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import StepCostModel

FAST = ["--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--kv-gib", "2", "--num-requests", "20",
        "--step-time", "0.01"]


def invoke(*args):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("command", ["run", "compare"])
def test_fp8_doubles_the_slots_a_run_announces(command):
    slots = {}
    for dtype in ("auto", "fp8"):
        result = invoke(command, *FAST, "--kv-cache-dtype", dtype, "--json")
        assert result.exit_code == 0, result.output
        slots[dtype] = result.stderr.split(" token slots")[0].rsplit("= ", 1)[1]
    assert slots == {"auto": "16,384", "fp8": "32,768"}  # 2 GiB / 128 KiB and / 64 KiB


def test_bad_value_is_a_one_line_error():
    result = invoke("run", *FAST, "--kv-cache-dtype", "fp4")
    assert result.exit_code == 2
    assert [line for line in result.output.splitlines() if line.startswith("Error:")][0].startswith(
        "Error: --kv-cache-dtype must be one of auto, fp16, bf16, fp8")
    with pytest.raises(ValueError, match="--kv-cache-dtype"):
        SimConfig(kv_cache_dtype="int8")


def test_decode_reads_fewer_kv_bytes_with_fp8():
    """The roofline's KV read term halves: a memory-bound decode step over a long context gets cheaper."""
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100-80gb")
    bf16 = StepCostModel(model, gpu).step_time(0, 64, 64 * 8192)
    fp8 = StepCostModel(model.with_kv_cache_dtype("fp8"), gpu).step_time(0, 64, 64 * 8192)
    weights = StepCostModel(model, gpu).step_time(0, 64, 0)
    assert fp8 < bf16 and (bf16 - weights) == pytest.approx(2 * (fp8 - weights), rel=0.01)


def test_sweep_takes_the_dtype_as_an_axis(tmp_path):
    import pandas as pd

    out = tmp_path / "s.csv"
    result = invoke("sweep", *FAST, "--kv-cache-dtype", "auto,fp8", "--workers", "1", "--quiet", "--out", str(out))
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert sorted(frame["kv_cache_dtype"]) == ["auto", "fp8"]
