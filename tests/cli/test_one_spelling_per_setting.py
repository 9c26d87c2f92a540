"""Two spellings of one setting on one command line (``--tensor-parallel 1 --tensor-parallel-size 2``) are
refused by run, compare, capacity and calibrate, naming both flags as given; one flag repeated under one
spelling keeps click's behaviour, the last value wins (`sim.commands.one_spelling`)."""

import json

import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.commands.one_spelling import two_spellings
from sim.commands.run import run_command


@pytest.mark.parametrize(("args", "first", "second"), [
    (["run", "--tensor-parallel", "1", "--tensor-parallel-size", "2"], "--tensor-parallel", "--tensor-parallel-size"),
    (["compare", "-tp", "2", "--tensor-parallel", "1"], "-tp", "--tensor-parallel"),
    (["capacity", "--tensor-parallel=1", "-tp=2"], "--tensor-parallel", "-tp"),
    (["calibrate", "--prefix-caching", "--no-enable-prefix-caching"], "--prefix-caching", "--no-enable-prefix-caching"),
    (["calibrate", "-tp", "2", "--tensor-parallel-size", "2"], "-tp", "--tensor-parallel-size"),  # even if equal
    (["run", "--no-chunked-prefill", "--enable-chunked-prefill"], "--no-chunked-prefill", "--enable-chunked-prefill"),
    (["run", "--preemption", "swap", "--preemption-mode", "recompute"], "--preemption", "--preemption-mode"),
    (["run", "--swap-space", "1", "--swap-space-gib", "2"], "--swap-space", "--swap-space-gib"),
    (["compare", "--cpu-offload-gib", "1", "--kv-offloading-size", "2"], "--cpu-offload-gib", "--kv-offloading-size"),
    (["run", "--columns", "prompt_tokens=a", "--trace-columns", "prompt_tokens=b"], "--columns", "--trace-columns"),
])
def test_two_spellings_of_one_setting_are_refused(args, first, second):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert f"Error: {first} and {second} both set " in result.stderr
    assert "two spellings of one setting" in result.stderr


@pytest.mark.parametrize(("args", "field", "value"), [
    (["--tensor-parallel-size", "1", "--tensor-parallel-size", "2"], "tensor_parallel", 2),
    (["-tp", "2", "-tp", "1"], "tensor_parallel", 1),
    (["--no-enable-prefix-caching", "--enable-prefix-caching"], "prefix_caching", True),
    (["--enable-prefix-caching", "--no-enable-prefix-caching"], "prefix_caching", False),
    (["--tensor-parallel-size", "2"], "tensor_parallel", 2),
])
def test_one_spelling_repeated_keeps_the_last_value(args, field, value):
    with run_command.make_context("run", list(args)) as ctx:
        assert ctx.params[field] == value


def test_capacity_runs_with_one_spelling_repeated():
    result = CliRunner().invoke(main, ["capacity", "--model", "llama-3-8b", "-tp", "1", "-tp", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tensor_parallel"] == 2


def test_a_value_that_looks_like_a_flag_is_a_value():
    """``--trace-format --columns`` gives --trace-format the value '--columns': not a second spelling of it."""
    params = run_command.params
    assert two_spellings(params, ["--trace-format", "--trace-columns", "--columns", "a=b"]) is None
    assert two_spellings(params, ["--columns=a=b", "--", "--trace-columns"]) is None
    assert two_spellings(params, ["--columns=a=b", "--trace-columns", "a=b"]) == (
        "trace_columns", "--columns", "--trace-columns")
