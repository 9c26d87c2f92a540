"""The "what a token costs" tables (notebook 07, docs/token-cost.md): bytes per token per group and dtype,
and requests per GPU with sliding windows freed or not, checked by hand from the config values."""

import pytest

from allocators.catalog import get_model
from sim.plots.token_cost import plot_token_cost
from sim.token_cost import SHAREGPT_MEAN_TOKENS, requests_per_gpu_table, token_cost_table


def test_bytes_per_token_per_group_and_dtype():
    t = token_cost_table(["gemma-3-12b", "deepseek-v3"], ["bf16", "fp8"]).set_index(["model", "kv_cache_dtype",
                                                                                         "group"])
    assert t.loc[("gemma-3-12b", "bf16", "sliding_window"), "bytes_per_token"] == 40 * 2 * 8 * 256 * 2
    assert t.loc[("gemma-3-12b", "fp8", "full"), "bytes_per_token"] == 8 * 2 * 8 * 256
    assert t.loc[("gemma-3-12b", "fp8", "full"), "model_bytes_per_token"] == 48 * 2 * 8 * 256
    assert t.loc[("deepseek-v3", "bf16", "mla"), "bytes_per_token"] == 61 * 576 * 2
    assert t.loc[("gemma-3-12b", "bf16", "sliding_window"), "window"] == 1024


def test_sharegpt_request_is_the_paper_means():
    assert SHAREGPT_MEAN_TOKENS == 499  # 161.31 prompt + 337.99 output tokens


def test_requests_per_gpu_by_hand():
    r = requests_per_gpu_table(["gpt-oss-20b", "llama-3.1-8b", "deepseek-v3"], ["bf16", "fp8"], tokens=499)
    r = r.set_index(["model", "kv_cache_dtype"])
    kv = r.loc[("gpt-oss-20b", "bf16"), "kv_bytes"]
    # 12 window layers hold 128 tokens, 12 full layers all 499; 24,576 bytes per token per group
    assert r.loc[("gpt-oss-20b", "bf16"), "requests"] == kv // (24576 * 128 + 24576 * 499)
    assert r.loc[("gpt-oss-20b", "bf16"), "requests_all_full"] == kv // (49152 * 499)
    assert r.loc[("gpt-oss-20b", "fp8"), "requests"] == kv // (12288 * 128 + 12288 * 499)
    llama = r.loc[("llama-3.1-8b", "bf16")]
    assert llama["requests"] == llama["requests_all_full"] == llama["kv_bytes"] // (131072 * 499)
    ds = r.loc[("deepseek-v3", "bf16")]  # 16 GPUs, each with the whole latent of every token
    assert ds["tensor_parallel"] == 16 and ds["requests"] == ds["kv_bytes"] // (16 * 70272 * 499)
    assert ds["requests_per_gpu"] == pytest.approx(ds["requests"] / 16)


def test_long_requests_gain_from_gemma_windows():
    r = requests_per_gpu_table(["gemma-3-12b"], ["bf16"], tokens=8192).iloc[0]
    kv = r["kv_bytes"]
    assert r["requests"] == kv // (327680 * 1024 + 65536 * 8192)
    assert r["requests_all_full"] == kv // (393216 * 8192) and r["requests"] > 3 * r["requests_all_full"]
    assert get_model("gemma-3-12b").kv_bytes_per_token == 393216


def test_plot_has_both_panels():
    fig = plot_token_cost(token_cost_table(), requests_per_gpu_table())
    left, right = fig.axes
    assert "What a token costs" in left.get_title() and right.get_yscale() == "log"
    assert [t.get_text() for t in left.get_xticklabels()][0] == "llama-3.1-8b"
    with pytest.raises(ValueError):
        plot_token_cost(token_cost_table().drop(columns="attention"), requests_per_gpu_table())


def test_tensor_parallel_follows_the_catalog_name_in_any_case():
    upper = requests_per_gpu_table(["DeepSeek-V3"], ["bf16"]).iloc[0]
    lower = requests_per_gpu_table(["deepseek-v3"], ["bf16"]).iloc[0]
    assert upper["tensor_parallel"] == lower["tensor_parallel"] == 16
    assert upper["requests"] == lower["requests"]


def test_a_lone_model_or_dtype_is_a_list_of_one():
    r = requests_per_gpu_table("llama-3.1-8b", "fp8")
    assert r[["model", "kv_cache_dtype"]].values.tolist() == [["llama-3.1-8b", "fp8"]]
    t = token_cost_table("gemma-3-12b", "bf16")
    assert set(t["model"]) == {"gemma-3-12b"} and set(t["kv_cache_dtype"]) == {"bf16"}


@pytest.mark.parametrize("tokens", [0, -100, 100.5, True, "499"])
def test_request_tokens_must_be_a_positive_whole_number(tokens):
    with pytest.raises(ValueError, match=f"requests_per_gpu_table: tokens must be a whole number of tokens >= 1, "
                                         f"got {tokens!r}"):
        requests_per_gpu_table(["llama-3.1-8b"], ["bf16"], tokens=tokens)
