"""`kvsim sweep` warns the settings its points ran without, as `kvsim run` does: one line per setting and reason,
counting the points (they were only in the results table's ``ignored_settings`` column)."""

from __future__ import annotations

import math

from click.testing import CliRunner

from sim.cli import main
from sim.commands.sweep import ignored_settings_lines


def test_sweep_warns_each_ignored_setting_with_its_points(tmp_path):
    out = tmp_path / "s.parquet"
    args = ["sweep", "--allocator", "paged,contiguous-max,radix", "--placement", "first-fit", "--num-requests", "10",
            "--step-time", "0.01", "--workers", "1", "--quiet", "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("Warning: ")]
    assert warnings == [
        "Warning: --placement first-fit ignored in 1 of 3 points: slab placement applies to contiguous allocators, "
        "not paged",
        "Warning: --placement first-fit ignored in 1 of 3 points: slab placement applies to contiguous allocators, "
        "not radix"]
    assert "Warning" not in result.stdout


def test_ignored_settings_lines_read_table_values_as_a_store_gives_them():
    rows = [{"ignored_settings": '{"--router least-kv": "one replica"}'}, {"ignored_settings": math.nan},
            {"ignored_settings": {"--router least-kv": "one replica"}}, {"ignored_settings": "not json"}, {}]
    assert ignored_settings_lines(rows) == ["Warning: --router least-kv ignored in 2 of 5 points: one replica"]
