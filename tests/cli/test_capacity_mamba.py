"""``kvsim capacity`` of a hybrid attention/Mamba model (`sim.commands.mamba_capacity`): vLLM 0.33's pool and
what a request holds in it; settings not checked against vLLM refused, naming the flag."""

import json

import pytest
from click.testing import CliRunner

from sim.cli import main


def run(*args: str):
    return CliRunner().invoke(main, ["capacity", "--model", "nemotron-h-8b", "--gpu", "h100-80gb", *args])


def test_json_figures():
    result = run("--kv-gib", "60", "--prompt-len", "1000", "--output-len", "41", "--json")
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert r["block_size"] == 1040 and r["kv_capacity_blocks"] == 3780  # vLLM's planner: data/mamba_pool.json
    assert r["mamba_pool"]["attention_groups"] == 1 and r["mamba_pool"]["mamba_groups"] == 6
    assert r["blocks_per_request"] == 1 + 6  # 1,040 tokens: one attention block, one state block per Mamba group
    assert r["max_concurrent_requests"] == 3779 // 7


def test_text_names_the_pool():
    result = run("--kv-gib", "60")
    assert result.exit_code == 0, result.output
    assert "attention block size 1040" in result.output
    assert "7 KV cache groups of 4 layers (1 attention, 6 Mamba): 3,780 blocks" in result.output
    assert "max concurrent requests: 269" in result.output


@pytest.mark.parametrize("flags, named", [
    (("--allocator", "contiguous-max"), "--allocator contiguous-max"),
    (("--allocator", "vattention"), "--allocator vattention"),
    (("--kv-cache-dtype", "fp8"), "--kv-cache-dtype fp8"),
    (("--disable-hybrid-kv-cache-manager",), "--disable-hybrid-kv-cache-manager"),
    (("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}'), "--speculative-config"),
])
def test_unchecked_settings_are_refused(flags, named):
    result = run("--kv-gib", "60", *flags)
    assert result.exit_code != 0
    assert named in result.output and "not modelled" in result.output


# vLLM 0.33's planner (tools/vllm_oracle/mamba_pool.py's `pool`, run with the switch it has no case for, in the
# oracle venv of docs/vllm-v1.md):
#   HF_HUB_OFFLINE=1 ~/vllm-venv/bin/python -c "import sys; sys.path.insert(0, 'tools/vllm_oracle'); import mamba_pool;
#   print([mamba_pool.pool(59748478730, 1, 1040, m)['num_blocks'] for m in (1040, 8192)])"   -> [3506, 3506]
# (mamba block size 1040: mamba_cache_mode 'align'; 8192, max_model_len: 'none'). Qwen3-Next on an H200 at -tp 2:
# tests/allocators/data/gdn_pool.json's qwen3_next_h200_tp2_align (576, 7,812 blocks) and _none (544, 8,272).
# Jamba-1.5-Mini on two H100s: data/mamba_pool.json's jamba_1_5_mini_tp2_align and _none (80, 37,520 blocks; its
# Mamba-1 layers export no prefill checkpoint, so 'align' adds no alignment).
MODES = [
    ("nemotron-h-8b", ("--gpu", "h100-80gb"), 59_748_478_730, {True: (1040, 3506, 250), False: (1040, 3506, 250)}),
    ("qwen3-next-80b-a3b", ("--gpu", "h200", "-tp", "2"), 2 * 55_297_829_079,
     {True: (576, 7812, 17), False: (544, 8272, 17)}),
    ("jamba-1.5-mini", ("--gpu", "h100-80gb", "-tp", "2"), 49_179_152_149,
     {True: (80, 37520, 11), False: (80, 37520, 11)}),
]


@pytest.mark.parametrize("model, where, kv_bytes, expected", MODES)
@pytest.mark.parametrize("flag, on", [(None, True), ("--enable-prefix-caching", True),
                                      ("--no-enable-prefix-caching", False), ("--no-prefix-caching", False)])
def test_prefix_caching_sizes_vllms_pool(model, where, kv_bytes, expected, flag, on):
    """Prefix caching on is vLLM's mamba_cache_mode 'align', whose block size is also a multiple of the layers'
    prefill checkpoint grid (gated DeltaNet on Hopper: 64, so 576 = 64 x 9 where 'none' has 544 = 16 x 34); a
    request of max_model_len holds as many blocks at rest in either mode."""
    args = ["capacity", "--model", model, *where, "--json"] + ([flag] if flag else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert r["kv_bytes"] == kv_bytes
    assert (r["block_size"], r["kv_capacity_blocks"], r["max_concurrent_requests"]) == expected[on]
    assert r["enable_prefix_caching"] is on and r["mamba_cache_mode"] == ("align" if on else "none")
    assert "ignored_settings" not in r


def test_text_says_which_mode_was_sized():
    on = CliRunner().invoke(main, ["capacity", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "-tp", "2"])
    assert "prefix caching on (vLLM's default): mamba_cache_mode 'align', the block size a multiple of 64" in on.output
    assert "attention block size 576" in on.output
    off = CliRunner().invoke(main, ["capacity", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "-tp", "2",
                                    "--no-enable-prefix-caching"])
    assert "prefix caching off (--no-enable-prefix-caching): vLLM's mamba_cache_mode 'none'" in off.output
    assert "attention block size 544" in off.output
    assert "prefix caching on (vLLM's default): mamba_cache_mode 'align'\n" in run("--kv-gib", "60").output


def test_gdn_without_compute_capability_needs_prefix_caching_off():
    """Prefix caching on, vLLM's GDN prefill kernel (and so the block size) follows the GPU; off, it does not."""
    args = ["capacity", "--model", "qwen3-next-80b-a3b", "--gpu", "cpu", "--kv-gib", "100", "-tp", "2"]
    on = CliRunner().invoke(main, args)
    assert on.exit_code != 0 and "compute capability" in on.output
    off = CliRunner().invoke(main, [*args, "--no-enable-prefix-caching", "--json"])
    assert off.exit_code == 0, off.output
    assert json.loads(off.stdout)["block_size"] == 544


def test_settings_a_mamba_pool_ignores_are_reported():
    """The notes `kvsim capacity` gives any other model: here a utilization under a given size, a placement and
    the token budget, which moves nothing once --kv-gib gives the memory."""
    result = run("--kv-gib", "60", "--gpu-memory-utilization", "0.5", "--placement", "first-fit",
                 "--max-num-batched-tokens", "8192", "--max-model-len", "9000", "--json")
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert set(r["ignored_settings"]) == {"--gpu-memory-utilization 0.5", "--placement first-fit",
                                          "--max-num-batched-tokens 8192"}
    assert "exceeds nemotron-h-8b's own context of 8,192 tokens" in r["beyond_model_context"]
    assert "Warning: paged: --max-num-batched-tokens 8192 ignored: --kv-gib gives the KV memory" in result.stderr
    assert r["kv_capacity_blocks"] == 3780


def test_decode_context_parallel_is_refused():
    result = run("--kv-gib", "60", "-tp", "16", "-dcp", "2")
    assert result.exit_code != 0
    assert "--decode-context-parallel-size 2: not modelled for nemotron-h-8b" in result.output


def test_jamba_does_not_fit_one_h100():
    """Jamba-1.5-Mini's 51.6e9 bf16 parameters are 96 GiB: more than one H100, as the refusal says."""
    result = CliRunner().invoke(main, ["capacity", "--model", "jamba-1.5-mini", "--gpu", "h100-80gb"])
    assert result.exit_code != 0
    assert "jamba-1.5-mini does not fit on 1 x h100-80gb: weights 96.1 GiB per GPU" in result.output


def test_jamba_text_names_its_mamba1_layers():
    result = CliRunner().invoke(main, ["capacity", "--model", "jamba-1.5-mini", "--gpu", "h100-80gb", "-tp", "2"])
    assert result.exit_code == 0, result.output
    assert "4 attention layers and 28 Mamba-1 layers" in result.output
    assert "8 KV cache groups of 4 layers (1 attention, 7 Mamba): 37,520 blocks" in result.output


NGRAM = '{"method": "ngram", "num_speculative_tokens": 2}'


def test_speculative_decoding_without_prefix_caching_counts_the_speculative_state_blocks():
    """vLLM's ``MambaSpec.num_speculative_blocks`` is num_speculative_tokens (``MambaBase.get_kv_cache_spec``) and
    ``MambaManager`` in mode 'none' gives a request 1 + that many state blocks per Mamba group: 1 + 6 x 3 at 1,040
    tokens where 1 + 6 without drafts; the pool itself (its blocks, its block size) does not change."""
    request = ("--kv-gib", "60", "--prompt-len", "1000", "--output-len", "41", "--no-enable-prefix-caching")
    plain = json.loads(run(*request, "--json").stdout)
    result = run(*request, "--speculative-config", NGRAM, "--json")
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    pool = (plain["block_size"], plain["kv_capacity_blocks"])
    assert (r["block_size"], r["kv_capacity_blocks"]) == pool == (1040, 3780)
    assert (plain["blocks_per_request"], plain["max_concurrent_requests"]) == (7, 539)
    assert (r["blocks_per_request"], r["max_concurrent_requests"], r["num_speculative_blocks"]) == (19, 3779 // 19, 2)
    text = run("--kv-gib", "60", "--no-enable-prefix-caching", "--speculative-config", NGRAM).output
    assert "1 + 2 speculative state blocks per Mamba group" in text


def test_speculative_decoding_with_prefix_caching_counts_the_speculative_state_blocks():
    """Prefix caching on (vLLM's default, ``mamba_cache_mode='align'``): a decoding request rests at its running
    state block and the k speculative ones after it in each Mamba group (``MambaManager.allocate_new_blocks``),
    as with prefix caching off: 8 + 6 x 3 blocks for 8,192 tokens at k = 2 on an H100's 3,506, 134 requests
    (vLLM's scheduler runs 134 such requests at once: tests/sim/test_sim_mamba_spec_parity.py)."""
    result = CliRunner().invoke(main, ["capacity", "--model", "nemotron-h-8b", "--gpu", "h100-80gb",
                                       "--speculative-config", NGRAM, "--json"])
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert r["mamba_cache_mode"] == "align" and r["num_speculative_blocks"] == 2
    assert (r["kv_capacity_blocks"], r["blocks_per_request"], r["max_concurrent_requests"]) == (3506, 26, 134)


@pytest.mark.parametrize("model, where, config, named", [
    # gated DeltaNet before Hopper with prefix caching on: no prefill checkpoint, not checked against vLLM
    ("qwen3-next-80b-a3b", ("--gpu", "a100-80gb", "-tp", "4"), NGRAM, "mamba_cache_mode 'align'"),
    ("qwen3-next-80b-a3b", ("--gpu", "a100-80gb", "-tp", "4"), '{"method": "mtp", "num_speculative_tokens": 1}',
     "mamba_cache_mode 'align'"),
    # a model-based drafter on Mamba-2 layers: its groups not checked against vLLM's planner
    ("nemotron-h-8b", ("--gpu", "h100-80gb", "--no-enable-prefix-caching"),
     '{"method": "mtp", "num_speculative_tokens": 1}', "method 'mtp'"),
    ("qwen3-next-80b-a3b", ("--gpu", "h200", "-tp", "2", "--no-enable-prefix-caching"),
     '{"method": "eagle", "model": "d", "num_speculative_tokens": 2}', "method 'eagle'"),
    ("nemotron-h-8b", ("--gpu", "h100-80gb", "--no-enable-prefix-caching"),
     '{"method": "eagle", "model": "d", "num_speculative_tokens": 2}', "method 'eagle'"),
    ("jamba-1.5-mini", ("--gpu", "h100-80gb", "-tp", "2", "--no-enable-prefix-caching"), NGRAM, "Mamba-1"),
])
def test_speculative_decoding_not_modelled_is_refused_with_the_reason(model, where, config, named):
    result = CliRunner().invoke(main, ["capacity", "--model", model, *where, "--speculative-config", config])
    assert result.exit_code != 0
    assert "--speculative-config" in result.output and named in result.output and "not modelled" in result.output


MTP = '{"method": "mtp", "num_speculative_tokens": 2}'


@pytest.mark.parametrize("flags, expected", [
    # tests/allocators/data/gdn_pool.json's qwen3_next_h200_tp2_align_mtp_2 and _none_mtp_2 (vLLM's planner)
    ((), (576, 6996, 465, 15, "align")), (("--no-enable-prefix-caching",), (544, 7408, 491, 15, "none"))])
def test_qwen3_next_mtp_sizes_vllms_pool_with_the_drafter_layer(flags, expected):
    """Qwen3-Next's MTP layer is a full-attention layer of the target's spec in the attention group: 13 layers,
    groups of 13 (each Mamba group 12 gated DeltaNet layers and a padding layer), a block 13 pages, and the
    drafter's weights out of the memory: 6,996 blocks where 7,812 without it (prefix caching on), 7,408 where 8,272
    (off), as vLLM 0.33's planner makes them. A request of max_model_len holds its 262,144 tokens' attention
    blocks and 1 + 2 state blocks in each of the 3 Mamba groups."""
    result = CliRunner().invoke(main, ["capacity", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "-tp", "2",
                                       "--speculative-config", MTP, "--json", *flags])
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    pool = r["mamba_pool"]
    assert (r["block_size"], r["kv_capacity_blocks"], r["blocks_per_request"], r["max_concurrent_requests"],
            r["mamba_cache_mode"]) == expected
    assert (pool["group_size"], pool["attention_groups"], pool["mamba_groups"], r["drafter_layers"]) == (13, 1, 3, 1)
    assert r["kv_bytes"] // 2 == 53_650_911_132 and r["num_speculative_blocks"] == 2
    text = CliRunner().invoke(main, ["capacity", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "-tp", "2",
                                     "--speculative-config", MTP, *flags]).output
    assert "and the MTP drafter's 1 attention layer (in the attention group)" in text
    assert f"4 KV cache groups of 13 layers (1 attention, 3 Mamba): {expected[1]:,} blocks" in text
