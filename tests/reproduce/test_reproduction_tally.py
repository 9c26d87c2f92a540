"""The reproduction's pass tally is pinned to the one docs/reproduction.md states for `--quick` sizes (parsed
from the text): a change that moves a check from pass to miss, or back, must update the documentation with it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from sim.cli import main

DOC = (Path(__file__).resolve().parents[2] / "docs" / "reproduction.md").read_text()


@pytest.mark.slow
def test_quick_reproduction_tally_is_the_documented_one():
    documented = re.search(r"At `--quick` sizes (\d+ of \d+ checks pass)", " ".join(DOC.split())).group(1)
    result = CliRunner().invoke(main, ["reproduce", "paper", "--quick", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tally"] == documented
