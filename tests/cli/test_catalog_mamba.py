"""A hybrid Mamba-2 model from a ``--catalog`` file on the command line: ``kvsim capacity`` of Nemotron-H-8B
described in TOML is the built-in entry's, figure for figure, on two GPUs and two tensor-parallel sizes, and
``kvsim run`` does with it what it does with the built-in one."""

import json

import pytest
from click.testing import CliRunner

from sim.cli import main
from tests.allocators.test_catalog_file_mamba import nemotron_toml

pytestmark = pytest.mark.usefixtures("restore_catalog")  # commands register catalog files process-wide

MINE = "my-nemotron-h"


@pytest.fixture
def catalog(tmp_path) -> str:
    path = tmp_path / "mine.toml"
    path.write_text(nemotron_toml(MINE))
    return str(path)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("gpu", ["h100-80gb", "h200"])
@pytest.mark.parametrize("tp", ["1", "2"])
def test_capacity_is_the_built_in_entrys(catalog, gpu, tp):
    flags = ["--gpu", gpu, "--tensor-parallel", tp, "--json"]
    built_in = invoke("capacity", "--model", "nemotron-h-8b", *flags)
    mine = invoke("capacity", "--model", MINE, "--catalog", catalog, *flags)
    assert built_in.exit_code == mine.exit_code == 0, mine.output
    want, got = json.loads(built_in.stdout), json.loads(mine.stdout)
    assert (want.pop("model"), got.pop("model")) == ("nemotron-h-8b", MINE)
    assert got == want
    assert got["block_size"] == got["mamba_pool"]["block_size"] == 1040  # one attention page holds a state
    assert got["mamba_layers"] == 24 and got["mamba_pool"]["mamba_groups"] == 6


def test_capacity_figures_on_an_h100(catalog):
    """The figures of 60 GiB on one H100 that vLLM's own planner gives the built-in entry
    (tests/allocators/data/mamba_pool.json), from the file."""
    result = invoke("capacity", "--model", MINE, "--catalog", catalog, "--gpu", "h100-80gb", "--kv-gib", "60",
                    "--prompt-len", "1000", "--output-len", "41", "--json")
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert (r["block_size"], r["kv_capacity_blocks"], r["blocks_per_request"]) == (1040, 3780, 1 + 6)
    assert r["max_concurrent_requests"] == 3779 // 7


def _outcome(result, name: str):
    """What a run did, the model's name and the wall clock aside: its exit code and report, or its error."""
    if result.exit_code:
        return result.exit_code, result.output.replace(name, "MODEL")
    report = json.loads(result.stdout)
    report.pop("wall_time_s")
    return 0, json.dumps(report, sort_keys=True).replace(name, "MODEL")


def test_run_does_what_it_does_with_the_built_in_entry(catalog, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens\n" + "".join(f"{i},50,8\n" for i in range(6)))
    flags = ["--gpu", "h100-80gb", "--kv-gib", "10", "--json"]
    built_in = invoke("run", str(trace), "--model", "nemotron-h-8b", *flags)
    mine = invoke("run", str(trace), "--model", MINE, "--catalog", catalog, *flags)
    assert _outcome(mine, MINE) == _outcome(built_in, "nemotron-h-8b")


def test_a_bad_mamba_field_is_one_line_on_the_command_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(nemotron_toml("m", mamba={"n_groups": "0"}))
    result = invoke("capacity", "--catalog", str(path), "--model", "m", "--gpu", "h100-80gb")
    assert result.exit_code == 2, result.output
    assert result.output == f"Error: {path}: [models.m.mamba]: n_groups must be a positive integer, got 0\n"
