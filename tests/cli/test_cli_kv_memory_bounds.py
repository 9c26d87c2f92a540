"""KV sizes a GPU cannot have are refused in one line; pools too large for kvsim's block arrays are refused
before anything is allocated; a huge contiguous pool runs in memory independent of its size."""

from __future__ import annotations

import json
import resource

import pytest
from click.testing import CliRunner

from sim.cli import main


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()  # the run's setup line (stderr) may come first
    assert lines[-1].startswith("Error: ") and all(line.startswith("workload ") for line in lines[:-1]), \
        result.output
    return lines[-1]


@pytest.mark.parametrize("kv_gib", ["1e9", "100000", "41"])
def test_kv_gib_above_the_gpus_memory_is_refused(kv_gib):
    """`kvsim run --kv-gib 1e9` ended in a MemoryError traceback and `--kv-gib 100000` ran for minutes; 41 GiB
    is just over an A100-40GB's 40 GiB."""
    line = one_line_error(CliRunner().invoke(main, ["run", "--kv-gib", kv_gib, "--num-requests", "5"]))
    assert "--kv-gib" in line and "exceeds the memory of 1 x a100-40gb (40.0 GiB)" in line
    assert "--kv-tokens" in line and "--tensor-parallel" in line


@pytest.mark.parametrize("command", ["run", "capacity"])
def test_kv_gib_below_one_token_slot_names_the_flag(command):
    """`--kv-gib 0.0001` rounds to 0 slots of opt-13b (819,200 bytes a token): it ended in the allocator's
    "capacity must be positive, got 0", naming neither the flag nor the value."""
    line = one_line_error(CliRunner().invoke(main, [command, "--kv-gib", "0.0001"]))
    assert line == ("Error: --kv-gib 0.0001 is 107,374 bytes, which rounds to 0 token slots of opt-13b (819,200 bytes "
                    "= 0.000763 GiB each); give more, or size the pool in slots with --kv-tokens")


def test_tensor_parallel_multiplies_the_memory_allowed():
    runner = CliRunner()
    one_line_error(runner.invoke(main, ["capacity", "--kv-gib", "100"]))
    result = runner.invoke(main, ["capacity", "--kv-gib", "100", "--tensor-parallel", "4", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kv_gib"] == 100.0


def test_a_paged_pool_beyond_the_block_limit_is_refused_up_front():
    line = one_line_error(CliRunner().invoke(main, ["run", "--kv-tokens", "1000000000", "--num-requests", "5"]))
    assert "over kvsim's limit of 4,194,304 blocks" in line and "--block-size" in line


def test_explicit_kv_tokens_size_a_contiguous_pool_without_per_slot_memory():
    """A billion-slot contiguous pool costs no memory per slot: no memory-map snapshot is taken of it (the
    summary says none), and the run stays far below the 8 GB one int64 per slot would take."""
    result = CliRunner().invoke(main, ["run", "--kv-tokens", "1000000000", "--allocator", "contiguous-max",
                                       "--num-requests", "20", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["completed"] == 20 and summary["memory_snapshots"] == 0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 2 * 1024**2  # KiB: under 2 GiB
