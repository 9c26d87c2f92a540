"""Messages speak CLI, not Python: errors name flags as typed, rejections state the limit and are warned about
on stderr, and the full public traces are explained where a user meets the shipped samples."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from sim.cli import main
from workloads import load_preset

PYTHONISMS = re.compile(r"\w+=True|\bformat=|__init__|\bnum_requests\b|\bkv_gib\b|\bkv_tokens\b|"
                        r"\bskip_bad_rows\b|\bgpu_memory_utilization\b|\bmax_num_seqs\b must")


def error_line(args: list[str]) -> str:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()  # the run's setup line (stderr) may come first
    assert lines[-1].startswith("Error: ") and all(line.startswith("workload ") for line in lines[:-1]), \
        result.output
    assert not PYTHONISMS.search(lines[-1]), lines[-1]
    return lines[-1]


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,5000,10\n0,100,10\n")
    return str(path)


@pytest.mark.parametrize(("args", "flag"), [
    (["run", "--kv-gib", "-1"], "--kv-gib"),
    (["run", "--kv-tokens", "0"], "--kv-tokens"),
    (["run", "--kv-gib", "1", "--kv-tokens", "100"], "--kv-gib and --kv-tokens"),
    (["run", "--num-requests", "0"], "--num-requests"),
    (["run", "--watermark", "1.5"], "--watermark"),
    (["run", "--gpu-memory-utilization", "2"], "--gpu-memory-utilization"),
    (["run", "--max-num-seqs", "512", "--max-num-batched-tokens", "256"], "--max-num-batched-tokens"),
    (["run", "--block-size", "0"], "--block-size"),
    (["run", "--tensor-parallel", "0"], "--tensor-parallel"),
    (["run", "--skip-bad-rows"], "--skip-bad-rows"),
    (["compare", "--arrivals", "poisson:rate=2"], "--arrivals"),
    (["capacity", "--kv-gib", "-1"], "--kv-gib"),
])
def test_errors_name_flags_as_typed(args, flag):
    assert flag in error_line(args)


def test_trace_errors_name_flags(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,abc,10\n")
    assert "--skip-bad-rows" in error_line(["run", str(bad)])
    odd = tmp_path / "odd.csv"
    odd.write_text("when,in,out\n0,5,6\n")
    line = error_line(["run", str(odd)])
    assert "--trace-format" in line and "--columns" in line


def test_rejections_state_the_limit_and_warn_on_stderr(trace):
    """A run whose requests were rejected looked like any other; the reason hid the limit ("max_model_len N")."""
    result = CliRunner().invoke(main, ["run", trace, "--max-model-len", "4096", "--step-time", "0.01", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)  # stdout stays pure JSON
    assert summary["rejected_reasons"] == {"prompt of N tokens leaves no room for an output token within max_model_len 4096": 1}
    warnings = [line for line in result.stderr.splitlines() if line.startswith("Warning")]
    assert warnings == ["Warning: paged: 1 of 2 requests rejected (1: prompt of N tokens leaves no room for an "
                        "output token within max_model_len 4096)"]
    clean = CliRunner().invoke(main, ["run", trace, "--max-model-len", "8192", "--step-time", "0.01", "--json"])
    assert clean.exit_code == 0 and "Warning" not in clean.stderr


def test_compare_warns_once_per_rejecting_allocator(trace):
    result = CliRunner().invoke(main, ["compare", trace, "--allocators", "paged,contiguous-max",
                                       "--max-model-len", "4096", "--step-time", "0.01"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("Warning")]
    assert [line.split(":")[1].strip() for line in warnings] == ["paged", "contiguous-max"]


def test_help_and_sample_sources_explain_the_full_traces(monkeypatch, tmp_path):
    """"the shared traces were not found" told a new user nothing: say where the full trace comes from and how
    to point kvsim at it."""
    help_text = " ".join(CliRunner().invoke(main, ["run", "--help"]).output.split())
    assert "$KVSIM_TRACES" in help_text and "data/traces/README.md" in help_text
    monkeypatch.delenv("KVSIM_TRACES", raising=False)
    monkeypatch.delenv("KVSIM_SHARED_TRACES", raising=False)
    source = load_preset("azure-conv", num_requests=10).source
    assert "not found" not in source
    assert "github.com/Azure/AzurePublicDataset" in source and "$KVSIM_TRACES" in source


def test_the_summary_table_says_each_ignored_setting_and_why():
    """``ignored_settings`` maps a flag to why it changed nothing; the table writes ``flag: why``, not the
    ``count x reason`` of the counts beside it."""
    result = CliRunner().invoke(main, ["run", "--preset", "sharegpt-demo", "--num-requests", "30",
                                       "--page-size-kib", "64"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("ignored_settings"))
    assert line.split(None, 1)[1] == "--page-size-kib 64: only vattention maps pages; paged does not"


def test_a_fleet_says_its_capacity_is_each_replicas():
    result = CliRunner().invoke(main, ["run", "--preset", "sharegpt-demo", "--num-requests", "30", "--replicas",
                                       "2"])
    assert result.exit_code == 0, result.output
    assert "; 2 replicas of opt-13b on 1 x a100-40gb; KV capacity per replica 11.11 GiB = 14,565 token" \
        in result.output


def test_compare_says_once_that_workers_do_not_apply():
    """Every allocator of a compare runs the same fleet: the note that --workers cannot split a router reading
    replica state was printed once per allocator."""
    result = CliRunner().invoke(main, ["compare", "--preset", "sharegpt-demo", "--num-requests", "20", "--allocators",
                                       "paged,radix", "--replicas", "2", "--router", "kv-cost", "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert result.stderr.count("note: --workers 2 applies to routers that read no replica state") == 1


def test_a_run_says_why_vllm_chose_blocks_other_than_16():
    """No --block-size on an MLA model with fp8 latents on an H100: vLLM takes FLASHMLA's 64, and the setup line
    says so (the summary's block_size alone would not say why); a given 16 is kept and needs no word."""
    flags = ["run", "--model", "deepseek-v3", "--gpu", "h100-80gb", "--tensor-parallel", "16", "--kv-cache-dtype",
             "fp8", "--num-requests", "5", "--json"]
    chosen = CliRunner().invoke(main, flags)
    assert chosen.exit_code == 0 and json.loads(chosen.stdout)["block_size"] == 64
    assert ("; blocks of 64 tokens, as vLLM sets where --block-size is not given: it serves deepseek-v3's MLA layers "
            "(--kv-cache-dtype fp8) on h100-80gb (compute capability 9.0) with its FLASHMLA attention backend, whose "
            "kernels take multiples of 64") in chosen.stderr
    given = CliRunner().invoke(main, [*flags, "--block-size", "16"])
    assert given.exit_code == 0 and json.loads(given.stdout)["block_size"] == 16 and "blocks of" not in given.stderr


def test_rate_help_says_which_presets_it_time_scales():
    """``--rate`` on a trace preset scales the trace's own timestamps (burstiness kept), where on a synthetic
    preset it is a Poisson rate: the help named only Poisson, which a run of ``--preset azure-conv --rate 8``
    did not do. The help's list is the presets whose source says they were time-scaled."""
    from sim.commands.run import run_command
    from workloads import PRESETS

    text = next(param.help for param in run_command.params if param.name == "rate")
    scaled = [name for name in PRESETS if "time-scaled to 3 req/s" in load_preset(name, rate=3, num_requests=50).source]
    assert scaled == ["azure-code", "azure-conv", "mooncake-conv"]
    assert f"a trace preset ({', '.join(scaled)}) keeps its own timestamps, time-scaled to it" in text
    assert "A synthetic preset's Poisson rate" in text
