"""A Mamba-1 hybrid from a ``--catalog`` file on the command line: ``kvsim capacity`` and ``kvsim run`` of
AI21-Jamba-1.5-Mini described in TOML (a ``[models.NAME.mamba1]`` table) are the built-in entry's, prefix caching on
and off."""

import json

import pytest
from click.testing import CliRunner

from sim.cli import main
from tests.allocators.test_catalog_file_mamba1 import jamba_toml

pytestmark = pytest.mark.usefixtures("restore_catalog")  # commands register catalog files process-wide

MINE = "my-jamba"


@pytest.fixture
def catalog(tmp_path) -> str:
    path = tmp_path / "mine.toml"
    path.write_text(jamba_toml(MINE))
    return str(path)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def _report(result, name: str) -> dict:
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    report.pop("wall_time_s", None)
    return json.loads(json.dumps(report).replace(name, "MODEL"))


@pytest.mark.parametrize("flag", [[], ["--no-enable-prefix-caching"]])
def test_capacity_is_the_built_in_entrys(catalog, flag):
    flags = ["--gpu", "h100-80gb", "-tp", "2", "--json", *flag]
    want = _report(invoke("capacity", "--model", "jamba-1.5-mini", *flags), "jamba-1.5-mini")
    got = _report(invoke("capacity", "--model", MINE, "--catalog", catalog, *flags), MINE)
    assert got == want
    assert (got["block_size"], got["kv_capacity_blocks"], got["mamba_kind"]) == (80, 37_520, "Mamba-1")


@pytest.mark.parametrize("flag", [[], ["--no-enable-prefix-caching"]])
def test_run_does_what_it_does_with_the_built_in_entry(catalog, tmp_path, flag):
    """Prefix caching on (vLLM's default, mamba_cache_mode 'align') and off."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens\n" + "".join(f"{i},500,8\n" for i in range(6)))
    flags = ["--gpu", "h100-80gb", "-tp", "2", "--json", *flag]
    want = _report(invoke("run", str(trace), "--model", "jamba-1.5-mini", *flags), "jamba-1.5-mini")
    got = _report(invoke("run", str(trace), "--model", MINE, "--catalog", catalog, *flags), MINE)
    assert got == want and got["completed"] == 6
