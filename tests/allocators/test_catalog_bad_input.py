"""Bad values in a ``--catalog`` file: nan and inf (which TOML spells, and ``1e400`` reads as), two spellings
of one entry, both memory fields, and other values a catalog used to take silently. Each is one line that
names the file, the entry, the field and the value, from the loader and from the command line."""

import pytest
from click.testing import CliRunner

from allocators.catalog import GIB, check_positive
from allocators.catalog_file import load_catalog_file
from sim.cli import main

MODEL = ("num_layers = 32\nhidden_size = 4096\nnum_heads = 32\nnum_kv_heads = 8\nhead_dim = 128\n"
         "num_params = 8.0e9\nmax_seq_len = 8192\nintermediate_size = 14336\nvocab_size = 128256\n")
GPU = "memory_gib = 80\nhbm_bandwidth_gb_s = 2000\nbf16_tflops = 300\npcie_gb_s = 25\n"

pytestmark = pytest.mark.usefixtures("restore_catalog")  # the command line registers catalog files process-wide


def gpu(**values: str) -> str:
    """``[gpus.mygpu]`` with ``values`` replacing (or added to) the good fields."""
    fields = dict(line.split(" = ") for line in GPU.splitlines()) | values
    return "[gpus.mygpu]\n" + "".join(f"{k} = {v}\n" for k, v in fields.items())


def model(**values: str) -> str:
    """``[models.mymodel]`` with ``values`` replacing (or added to) the good fields."""
    fields = dict(line.split(" = ") for line in MODEL.splitlines()) | values
    return "[models.mymodel]\n" + "".join(f"{k} = {v}\n" for k, v in fields.items())


BAD = [
    (gpu(memory_gib="nan"), "gpu 'mygpu': memory_gib must be a positive finite number, got nan"),
    (gpu(memory_gib="inf"), "gpu 'mygpu': memory_gib must be a positive finite number, got inf"),
    (gpu(memory_gib="-inf"), "gpu 'mygpu': memory_gib must be a positive finite number, got -inf"),
    (gpu(hbm_bandwidth_gb_s="nan"), "gpu 'mygpu': hbm_bandwidth_gb_s must be a positive finite number, got nan"),
    (gpu(bf16_tflops="inf"), "gpu 'mygpu': bf16_tflops must be a positive finite number, got inf"),
    (gpu(pcie_gb_s="1e400"), "gpu 'mygpu': pcie_gb_s must be a positive finite number, got inf"),
    (gpu(memory_bytes="5"), "[gpus.mygpu]: give one of memory_gib, memory_bytes, not both "
                            "(got memory_gib = 80, memory_bytes = 5)"),
    (gpu(source="5"), "gpu 'mygpu': source must be a string (where the numbers come from), got 5"),
    (gpu(compute_capability='"9.0"'), "gpu 'mygpu': compute_capability must be a positive number, got '9.0'"),
    (gpu(compute_capability="0"), "gpu 'mygpu': compute_capability must be a positive number, got 0"),
    (model(num_params="nan"), "model 'mymodel': num_params must be a positive finite number, got nan"),
    (model(num_params="inf"), "model 'mymodel': num_params must be a positive finite number, got inf"),
    (model(num_params="1e400"), "model 'mymodel': num_params must be a positive finite number, got inf"),
    (model(weights_gib="nan"), "model 'mymodel': weights_gib must be a positive finite number, got nan"),
    (model(active_params="inf"), "model 'mymodel': active_params must be a positive finite number, got inf"),
    (model(active_params="1e20"), "model 'mymodel': active_params (1e+20) must be at most num_params (8e+09): "
                                  "a token passes through some of the parameters, not more"),
    (model(max_seq_len="nan"), "model 'mymodel': max_seq_len must be a positive integer, got nan"),
    (model(source="5"), "model 'mymodel': source must be a string (where the numbers come from), got 5"),
    (model(kv_cache_dtype='"fp9"'), "model 'mymodel': kv_cache_dtype: --kv-cache-dtype must be one of auto, fp16, "
                                    "bf16, fp8 (or vLLM's float16, half, bfloat16, fp8_e4m3, fp8_e5m2, "
                                    "int8_per_token_head, fp8_per_token_head, int4_per_token_head, nvfp4, "
                                    "nvfp4_4over6, turboquant_k8v4, turboquant_4bit_nc, turboquant_k3v4_nc, "
                                    "turboquant_3bit_nc, fp8_ds_mla, nvfp4_ds_mla, fp8_inc, ultraquant_4bit, "
                                    "octave_k3v4, octave_k3v3, octave_k3v3_compact), got 'fp9'"),
    (model().replace("mymodel", "MyModel") + model(num_layers="1"),
     "[models.MyModel] and [models.mymodel] are the same entry (names are case-insensitive); keep one"),
    (gpu().replace("mygpu", "MyGPU") + gpu(), "[gpus.MyGPU] and [gpus.mygpu] are the same entry "
                                              "(names are case-insensitive); keep one"),
    # the shapes and types a catalog file gets wrong beside its values
    (model(num_layers="0"), "model 'mymodel': num_layers must be a positive integer, got 0"),
    (model(head_dim="16.5"), "model 'mymodel': head_dim must be a positive integer, got 16.5"),
    (model(num_params='"1e6"'), "model 'mymodel': num_params must be a positive number, got '1e6'"),
    (gpu(memory_gib='"1"'), "gpu 'mygpu': memory_gib must be a positive number, got '1'"),
    (gpu(hbm_bandwidth_gb_s='"fast"'), "gpu 'mygpu': hbm_bandwidth_gb_s must be a positive number, got 'fast'"),
    (gpu(memory_gib="true"), "gpu 'mygpu': memory_gib must be a positive number, got True"),
    ("models = 3\n", "models must be tables [models.NAME]"),
    ("[gpus]\ntoy = 3\n", "gpus.toy must be a table [gpus.toy] of fields"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_a_bad_value_is_one_line_naming_file_entry_field_and_value(tmp_path, text, message):
    path = tmp_path / "cat.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_catalog_file(path)
    assert str(info.value) == f"{path}: {message}"


@pytest.mark.parametrize(("text", "message"), [BAD[1], BAD[0], BAD[6], BAD[-2]])
def test_the_command_line_prints_that_one_line(tmp_path, text, message):
    """``memory_gib = inf`` was an OverflowError traceback; nan, both memory fields and a second spelling of
    an entry were an unnamed error or nothing at all."""
    path = tmp_path / "cat.toml"
    path.write_text(text)
    result = CliRunner().invoke(main, ["capacity", "--catalog", str(path), "--model", "llama-3-8b",
                                       "--gpu", "a100-80gb"])
    assert result.exit_code == 2, result.output
    assert result.output == f"Error: {path}: {message}\n"


def test_good_values_still_load(tmp_path):
    """The checks refuse only what is wrong: a catalog of finite positive values (a BOM before it, as
    Windows editors write, included) and ``memory_bytes`` alone still load."""
    path = tmp_path / "cat.toml"
    path.write_bytes(b"\xef\xbb\xbf" + (gpu() + model(active_params="2e9", source='"mine"')).encode())
    models, gpus = load_catalog_file(path)
    assert gpus["mygpu"].memory_bytes == 80 * GIB and models["mymodel"].active_params == 2e9
    path.write_text(gpu(memory_bytes=str(8 * GIB)).replace("memory_gib = 80\n", ""))
    assert load_catalog_file(path)[1]["mygpu"].memory_bytes == 8 * GIB


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 0, -1.5, True, "1"])
def test_check_positive_refuses_non_finite_and_non_positive(value):
    with pytest.raises(ValueError, match=r"^gpu 'g': f must be a positive (finite )?number, got "):
        check_positive("gpu 'g'", "f", value)


def test_check_positive_takes_huge_finite_values():
    check_positive("model 'm'", "num_params", 1e300)
    check_positive("model 'm'", "max_seq_len", 2**63 - 1, integer=True)
