"""Sweep grids from flags and TOML, value coercion, and point identity."""

from __future__ import annotations

import pytest

from sim.kernel.config import SimConfig
from sim.sweep.grid import Grid, grid_from_flags, load_grid_toml, parse_flag_tokens
from sim.sweep.hashing import point_id


def test_flags_become_typed_axes_in_order():
    grid = grid_from_flags(["--allocator", "paged,contiguous-max", "--block-size=8,16,32", "--rate", "1,2",
                            "--seed", "0,1", "--kv-gib", "none,12"], SimConfig)
    assert list(grid.axes) == ["allocator", "block_size", "rate", "seed", "kv_gib"]
    assert grid.axes["block_size"] == (8, 16, 32)
    assert grid.axes["rate"] == (1.0, 2.0) and isinstance(grid.axes["rate"][0], float)
    assert grid.axes["kv_gib"] == (None, 12.0)
    assert len(grid) == 2 * 3 * 2 * 2 * 2 == len(grid.points())
    # the last axis varies fastest, as itertools.product does
    first, second = grid.points()[:2]
    assert first == {"allocator": "paged", "block_size": 8, "rate": 1.0, "seed": 0, "kv_gib": None}
    assert second["kv_gib"] == 12.0 and second["seed"] == 0


def test_boolean_flags_and_axis_escape():
    raw = parse_flag_tokens(["--prefix-caching", "--no-chunked-prefill", "--axis", "scheduler=continuous,static",
                             "--step-by-step", "true,false"])
    assert raw == {"prefix_caching": ["true"], "chunked_prefill": ["false"],
                   "scheduler": ["continuous", "static"], "step_by_step": ["true", "false"]}
    grid = grid_from_flags(["--prefix-caching", "--step-by-step", "yes,no"], SimConfig)
    assert grid.axes == {"prefix_caching": (True,), "step_by_step": (True, False)}


@pytest.mark.parametrize(("tokens", "message"), [
    (["--blocksize", "16"], "unknown configuration field 'blocksize'"),
    (["--block-size", "sixteen"], "field 'block_size': expected an integer, got 'sixteen'"),
    (["--rate", "1,1"], "lists 1.0 twice"),
    (["--seed", "1", "--seed", "2"], "--seed is given twice"),
    (["paged"], "unexpected argument 'paged'"),
    (["--prefix-caching", "maybe"], "expected true or false"),
])
def test_bad_flags_name_the_field(tokens, message):
    with pytest.raises(ValueError, match="command line|unexpected|twice") as info:
        grid_from_flags(tokens, SimConfig)
    assert message in str(info.value)


def test_toml_base_and_axes(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('[base]\nmodel = "opt-13b"\nkv_gib = 12\nnum_requests = 200\n\n'
                    '[axes]\nallocator = ["paged", "contiguous-oracle"]\nrate = [1, 2.5]\n')
    grid = load_grid_toml(path, SimConfig)
    assert grid.base == {"model": "opt-13b", "kv_gib": 12.0, "num_requests": 200}
    assert grid.axes == {"allocator": ("paged", "contiguous-oracle"), "rate": (1.0, 2.5)}
    # flags override the file: an axis replaces a base value and vice versa
    merged = grid.merged(grid_from_flags(["--kv-gib", "10,20", "--rate", "3"], SimConfig))
    assert "kv_gib" not in merged.base and merged.axes["kv_gib"] == (10.0, 20.0)
    assert merged.axes["rate"] == (3.0,)
    assert len(merged) == 4


@pytest.mark.parametrize(("text", "message"), [
    ("[axes]\nblock_size = 16\n", "must be a list"),
    ("[axes]\nblock_size = [16, 'x']\n", "[axes]: field 'block_size': expected an integer"),
    ("[base]\nbogus = 1\n", "[base]: unknown configuration field 'bogus'"),
    ("[runs]\n", "unknown table(s) runs"),
    ("[axes\n", "not valid TOML"),
    ("[base]\nseed = 1\n[axes]\nseed = [1, 2]\n", "in both [base] and [axes]"),
])
def test_bad_toml_names_file_and_field(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_grid_toml(path, SimConfig)
    assert str(path) in str(info.value) and message in str(info.value)


def test_missing_toml_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        load_grid_toml(tmp_path / "nope.toml", SimConfig)


def test_without_drops_a_field():
    grid = Grid({"rate": 1.0, "seed": 3}, {"rate": (1.0, 2.0), "allocator": ("paged",)})
    assert grid.without("rate") == Grid({"seed": 3}, {"allocator": ("paged",)})


def test_point_id_is_stable_and_sensitive(tmp_path):
    from_flags = SimConfig(**grid_from_flags(["--rate", "1", "--kv-gib", "12"], SimConfig).points()[0])
    from_code = SimConfig(rate=1.0, kv_gib=12.0)
    assert point_id(from_flags, "0.1.0") == point_id(from_code, "0.1.0")
    assert point_id(from_code, "0.1.0") != point_id(from_code, "0.2.0")
    assert point_id(from_code, "0.1.0") != point_id(SimConfig(rate=1.0, kv_gib=12.0, seed=1), "0.1.0")
    assert len(point_id(from_code)) == 16


def test_point_id_follows_trace_contents(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("a,b\n1,2\n")
    config = SimConfig(trace=str(trace))
    before = point_id(config, "v")
    trace.write_text("a,b\n1,2\n3,4\n")
    assert point_id(config, "v") != before


def test_point_id_follows_the_files_a_point_reads_without_naming_them(tmp_path, monkeypatch):
    """A trace preset reads the full trace where $KVSIM_TRACES holds it and the shipped sample else, and a run
    picks up the user's calibration table for its GPU and model: a rerun must not reuse a point simulated on
    the other file."""
    from workloads.presets import TRACE_PRESETS

    monkeypatch.delenv("KVSIM_TRACES", raising=False)
    monkeypatch.setenv("KVSIM_HOME", str(tmp_path / "home"))
    preset = SimConfig(preset="azure-code", rate=1.0)
    sample = point_id(preset, "v")
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / TRACE_PRESETS["azure-code"]).write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    monkeypatch.setenv("KVSIM_TRACES", str(tmp_path / "traces"))
    assert point_id(preset, "v") != sample
    plain = SimConfig(gpu="h100-80gb", model="llama-3-8b")
    profiled = SimConfig(gpu="h100-80gb", model="llama-3-8b", cost_profile="vllm-v1")  # picks up no table
    before, profiled_before = point_id(plain, "v"), point_id(profiled, "v")
    table = tmp_path / "home" / "calibration" / "h100-80gb" / "llama-3-8b.json"
    table.parent.mkdir(parents=True)
    table.write_text("{}")
    assert point_id(plain, "v") != before
    assert point_id(profiled, "v") == profiled_before


def test_a_grid_built_in_python_is_coerced_as_flags_are():
    import numpy as np

    grid = Grid({"kv_gib": np.int64(12), "rate": "2"}, {"allocator": "paged", "block_size": np.array([16, 32]),
                                                        "seed": 3})
    assert grid.base == {"kv_gib": 12.0, "rate": 2.0} and type(grid.base["kv_gib"]) is float
    assert grid.axes == {"allocator": ("paged",), "block_size": (16, 32), "seed": (3,)}
    assert all(type(v) is int for v in grid.axes["block_size"])
    flags = grid_from_flags(["--allocator", "paged", "--block-size", "16,32", "--seed", "3"], SimConfig)
    assert grid.axes == flags.axes
    assert point_id(SimConfig(**grid.points()[0])) == point_id(SimConfig(**{**grid.base, **flags.points()[0]}))
    assert Grid({}, {"rate": (1, 1.0)}).axes == {"rate": (1.0, 1.0)}  # kept: the sweep merges the two points


@pytest.mark.parametrize(("axes", "message"), [
    ({"blocksize": (16, 32)}, "grid axes: unknown configuration field 'blocksize'"),
    ({"block_size": (16, 32.5)}, "grid axes: field 'block_size': expected an integer, got 32.5"),
    ({"allocator": {"paged", "radix"}}, "grid axis 'allocator' must be a list of values, got a set"),
    ({"block_size": ()}, "grid axes: field 'block_size' has no values"),
])
def test_a_grid_built_in_python_refuses_bad_axes_by_field(axes, message):
    with pytest.raises(ValueError) as info:
        Grid({}, axes)
    assert message in str(info.value)
