"""``--kv-cache-dtype`` on the commands that size KV memory: run and compare take it (and a sweep takes it as
an axis, being a SimConfig field); fp8 doubles the token slots of the same memory and makes decode steps read
fewer bytes; a bad value is a one-line error."""


import json

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


PLACED_ON_H100 = {"int8_per_token_head": 887_462, "fp8_per_token_head": 887_462, "int4_per_token_head": 1_722_721,
                  "nvfp4": 1_627_014, "turboquant_k8v4": 994_862, "turboquant_4bit_nc": 1_292_635,
                  "turboquant_k3v4_nc": 1_400_837, "turboquant_3bit_nc": 1_528_809}
"""Llama-3-8B's token slots on one H100 at vLLM 0.33's packed formats (bf16: 457,597; fp8: 915,195)."""


@pytest.mark.parametrize(("dtype", "tokens"), sorted(PLACED_ON_H100.items()))
def test_capacity_takes_vllm_packed_formats(dtype, tokens):
    result = invoke("capacity", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--kv-cache-dtype", dtype, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kv_capacity_tokens"] == tokens


def test_help_lists_every_format_vllm_accepts():
    from allocators.kv_formats import PACKED_FORMATS

    text = " ".join(invoke("capacity", "--help").output.split())
    for name in ("fp8_e4m3", "fp8_e5m2") + PACKED_FORMATS:
        assert name in text, name


@pytest.mark.parametrize(("args", "error"), [
    (["--model", "llama-3-8b", "--gpu", "h100-80gb", "--kv-cache-dtype", "nvfp4_4over6"],
     "Error: --kv-cache-dtype nvfp4_4over6 on h100-80gb: vLLM stores nvfp4_4over6 on Blackwell"),
    (["--model", "deepseek-v3", "--gpu", "h200", "--tensor-parallel", "8", "--kv-cache-dtype", "fp8_ds_mla"],
     "Error: model 'deepseek-v3': --kv-cache-dtype fp8_ds_mla: fp8_ds_mla is FlashMLA's sparse MLA record"),
    (["--model", "llama-3-8b", "--gpu", "h100-80gb", "--kv-cache-dtype", "octave_k3v4"],
     "Error: model 'llama-3-8b': --kv-cache-dtype octave_k3v4: vLLM stores octave_k3v4 with its ROCM_OCTAVE"),
])
def test_a_format_vllm_does_not_store_there_is_a_one_line_error(args, error):
    result = invoke("capacity", *args)
    assert result.exit_code == 2
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert line.startswith(error)
