"""``kvsim capacity``: the paper's capacity check, real-allocator request counts, and one-line usage errors."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from allocators import catalog
from sim.cli import main
from tests.allocators.test_replicated_weights import V3_REPLICATED


def run(*args: str):
    return CliRunner().invoke(main, ["capacity", *args])


def run_json(*args: str) -> dict:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


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
    assert r["max_concurrent_requests"] == 982 // 32  # 498 slots (the last token gets none) take 32 blocks
    assert r["unusable_frac"] < 0.06  # 14 of each 512 slots, and the 22 blocks left over


def test_pow2_counts_buddy_blocks():
    r = run_json("--kv-gib", "12", "--allocator", "contiguous-pow2", "--prompt-len", "161", "--output-len", "338")
    assert r["max_concurrent_requests"] == 15  # 161 + 512 (337 output slots rounded up) -> 1024-slot buddy blocks


def test_defaults_follow_max_model_len():
    r = run_json("--kv-tokens", "10000", "--allocator", "contiguous-oracle", "--max-model-len", "1000",
                 "--output-len", "200")
    # 1000-slot slabs in 1024-slot buddy blocks: 10,000 = 8192 + 1024 + 512 + 256 + 16 holds 8 + 1
    assert (r["prompt_len"], r["output_len"], r["max_concurrent_requests"]) == (800, 200, 9)


def test_pool_follows_the_flags_that_size_it_as_run_does():
    """--max-num-batched-tokens (the activation reserve) sizes the pool as it does for `kvsim run`;
    --enforce-eager does not (vLLM 0.11 captures CUDA graphs after it sizes the KV cache) and is reported."""
    assert run_json("--model", "opt-13b", "--gpu", "a100-40gb")["kv_capacity_tokens"] == 14_565
    eager = run_json("--model", "opt-13b", "--gpu", "a100-40gb", "--enforce-eager")
    assert eager["kv_capacity_tokens"] == 14_565 and "--enforce-eager" in eager["ignored_settings"]
    bigger_steps = run_json("--model", "opt-13b", "--gpu", "a100-40gb", "--max-num-batched-tokens", "8192")
    assert bigger_steps["kv_capacity_tokens"] < 14_565
    from sim.kernel.config import SimConfig
    from sim.kernel.replica import resolve_capacity

    for flags, config in (([], {}), (["--enforce-eager"], {"enforce_eager": True}),
                          (["--max-num-batched-tokens", "8192"], {"max_num_batched_tokens": 8192})):
        expected = resolve_capacity(SimConfig(model="opt-13b", gpu="a100-40gb", **config)).kv_tokens
        assert run_json("--model", "opt-13b", "--gpu", "a100-40gb", *flags)["kv_capacity_tokens"] == expected


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
        (["--prompt-len", "3000"], "--prompt-len 3000 exceeds --max-model-len 2048"),
        (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens must be >= 1"),
        (["--model", "llama-3-70b", "--gpu", "h100-80gb", "--tensor-parallel", "3"],
         "its 64 attention heads do not split evenly over --tensor-parallel 3"),
        (["--model", "qwen2.5-7b", "--gpu", "a100-40gb", "--tensor-parallel", "7"],  # 28 heads, 4 KV heads
         "its 4 KV heads neither split evenly over --tensor-parallel 7 nor copy evenly onto it"),
        (["--model", "opt-66b", "--gpu", "a100-40gb"], "does not fit"),
        (["--kv-gib", "12", "--kv-tokens", "100"], "at most one of --kv-gib and --kv-tokens"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(args, message):
    result = run(*args)
    assert result.exit_code == 2, result.output
    error_lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1 and message in error_lines[0], result.output


@pytest.mark.parametrize(("args", "message"), [
    (["--prompt-len", "-5"], "--prompt-len must be positive, got -5"),
    (["--prompt-len", "0", "--output-len", "10"], "--prompt-len must be positive, got 0"),
    (["--output-len", "-3"], "--output-len must be non-negative, got -3"),
    (["--prompt-len", "100", "--output-len", "-3"], "--output-len must be non-negative, got -3"),
    (["--output-len", "2048"], "--output-len 2048 leaves no prompt token within --max-model-len 2048 (a request "
                               "needs at least one)"),
])
def test_a_bad_length_names_only_what_was_given(args, message):
    """Guards `capacity --prompt-len -5`, which said `got -5 and 2053`: 2053 was the output length derived from
    --max-model-len, which the user never gave. The message names the flag given and its value, nothing else."""
    result = run("--kv-gib", "12", *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"Error: {message}"]


# --- KV groups and --kv-cache-dtype, by hand from the config values (one H100-80GB, vLLM's defaults) ----------

H100_BYTES = 81559 * 1024**2
GRAPHS = int(0.64 * 1024**3)


def h100_kv_bytes(weights: float, intermediate: int, hidden: int, tp: int = 1, replicated: float = 0) -> int:
    """90% of each GPU minus weights (its share of the split ones, all of the ``replicated`` ones), a 2,048-token
    activation peak (2-byte values) and the graph reserve."""
    per_gpu_weights = (weights - replicated) / tp + replicated if replicated else weights / tp
    return int((H100_BYTES * 0.9 - per_gpu_weights - 2048 * (3 * intermediate + 4 * hidden) * 2 / tp - GRAPHS) * tp)


def group(name, layers, window, per_token):
    return {"name": name, "attention": name, "layers": layers, "window": window, "bytes_per_token": per_token}


# model: (extra flags, weights bytes, intermediate, hidden, kv_groups at bf16, pool bytes per token)
CASES = {
    "llama-3.1-8b": ([], 8.03e9 * 2, 14336, 4096, [group("full", 32, None, 2 * 32 * 8 * 128 * 2)], 1),
    "mistral-7b": ([], 7.24e9 * 2, 14336, 4096, [group("sliding_window", 32, 4096, 2 * 32 * 8 * 128 * 2)], 1),
    "gemma-3-12b": ([], 12.187325040e9 * 2, 15360, 3840,
                    [group("sliding_window", 40, 1024, 2 * 40 * 8 * 256 * 2),
                     group("full", 8, None, 2 * 8 * 8 * 256 * 2)],
                    1),
    "gpt-oss-20b": ([], 12.8 * 1024**3, 2880, 2880,
                    [group("sliding_window", 12, 128, 2 * 12 * 8 * 64 * 2),
                     group("full", 12, None, 2 * 12 * 8 * 64 * 2)],
                    1),
    "deepseek-v3": (["--tensor-parallel", "16"], 671e9 + 1.96e9 + 0.16e9, 18432, 7168,
                    [group("mla", 61, None, 61 * (512 + 64) * 2)], 16),  # the latent is on all 16 GPUs
}


@pytest.mark.parametrize("model", sorted(CASES))
def test_kv_groups_and_token_slots_on_h100(model):
    flags, weights, intermediate, hidden, groups, copies = CASES[model]
    tp = 16 if flags else 1
    per_token = sum(g["bytes_per_token"] for g in groups)
    r = run_json("--model", model, "--gpu", "h100-80gb", *flags)
    assert r["kv_groups"] == groups and r["kv_bytes_per_token"] == per_token
    kv_bytes = h100_kv_bytes(weights, intermediate, hidden, tp, V3_REPLICATED if model == "deepseek-v3" else 0)
    assert r["kv_bytes"] == kv_bytes and r["kv_capacity_tokens"] == kv_bytes // (per_token * copies)
    fp8 = run_json("--model", model, "--gpu", "h100-80gb", *flags, "--kv-cache-dtype", "fp8")
    assert fp8["kv_bytes"] == kv_bytes and fp8["kv_bytes_per_token"] == per_token // 2
    assert fp8["kv_capacity_tokens"] == kv_bytes // (per_token // 2 * copies)
    assert [g["bytes_per_token"] for g in fp8["kv_groups"]] == [g["bytes_per_token"] // 2 for g in groups]


def test_fp8_doubles_slots_for_the_same_memory():
    auto = run_json("--model", "gemma-3-12b", "--kv-gib", "12")
    for spelling in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        fp8 = run_json("--model", "gemma-3-12b", "--kv-gib", "12", "--kv-cache-dtype", spelling)
        assert fp8["kv_capacity_tokens"] == 2 * auto["kv_capacity_tokens"] == 12 * 1024**3 // (384 * 1024 // 2)


def test_text_output_lists_the_groups():
    result = run("--model", "gpt-oss-20b", "--gpu", "h100-80gb", "--kv-cache-dtype", "fp8")
    assert result.exit_code == 0, result.output
    assert "24,576 (24.0 KiB), --kv-cache-dtype fp8" in result.output
    assert "group sliding_window: 12 sliding_window layers, window 128 tokens, 12,288 bytes per token" in result.output
    assert "group full: 12 full layers, 12,288 bytes per token" in result.output


def test_a_catalog_entrys_own_fp8_is_what_it_prints(tmp_path, restore_catalog):
    """A `--catalog` model that stores its KV in fp8 keeps it under the flag's default ``auto``: the line and
    the JSON say fp8 (they said ``auto`` beside fp8's byte count)."""
    catalog = tmp_path / "models.toml"
    catalog.write_text('[models.tiny]\nnum_layers = 4\nnum_heads = 4\nnum_kv_heads = 2\nhead_dim = 64\n'
                       'hidden_size = 256\nintermediate_size = 1024\nvocab_size = 32000\nnum_params = 1e8\n'
                       'max_seq_len = 2048\nkv_cache_dtype = "fp8"\n')
    result = run("--catalog", str(catalog), "--model", "tiny", "--kv-gib", "1")
    assert result.exit_code == 0, result.output
    assert ("1,024 (1.0 KiB), stored as fp8 (the model entry's kv_cache_dtype; --kv-cache-dtype auto keeps it)"
            in result.output)
    data = run_json("--catalog", str(catalog), "--model", "tiny", "--kv-gib", "1")
    assert (data["kv_cache_dtype"], data["kv_cache_dtype_flag"], data["kv_bytes_per_token"]) == ("fp8", "auto", 1024)
    assert run_json("--catalog", str(catalog), "--model", "tiny", "--kv-gib", "1",
                    "--kv-cache-dtype", "fp16")["kv_bytes_per_token"] == 2048


def test_bad_kv_cache_dtype_is_a_one_line_error():
    result = run("--kv-cache-dtype", "int4")
    assert result.exit_code == 2
    assert [line for line in result.output.splitlines() if line.startswith("Error:")] == [
        "Error: --kv-cache-dtype must be one of auto, fp16, bf16, fp8 (or vLLM's float16, half, bfloat16, "
        "fp8_e4m3, fp8_e5m2, int8_per_token_head, fp8_per_token_head, int4_per_token_head, nvfp4, nvfp4_4over6, "
        "turboquant_k8v4, turboquant_4bit_nc, turboquant_k3v4_nc, turboquant_3bit_nc, fp8_ds_mla, nvfp4_ds_mla, "
        "fp8_inc, ultraquant_4bit, octave_k3v4, octave_k3v3, octave_k3v3_compact), got 'int4'"]


def test_capacity_says_what_run_would_say_of_the_same_settings():
    """A block size or placement the allocator has no use for, and a --max-model-len past the model's context,
    are reported as `kvsim run` reports them (stderr, and in --json), where capacity took them in silence."""
    result = run("--allocator", "vattention", "--block-size", "32", "--placement", "first-fit", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert set(report["ignored_settings"]) == {"--block-size 32", "--placement first-fit"}
    assert "Warning: vattention: --block-size 32 ignored: vattention maps pages of --page-size-kib" in result.stderr
    long = run("--max-model-len", "4096")
    assert long.exit_code == 0 and "Note: --max-model-len 4,096 exceeds opt-13b's own context of 2,048" in long.stderr
    plain = run("--json")
    assert "ignored_settings" not in json.loads(plain.stdout) and plain.stderr == ""


def test_capacity_holds_a_request_as_a_run_does():
    """A request's last sampled token gets no slot (vLLM v1 allocates slots only for computed tokens): 16-token
    prompts with one output token take one block each, so 9 fit in 9 usable blocks, as `kvsim run` runs 9 at once
    (capacity said 4, counting a 17th slot)."""
    assert run_json("--kv-tokens", "160", "--allocator", "paged", "--prompt-len", "16",
                    "--output-len", "1")["max_concurrent_requests"] == 9
    from sim.kernel.config import SimConfig
    from sim.kernel.runner import run_simulation
    from workloads import Workload

    w = Workload(arrival_time_s=np.zeros(12), prompt_tokens=np.full(12, 16), output_tokens=np.ones(12, np.int64))
    assert run_simulation(SimConfig(kv_tokens=160, step_time=0.01), w).summary["max_running"] == 9


def test_an_mla_model_gets_the_block_size_of_vllms_attention_backend():
    """DeepSeek-V3 with fp8 KV on H100s is served by vLLM's FLASHMLA backend, which takes blocks of 64, and
    vLLM sets 64 when --block-size is not given: 1,030-token requests take 17 blocks of 64, 5.4% of them
    unfilled (capacity counted 58,918 blocks of 16, 65 each, and 906 requests where vLLM holds 866)."""
    flags = ("--model", "deepseek-v3", "--gpu", "h100-80gb", "--tensor-parallel", "16", "--max-model-len", "8192",
             "--prompt-len", "1000", "--output-len", "30")
    result = run(*flags, "--kv-cache-dtype", "fp8", "--json")
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert r["block_size"] == 64 and r["kv_capacity_blocks"] == r["kv_capacity_tokens"] // 64 == 14729
    assert r["max_concurrent_requests"] == 14728 // 17 == 866
    assert "ignored_settings" not in r and "ignored" not in result.stderr  # no --block-size was given to ignore
    sixteen = run_json(*flags, "--kv-cache-dtype", "fp8", "--block-size", "16")  # given: kept, TRITON_MLA takes it
    assert sixteen["block_size"] == 16 and sixteen["kv_capacity_blocks"] == 58_918 and "ignored_settings" not in sixteen
    bf16 = run_json(*flags)  # FLASH_ATTN_MLA takes blocks of 16
    assert bf16["block_size"] == 16 and "ignored_settings" not in bf16
    given = run_json(*flags, "--kv-cache-dtype", "fp8", "--block-size", "32")  # kept: TRITON_MLA takes it
    assert given["block_size"] == 32 and "ignored_settings" not in given
    sglang = run_json(*flags, "--kv-cache-dtype", "fp8", "--allocator", "radix")  # SGLang's pages: as given
    assert sglang["block_size"] == 16 and "ignored_settings" not in sglang


def test_a_block_size_no_mla_backend_takes_is_a_server_vllm_refuses():
    result = run("--model", "deepseek-v3", "--gpu", "h200", "--tensor-parallel", "8", "--max-model-len", "8192",
                 "--block-size", "8", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["block_size"] == 8  # run as given, as kvsim runs other refused servers
    assert ("Warning: paged: vLLM would refuse to start this server: no MLA attention backend takes --block-size 8 "
            "for deepseek-v3's MLA layers (--kv-cache-dtype auto) on h200 (compute capability 9.0): FLASH_ATTN_MLA, "
            "FLASHMLA, TRITON_MLA take multiples of 16 or 64") in result.stderr


def test_a_catalog_gpus_compute_capability_picks_the_backend(tmp_path, restore_catalog):
    """A Blackwell GPU from a catalog file runs DeepSeek's MLA on FLASHINFER_MLA, blocks of 32; one that gives
    no compute capability keeps --block-size."""
    gpu = "memory_gib = 180\nhbm_bandwidth_gb_s = 8000\nbf16_tflops = 2250\npcie_gb_s = 50\n"
    catalog = tmp_path / "gpus.toml"
    catalog.write_text(f"[gpus.blackwell]\n{gpu}compute_capability = 10.0\n[gpus.unknown]\n{gpu}")
    flags = ("--catalog", str(catalog), "--model", "deepseek-v3", "--tensor-parallel", "8", "--max-model-len", "8192")
    assert run_json(*flags, "--gpu", "blackwell")["block_size"] == 32
    assert run_json(*flags, "--gpu", "unknown")["block_size"] == 16
