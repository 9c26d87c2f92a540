"""``kvsim capacity``: the paper's capacity check, real-allocator request counts, and one-line usage errors."""

import json

import pytest
from click.testing import CliRunner

from allocators import catalog
from sim.cli import main


def run(*args: str):
    return CliRunner().invoke(main, ["capacity", *args])


def run_json(*args: str) -> dict:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_paper_check_opt13b_12gib_contiguous_max():
    r = run_json("--model", "opt-13b", "--gpu", "a100-40gb", "--kv-gib", "12", "--allocator", "contiguous-max")
    assert r["kv_capacity_tokens"] == 15728
    assert r["kv_bytes_per_token"] == 819200
    assert r["max_concurrent_requests"] == 7
    assert round(r["unusable_frac"], 4) == 0.0885
    assert r["kv_gib"] == 12.0 and r["kv_capacity_blocks"] is None


def test_text_output_names_the_figures():
    result = run("--model", "opt-13b", "--gpu", "a100-40gb", "--kv-gib", "12", "--allocator", "contiguous-max")
    assert result.exit_code == 0
    assert "15,728 tokens" in result.output
    assert "819,200 (800.0 KiB)" in result.output
    assert "max concurrent requests: 7" in result.output
    assert "8.85%" in result.output


def test_paged_counts_requests_by_admitting_them():
    r = run_json("--kv-gib", "12", "--allocator", "paged", "--block-size", "16", "--prompt-len", "512",
                 "--output-len", "512")
    assert r["kv_capacity_blocks"] == 983 and r["usable_blocks"] == 982
    assert r["max_concurrent_requests"] == 15  # 64 blocks each: 15 x 64 = 960 of 982
    r = run_json("--kv-gib", "12", "--allocator", "paged", "--prompt-len", "161", "--output-len", "338")
    assert r["max_concurrent_requests"] == 982 // 32  # 499 tokens take 32 blocks
    assert r["unusable_frac"] < 0.05


def test_pow2_counts_buddy_blocks():
    r = run_json("--kv-gib", "12", "--allocator", "contiguous-pow2", "--prompt-len", "161", "--output-len", "338")
    assert r["max_concurrent_requests"] == 15  # 161 + 512 -> 1024-slot buddy blocks: 8 + 4 + 2 + 1


def test_defaults_follow_max_model_len():
    r = run_json("--kv-tokens", "10000", "--allocator", "contiguous-oracle", "--max-model-len", "1000",
                 "--output-len", "200")
    # 1000-slot slabs in 1024-slot buddy blocks: 10,000 = 8192 + 1024 + 512 + 256 + 16 holds 8 + 1
    assert (r["prompt_len"], r["output_len"], r["max_concurrent_requests"]) == (800, 200, 9)


def test_request_that_never_fits_reports_zero_and_why():
    r = run_json("--kv-tokens", "1000", "--allocator", "paged")
    assert r["max_concurrent_requests"] == 0 and "usable" in r["never_fits"]


def test_catalog_file_extends_models(tmp_path):
    path = tmp_path / "extra.toml"
    path.write_text(
        "[models.tiny]\nnum_layers = 2\nhidden_size = 64\nnum_heads = 4\nnum_kv_heads = 2\nhead_dim = 16\n"
        "num_params = 1e6\nmax_seq_len = 256\nintermediate_size = 128\nvocab_size = 1000\n")
    saved = dict(catalog.MODELS)
    try:
        r = run_json("--catalog", str(path), "--model", "tiny", "--kv-tokens", "4096")
    finally:
        catalog.MODELS.clear()
        catalog.MODELS.update(saved)
    assert r["kv_bytes_per_token"] == 256 and r["max_concurrent_requests"] == 15


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "gpt-5"], "valid choices: opt-13b"),
        (["--gpu", "tpu-v9"], "valid choices: a100-40gb"),
        (["--allocator", "slab"], "valid choices: contiguous-max, contiguous-pow2"),
        (["--allocator", "contiguous-max", "--placement", "worst-fit"], "valid choices: buddy, first-fit"),
        (["--kv-gib", "-1"], "--kv-gib must be positive"),
        (["--kv-tokens", "-5"], "--kv-tokens must be positive"),
        (["--block-size", "-16", "--kv-gib", "12"], "--block-size must be a positive integer"),
        (["--prompt-len", "-1", "--kv-gib", "12"], "--prompt-len must be positive"),
        (["--prompt-len", "3000", "--output-len", "0"], "exceeds --max-model-len 2048"),
        (["--model", "opt-66b", "--gpu", "a100-40gb"], "does not fit"),
        (["--kv-gib", "12", "--kv-tokens", "100"], "at most one of --kv-gib and --kv-tokens"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(args, message):
    result = run(*args)
    assert result.exit_code == 2, result.output
    error_lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1 and message in error_lines[0], result.output
