"""``kvsim capacity`` on a hybrid model: ``paged`` is vLLM's hybrid KV cache manager there too, so sliding
windows raise the requests that fit; ``--disable-hybrid-kv-cache-manager`` counts every layer for every token."""

import json

import numpy as np
from click.testing import CliRunner

from allocators.base import cdiv
from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from workloads import Workload


def capacity(*args: str) -> dict:
    result = CliRunner().invoke(main, ["capacity", "--model", "gemma-3-12b", "--gpu", "h100-80gb", "--prompt-len",
                                       "8000", "--output-len", "1000", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_windows_raise_the_requests_that_fit():
    """Gemma-3-12B on an H100: a request holds 9,000 tokens in its 8 full layers but about a window (1,024
    tokens, 65 blocks) in each of the five 8-layer window groups; the last one admitted, prefilled in chunks of
    2,048 (--max-num-batched-tokens) as a run does, peaks at its last chunk: the whole prompt in the full group,
    in each window group the blocks from the window of the chunk's first token (6,144) on. With every layer
    treated as full, each holds 9,000 tokens of all 48 layers."""
    hybrid, full = capacity(), capacity("--disable-hybrid-kv-cache-manager")
    assert hybrid["kv_capacity_tokens"] == full["kv_capacity_tokens"] == 131_366
    assert hybrid["kv_cache_groups"] == [f"sliding_window.{i}" for i in range(5)] + ["full"]
    assert full["kv_cache_groups"] is None
    usable = hybrid["usable_blocks"]
    assert usable == 131_366 * 48 // 8 // 16 - 1  # blocks of 16 tokens of 8 layers, less the null block
    per_request = cdiv(9000, 16) + 5 * (1024 // 16 + 1)
    last_chunk = cdiv(8000, 16) + 5 * (cdiv(8000, 16) - (6144 - 1024 + 1) // 16)
    assert hybrid["max_concurrent_requests"] == (usable - last_chunk) // per_request + 1 == 54
    assert full["max_concurrent_requests"] == full["usable_blocks"] // cdiv(9000, 16) == 14


def test_an_all_window_model_keeps_its_window_under_the_flag():
    """Mistral-7B v0.1's layers all have one window: vLLM's flag leaves that uniform spec as it is (only window
    layers beside full ones become full attention), so the count is the same and the flag is reported."""
    args = ["capacity", "--model", "mistral-7b", "--gpu", "h100-80gb", "--prompt-len", "8000", "--output-len", "1000",
            "--json"]
    plain = json.loads(CliRunner().invoke(main, args).output)
    result = CliRunner().invoke(main, [*args, "--disable-hybrid-kv-cache-manager"])
    flagged = json.loads(result.stdout)
    assert flagged["max_concurrent_requests"] == plain["max_concurrent_requests"] == 113
    assert flagged["ignored_settings"]["--disable-hybrid-kv-cache-manager"].startswith("every layer of mistral-7b")
    assert "Warning: paged: --disable-hybrid-kv-cache-manager ignored" in result.stderr


def test_a_prompt_longer_than_the_pool_holds_whole_fits_as_a_run_prefills_it():
    """A 12,000-token prompt needs 750 blocks in each of Gemma-3-12B's six groups, more than a pool of 4,499
    usable blocks holds whole; prefilled in chunks its window groups hold at most the window and a chunk, so
    `kvsim run` admits three such requests at once, and capacity says the same (it said 0). So for GPT-OSS-20B
    and Mistral-7B, whose windows (128, 4,096 tokens) free as the chunks pass."""
    batch = Workload(arrival_time_s=np.zeros(6), prompt_tokens=np.full(6, 12000), output_tokens=np.full(6, 3000),
                     name="batch")
    args = ["--kv-tokens", "12000", "--prompt-len", "12000", "--output-len", "3000"]
    counts = {}
    for model in ("gemma-3-12b", "gpt-oss-20b", "mistral-7b"):
        result = CliRunner().invoke(main, ["capacity", "--model", model, "--gpu", "h100-80gb", *args, "--json"])
        counts[model] = json.loads(result.stdout)["max_concurrent_requests"]
        run = run_simulation(SimConfig(model=model, gpu="h100-80gb", kv_tokens=12000), batch, warn=False).summary
        assert (run["completed"], run["preemptions"], run["max_running"]) == (6, 0, counts[model])
    assert counts == {"gemma-3-12b": 3, "gpt-oss-20b": 1, "mistral-7b": 2}
