"""vLLM's spellings of kvsim's settings in a sweep grid (flags, TOML keys, a grid built in Python): each sets the
same `SimConfig` field as kvsim's name, so the grid, its point ids and its results are the same; two spellings of
one field in one grid are refused, naming both."""

import pandas as pd
import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.kernel.config import SimConfig
from sim.sweep.grid import Grid, grid_from_flags, load_grid_toml

PAIRS = [
    (["--tensor-parallel", "1,2"], ["--tensor-parallel-size", "1,2"]),
    (["--tensor-parallel", "1,2"], ["-tp", "1,2"]),
    (["--no-prefix-caching"], ["--no-enable-prefix-caching"]),
    (["--prefix-caching", "true,false"], ["--enable-prefix-caching", "true,false"]),
    (["--no-chunked-prefill"], ["--no-enable-chunked-prefill"]),
    (["--preemption", "recompute,swap"], ["--preemption-mode", "recompute,swap"]),
    (["--swap-space-gib", "1,8"], ["--swap-space", "1,8"]),
    (["--cpu-offload-gib", "0,2"], ["--kv-offloading-size", "0,2"]),
    (["--block-size", "8", "--tensor-parallel", "2"], ["-tp", "2", "--block-size", "8"]),
]


@pytest.mark.parametrize(("kvsim", "vllm"), PAIRS)
def test_grid_flag_alias_is_kvsims_field(kvsim, vllm):
    assert grid_from_flags(vllm, SimConfig) == grid_from_flags(kvsim, SimConfig)


def test_short_flag_is_not_taken_for_a_booleans_value():
    grid = grid_from_flags(["--no-prefix-caching", "-tp", "2"], SimConfig)
    assert grid.axes == {"prefix_caching": (False,), "tensor_parallel": (2,)}


@pytest.mark.parametrize(("kvsim", "vllm", "value"), [
    ("tensor_parallel", "tensor_parallel_size", "2"),
    ("prefix_caching", "enable_prefix_caching", "false"),
    ("chunked_prefill", "enable_chunked_prefill", "false"),
    ("preemption", "preemption_mode", "'swap'"),
    ("swap_space_gib", "swap_space", "8"),
    ("cpu_offload_gib", "kv_offloading_size", "2"),
])
@pytest.mark.parametrize("table", ["[base]\n{key} = {value}\n", "[axes]\n{key} = [{value}]\n"])
def test_toml_alias_is_kvsims_field(tmp_path, kvsim, vllm, value, table):
    def grid(key):
        path = tmp_path / f"{key}.toml"
        path.write_text(table.format(key=key, value=value))
        return load_grid_toml(path, SimConfig)

    ours = grid(kvsim)
    assert grid(vllm) == ours and kvsim in {**ours.base, **ours.axes}


def test_python_grid_takes_the_alias():
    assert Grid({"tensor_parallel_size": 2}, {"enable_prefix_caching": [True, False]}) == \
        Grid({"tensor_parallel": 2}, {"prefix_caching": [True, False]})


@pytest.mark.parametrize(("tokens", "message"), [
    (["--tensor-parallel", "1", "--tensor-parallel-size", "2"],
     "--tensor-parallel and --tensor-parallel-size both set field 'tensor_parallel'"),
    (["-tp", "1", "--tensor-parallel", "2"], "-tp and --tensor-parallel both set field 'tensor_parallel'"),
    (["--prefix-caching", "--no-enable-prefix-caching"],
     "--prefix-caching and --no-enable-prefix-caching both set field 'prefix_caching'"),
    (["--swap-space", "1", "--axis", "swap_space_gib=2"], "--swap-space and --axis swap_space_gib both set field"),
    (["--tensor-parallel-size", "1", "--tensor-parallel-size", "2"], "--tensor-parallel-size is given twice"),
])
def test_two_spellings_in_grid_flags_are_refused(tokens, message):
    with pytest.raises(ValueError, match=message):
        grid_from_flags(tokens, SimConfig)


@pytest.mark.parametrize(("text", "message"), [
    ("[base]\ntensor_parallel = 1\ntensor_parallel_size = 2\n",
     r"\[base\]: 'tensor_parallel' and 'tensor_parallel_size' both set field 'tensor_parallel'"),
    ("[axes]\nswap_space = [1]\nswap_space_gib = [2]\n",
     r"\[axes\]: 'swap_space' and 'swap_space_gib' both set field 'swap_space_gib'"),
    ("[base]\npreemption_mode = 'swap'\n[axes]\npreemption = ['recompute']\n",
     r"field 'preemption' is in both \[base\] and \[axes\] \(as 'preemption_mode' and 'preemption'\)"),
])
def test_two_spellings_in_a_toml_grid_are_refused(tmp_path, text, message):
    path = tmp_path / "g.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_grid_toml(path, SimConfig)


def test_two_spellings_in_a_python_grid_are_refused():
    with pytest.raises(ValueError, match="'tensor_parallel' and 'tensor_parallel_size' both set field"):
        Grid({"tensor_parallel": 1, "tensor_parallel_size": 2}, {})


def test_grid_names_why_a_vllm_lookalike_is_not_a_field():
    with pytest.raises(ValueError, match="--cpu-offload-gb is not a kvsim setting: vLLM's --cpu-offload-gb "
                                         "offloads model weights"):
        grid_from_flags(["--cpu-offload-gb", "4"], SimConfig)


def test_sweep_with_vllm_spellings_writes_kvsims_table(tmp_path):
    """End to end: the same points, ids, columns and results, whichever spelling the grid used."""
    common = ["sweep", "--num-requests", "20", "--step-time", "0.01", "--kv-tokens", "4000", "--workers", "1",
              "--quiet"]
    tables = []
    for i, flags in enumerate([["--tensor-parallel", "1,2", "--no-prefix-caching", "--preemption", "swap"],
                               ["-tp", "1,2", "--no-enable-prefix-caching", "--preemption-mode", "swap"]]):
        out = tmp_path / f"s{i}.csv"
        result = CliRunner().invoke(main, [*common, *flags, "--out", str(out)])
        assert result.exit_code == 0, result.output
        tables.append(pd.read_csv(out).drop(columns=["wall_time_s", "point_wall_s"]))
    pd.testing.assert_frame_equal(tables[0], tables[1])
    assert tables[0]["tensor_parallel"].tolist() == [1, 2]
    assert not tables[0]["prefix_caching"].any() and set(tables[0]["preemption"]) == {"swap"}
    assert "tensor_parallel_size" not in tables[0] and "preemption_mode" not in tables[0]


def test_sweep_refuses_two_spellings_before_running(tmp_path):
    result = CliRunner().invoke(main, ["sweep", "--tensor-parallel", "1", "--tensor-parallel-size", "2",
                                       "--workers", "1", "--out", str(tmp_path / "s.csv")])
    assert result.exit_code == 2
    assert "--tensor-parallel and --tensor-parallel-size both set field 'tensor_parallel'" in result.output
    assert not (tmp_path / "s.csv").exists()
