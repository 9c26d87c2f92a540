"""``--decode-context-parallel-size`` (``-dcp``) on ``kvsim capacity``, ``run`` and ``compare``: vLLM's spellings,
DeepSeek-V3's pool on 8 x H200 before and after, the text lines, and one-line refusals."""

import json

from click.testing import CliRunner

from sim.cli import main


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def capacity_json(*args: str) -> dict:
    result = invoke("capacity", "--model", "deepseek-v3", "--gpu", "h200", "-tp", "8", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_capacity_of_deepseek_v3_on_8_h200s_with_and_without_dcp():
    tp8, dcp8 = capacity_json(), capacity_json("--decode-context-parallel-size", "8")
    assert capacity_json("-dcp", "8") == dcp8  # vLLM's short flag
    figures = ("kv_capacity_tokens", "kv_capacity_blocks", "block_size", "kv_pool_bytes_per_token",
               "max_concurrent_requests", "decode_context_parallel_size")
    assert [tp8[k] for k in figures] == [708_857, 44_303, 16, 562_176, 4, 1]
    assert [dcp8[k] for k in figures] == [5_670_861, 44_303, 128, 70_272, 34, 8]
    assert dcp8["kv_bytes"] == tp8["kv_bytes"]
    text = invoke("capacity", "--model", "deepseek-v3", "--gpu", "h200", "-tp", "8", "-dcp", "8").output
    assert "70,272 bytes of the 8 GPUs' memory per token, sharded over 8 GPUs by decode context parallelism" in text
    assert "44,303 blocks of 128 (16 on each of 8 decode-context-parallel GPUs)" in text


def test_run_and_compare_take_it_and_name_it():
    result = invoke("run", "--model", "deepseek-v3", "--gpu", "h200", "-tp", "8", "-dcp", "8", "--num-requests", "5",
                    "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["block_size"], summary["kv_capacity_tokens"]) == (128, 5_670_861)
    assert "5,670,861 token slots sharded over 8 GPUs by decode context parallelism" in result.stderr
    assert "Note: the step clock omits decode-context-parallel communication" in result.stderr
    compared = invoke("compare", "--model", "deepseek-v3", "--gpu", "h200", "-tp", "8", "-dcp", "8", "--allocator",
                      "paged,paged-cow", "--num-requests", "5")
    assert compared.exit_code == 0, compared.output


def test_what_vllm_refuses_is_a_one_line_error():
    cases = [
        (["capacity", "--model", "deepseek-v3", "--gpu", "h200", "-tp", "8", "-dcp", "3"],
         "Error: --decode-context-parallel-size 3: vLLM requires tp_size=8 to be divisible by dcp_size=3 (DCP shards "
         "KV over the tensor-parallel GPUs)"),
        (["run", "--model", "llama-3-70b", "--gpu", "h100-80gb", "-tp", "8", "-dcp", "2", "--num-requests", "5"],
         "Error: --decode-context-parallel-size 2: decode context parallelism for GQA/MQA requires "
         "--tensor-parallel-size (8) to be greater than llama-3-70b's 8 KV heads (vLLM's check)"),
        (["run", "--model", "deepseek-v3", "--gpu", "h200", "-tp", "8", "-dcp", "8", "--allocator", "vattention",
          "--num-requests", "5"],
         "Error: --decode-context-parallel-size 8 shards vLLM's paged KV cache: it needs --allocator paged or "
         "paged-cow, got vattention"),
    ]
    for args, message in cases:
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines()[-1] == message
