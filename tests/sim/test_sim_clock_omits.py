"""What the step clock leaves out is said, never implied: a run on several tensor-parallel GPUs charges no
all-reduces, so its summary carries ``clock_omits`` and ``kvsim run``/``compare`` print a note (once per
deployment); a one-GPU run and a given ``--step-time`` carry nothing."""

import json

import pytest
from click.testing import CliRunner

from sim.cli import main

TP4 = ["--model", "opt-66b", "--gpu", "a100-40gb", "--num-requests", "20"]


@pytest.mark.parametrize(("extra", "omitted"), [
    (["--tensor-parallel", "4"], True),
    (["--tensor-parallel", "4", "--cost-profile", "paper-2023"], True),
    (["--tensor-parallel", "4", "--step-time", "0.05"], False),
    (["--model", "opt-13b", "--gpu", "a100-40gb"], False),
])
def test_clock_omits_names_tensor_parallel_communication(extra, omitted):
    result = CliRunner().invoke(main, ["run", *TP4, *extra, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    omits = summary.get("clock_omits", [])
    assert bool(omits) == omitted
    if omitted:
        assert omits[0].startswith("tensor-parallel communication") and "4 GPUs" in omits[0]
        assert f"Note: the step clock omits {omits[0]}" in result.stderr


def test_compare_notes_the_clock_once():
    result = CliRunner().invoke(main, ["compare", *TP4, "--tensor-parallel", "4"])
    assert result.exit_code == 0, result.output
    assert result.stderr.count("Note: the step clock omits tensor-parallel communication") == 1
