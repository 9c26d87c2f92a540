"""A sweep's ``block_size`` column is what the grid set (empty where --block-size was not given: vLLM's choice),
and ``effective_block_size`` the block size each run's pool had (`sim.sweep.point.EFFECTIVE_COLUMNS`): for an
MLA model with fp8 latents on Hopper the two differ where nothing was given (FLASHMLA's 64)."""

from __future__ import annotations

import pandas as pd

from sim.kernel.config import SimConfig
from sim.sweep.grid import grid_from_flags
from sim.sweep.point import make_row
from sim.sweep.run import run_sweep

MLA_FP8 = ["--model", "deepseek-v3", "--gpu", "h200", "--tensor-parallel", "8", "--kv-cache-dtype", "fp8",
           "--kv-tokens", "64000", "--max-model-len", "8192", "--num-requests", "10", "--step-time", "0.01"]


def test_effective_block_size_is_the_runs_and_block_size_the_grids(tmp_path):
    grid = grid_from_flags([*MLA_FP8, "--allocator", "paged,contiguous-max"], SimConfig)
    table = run_sweep(grid, tmp_path / "s.csv").table.set_index("allocator")
    assert table["block_size"].isna().all()  # not given
    assert table.loc["paged", "effective_block_size"] == 64  # FLASHMLA's, as vLLM sets it
    assert table.loc["contiguous-max", "effective_block_size"] == 16  # slabs: the cost model's default

    given = run_sweep(grid_from_flags([*MLA_FP8, "--block-size", "16,64"], SimConfig), tmp_path / "g.csv").table
    assert given[["block_size", "effective_block_size"]].astype(int).values.tolist() == [[16, 16], [64, 64]]
    assert pd.read_csv(tmp_path / "g.csv")["effective_block_size"].tolist() == [16, 64]


def test_a_summary_key_named_as_a_field_keeps_the_fields_value_but_block_size_also_gets_its_own_column():
    row = make_row("id", {"allocator": "paged", "block_size": None}, {"allocator": "x", "block_size": 64, "a": 1},
                   None, "v")
    assert (row["allocator"], row["block_size"], row["effective_block_size"], row["a"]) == ("paged", None, 64, 1)
    assert "effective_block_size" not in make_row("id", {"block_size": 16}, None, "boom", "v")  # failed: no run


def test_effective_block_size_sits_beside_block_size(tmp_path):
    """A sweep that sets no --block-size has an empty ``block_size`` column (the setting: vLLM chose); the
    size each run used is the very next column, in the rows and in the file, not thirty columns on."""
    row = make_row("id", {"allocator": "paged", "block_size": None, "seed": 0}, {"block_size": 16, "a": 1}, None, "v")
    assert list(row)[list(row).index("block_size") + 1] == "effective_block_size"
    run_sweep(grid_from_flags([*MLA_FP8, "--allocator", "paged"], SimConfig), tmp_path / "s.csv")
    columns = list(pd.read_csv(tmp_path / "s.csv").columns)
    assert columns[columns.index("block_size") + 1] == "effective_block_size"
