"""Regressions found in review: catalog files with bad values name the file in a one-line error (no traceback,
no gigabyte string from ``"1" * GIB``), and every allocator checks every constructor option, used or not."""

import pytest

from allocators import ALLOCATORS, make_allocator
from allocators.catalog_file import load_catalog_file

MODEL = ("num_layers = 2\nhidden_size = 64\nnum_heads = 4\nnum_kv_heads = 2\nhead_dim = 16\nnum_params = 1e6\n"
         "max_seq_len = 256\nintermediate_size = 128\nvocab_size = 1000\n")
GPU = "hbm_bandwidth_gb_s = 100\nbf16_tflops = 10\npcie_gb_s = 8\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[models.tiny]\n" + MODEL.replace("num_layers = 2", "num_layers = 0"),
         "model 'tiny': num_layers must be a positive integer, got 0"),
        ("[models.tiny]\n" + MODEL.replace("head_dim = 16", "head_dim = 16.5"),
         "model 'tiny': head_dim must be a positive integer, got 16.5"),
        ("[models.tiny]\n" + MODEL.replace("num_params = 1e6", 'num_params = "1e6"'),
         "model 'tiny': num_params must be a positive number, got '1e6'"),
        ('[gpus.toy]\nmemory_gib = "1"\n' + GPU, "gpu 'toy': memory_gib must be a positive number, got '1'"),
        ("[gpus.toy]\nmemory_gib = 1\n" + GPU.replace("= 100", '= "fast"'),
         "gpu 'toy': hbm_bandwidth_gb_s must be a positive number, got 'fast'"),
        ("[gpus.toy]\nmemory_gib = true\n" + GPU, "gpu 'toy': memory_gib must be a positive number, got True"),
        ("models = 3\n", "models must be tables [models.NAME]"),
        ("[gpus]\ntoy = 3\n", "gpus.toy must be a table [gpus.toy] of fields"),
    ],
)
def test_bad_catalog_values_are_one_line_errors_naming_the_file(tmp_path, text, message):
    path = tmp_path / "extra.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_catalog_file(path)
    assert str(info.value) == f"{path}: {message}"


@pytest.mark.parametrize("name", sorted(ALLOCATORS))
def test_every_allocator_checks_every_option(name):
    with pytest.raises(ValueError, match="unknown placement 'worst-fit'; valid choices: buddy, first-fit"):
        make_allocator(name, 1024, placement="worst-fit")
    with pytest.raises(ValueError, match="--max-model-len must be a positive integer, got True"):
        make_allocator(name, 1024, max_model_len=True)
    with pytest.raises(ValueError, match="prefix_caching must be True or False"):
        make_allocator(name, 1024, prefix_caching="yes")
    alloc = make_allocator(name, 1024, max_model_len=512, placement="best-fit")
    assert (alloc.capacity, alloc.max_model_len) == (1024, 512)
