"""One name per concept on every command, old spellings still accepted but hidden from --help: --allocator,
--trace-format, --columns, --scheduler (the batching policy; sweep's Dask address is --dask-scheduler);
`compare --out`; notebook 04's `kvsim run --trace` hint runs."""

import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from sim.cli import main
from workloads.presets import SAMPLES_DIR

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = SAMPLES_DIR / "AzureLLMInferenceTrace_conv.csv"
FAST = ["--step-time", "0.01", "--kv-tokens", "8192"]


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("t,inp,outp\n" + "".join(f"{i * 0.5},{40 + i},{5 + i}\n" for i in range(6)))
    return str(path)


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def help_text(*command):
    return invoke(*command, "--help").output


@pytest.mark.parametrize(("command", "shown", "hidden"), [
    (["compare"], "--allocator", "--allocators"),
    (["trace", "stats"], "--trace-format", "--format"),
    (["trace", "stats"], "--columns", "--trace-columns"),
    (["run"], "--columns", "--trace-columns"),
    (["compare"], "--columns", "--trace-columns"),
    (["sweep"], "--dask-scheduler", "--scheduler ADDRESS"),
])
def test_help_shows_one_name_per_concept(command, shown, hidden):
    text = help_text(*command)
    assert re.search(rf"(?<![\w-]){re.escape(shown)}(?![\w-])", text)
    assert not re.search(rf"(?<![\w-]){re.escape(hidden)}(?![\w-])", text)


@pytest.mark.parametrize("flag", ["--allocator", "--allocators"])
def test_compare_takes_allocator_and_the_old_spelling(trace, flag):
    result = invoke("compare", trace, "--columns", "arrival_time_s=t,prompt_tokens=inp,output_tokens=outp",
                    flag, "paged,contiguous-max", *FAST, "--json")
    assert result.exit_code == 0, result.output
    assert [s["allocator"] for s in json.loads(result.stdout)] == ["paged", "contiguous-max"]


@pytest.mark.parametrize(("flags", "columns"), [
    (["--trace-format", "kvsim"], "--columns"), (["--format", "kvsim"], "--trace-columns")])
def test_trace_stats_takes_the_new_names_and_the_old(trace, flags, columns):
    result = invoke("trace", "stats", trace, *flags, columns, "arrival_time_s=t,prompt_tokens=inp,output_tokens=outp",
                    "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rows"] == 6


def test_run_takes_the_old_trace_columns_spelling(trace):
    result = invoke("run", trace, "--trace-columns", "arrival_time_s=t,prompt_tokens=inp,output_tokens=outp",
                    *FAST, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["completed"] == 6


def test_sweep_scheduler_is_the_batching_policy(trace, tmp_path):
    """`--scheduler` in a sweep is an axis of the simulator's scheduler, as in `kvsim run`."""
    import pandas as pd

    out = tmp_path / "s.parquet"
    result = invoke("sweep", "--trace", trace, "--columns", "arrival_time_s=t,prompt_tokens=inp,output_tokens=outp",
                    "--scheduler", "continuous,static", *FAST, "--workers", "1", "--quiet", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert list(pd.read_parquet(out)["scheduler"]) == ["continuous", "static"]


@pytest.mark.parametrize("flags", [["--dask-scheduler", "tcp://127.0.0.1:8786"],
                                   ["--scheduler", "tcp://127.0.0.1:8786"], ["--scheduler=10.0.0.1:8786"]])
def test_a_dask_address_is_dask_scheduler_and_the_old_spelling_still_reads_as_one(flags):
    """An address is never taken for a batching policy: with the local executor it is a clear error (no
    cluster is contacted)."""
    result = invoke("sweep", *flags, "--executor", "local", "--workers", "1")
    assert result.exit_code == 2 and "it needs --executor dask" in result.stderr


def test_compare_out_writes_one_run_directory_per_allocator(trace, tmp_path):
    out = tmp_path / "cmp"
    result = invoke("compare", trace, "--columns", "arrival_time_s=t,prompt_tokens=inp,output_tokens=outp",
                    "--allocator", "paged,contiguous-max", *FAST, "--out", str(out), "--format", "csv")
    assert result.exit_code == 0, result.output
    for name in ("paged", "contiguous-max"):
        assert json.loads((out / name / "summary.json").read_text())["allocator"] == name
        assert (out / name / "steps.csv").exists()
    plot = invoke("plot", str(out / "paged"), str(out / "contiguous-max"), "--kind", "batch-sizes",
                  "--out", str(tmp_path / "b.png"))
    assert plot.exit_code == 0, plot.output


def test_notebook_04s_command_line_hint_runs(tmp_path, monkeypatch):
    """The notebook's "Next" cell tells the user to run `kvsim run --trace YOUR_FILE ...` and plot the result;
    both commands run as written (YOUR_FILE: the notebook's own sample trace)."""
    notebook = json.loads((ROOT / "notebooks" / "04_your_trace.ipynb").read_text())
    text = "".join("".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "markdown")
    commands = [c for c in re.findall(r"`(kvsim [^`]+)`", text) if c.startswith(("kvsim run", "kvsim plot run"))]
    assert len(commands) == 2 and "--trace YOUR_FILE" in commands[0]
    monkeypatch.chdir(tmp_path)
    for command in commands:
        args = [str(SAMPLE) if a == "YOUR_FILE" else a for a in shlex.split(command)[1:]]
        if args[0] == "run":
            args += ["--num-requests", "50"]  # the hint runs the whole trace; 50 requests show the same
        result = invoke(*args)
        assert result.exit_code == 0, f"{command}\n{result.output}"
    assert (tmp_path / "run" / "memory.png").exists()


def test_trace_and_dash_dash_trace_must_agree(trace, tmp_path):
    other = tmp_path / "other.csv"
    result = invoke("run", trace, "--trace", str(other))
    assert result.exit_code == 2 and "two traces" in result.stderr


def test_allocator_help_names_every_allocator():
    """--allocator's help is a fixed string (the CLI does not import the allocators to print help); it once
    left out `radix`, so a newcomer could not learn the name from `kvsim run --help`."""
    from allocators import ALLOCATORS
    from sim.commands.options import ALLOCATOR_NAMES

    listed = ALLOCATOR_NAMES.replace(" or ", ", ").split(", ")
    assert sorted(listed) == sorted(ALLOCATORS)


def test_compare_refuses_both_spellings_of_allocator(trace):
    """Guards `compare --allocator paged --allocators radix`, where the old spelling silently won and only radix
    ran: giving both is an error, as TRACE with --trace is for `run`, before anything runs."""
    result = invoke("compare", trace, "--allocator", "paged", "--allocators", "radix", *FAST)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == ["Error: --allocator paged and --allocators radix: give one of --allocator "
                                          "and --allocators (the old spelling of --allocator)"]


@pytest.mark.parametrize("flag", ["--allocator", "--allocators"])
def test_compare_refuses_an_allocator_listed_twice(trace, tmp_path, flag):
    """Guards `compare --allocator paged,paged --out DIR`, which ran paged twice and wrote both runs to DIR/paged,
    the second over the first: the repeated name is an error naming it, and nothing is written."""
    out = tmp_path / "cmp"
    result = invoke("compare", trace, "--columns", "arrival_time_s=t,prompt_tokens=inp,output_tokens=outp",
                    flag, "paged,contiguous-max,paged", *FAST, "--out", str(out))
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"Error: {flag} lists paged twice; give each allocator once"]
    assert not out.exists()
