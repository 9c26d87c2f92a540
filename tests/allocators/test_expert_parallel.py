"""Data and expert parallelism in the KV capacity: a mixture of experts' routed experts split over every
data-parallel rank's GPUs (vLLM's MoE group of DP x TP GPUs), whole experts under expert parallelism, the rest
each rank's own; DeepSeek-V3 on 8 x H200 at TP=8 against DP=8 with EP; refusals."""

import math

import pytest

from allocators.capacity import kv_capacity, pool_bytes_per_token
from allocators.catalog import GIB, get_gpu, get_model, per_gpu_share
from allocators.expert_parallel import routed_divisor, weight_bytes_per_gpu

DSV3, H200 = get_model("deepseek-v3"), get_gpu("h200")


def test_one_rank_is_todays_accounting_bit_for_bit():
    """No data parallelism, and expert parallelism over GPUs that divide the experts evenly: the weights per GPU
    are `ModelSpec.weight_bytes_per_gpu`'s, exactly, and so is the pool."""
    for tp in (1, 8, 16):
        for ep in (False, True):
            assert weight_bytes_per_gpu(DSV3, tp, 1, ep) == DSV3.weight_bytes_per_gpu(tp)
    before = kv_capacity(DSV3, H200, tensor_parallel=8)
    for ep in (False, True):
        assert kv_capacity(DSV3, H200, tensor_parallel=8, expert_parallel=ep).kv_tokens == before.kv_tokens


def test_data_parallel_splits_the_routed_experts_over_every_gpu():
    """DP=8 x TP=1: each GPU holds everything but the routed experts (its rank's own, TP=1: whole, replicated
    layers included) and one eighth of the routed experts, with or without expert parallelism (256 experts, 32
    whole ones per GPU, or an eighth of each)."""
    routed = DSV3.routed_expert_bytes
    expected = (DSV3.weight_bytes - routed) + routed / 8
    for ep in (False, True):
        assert weight_bytes_per_gpu(DSV3, 1, 8, ep) == pytest.approx(expected, rel=1e-12)
    # DP=4 x TP=2: the rest split over the rank's two GPUs (the replicated layers whole), experts over eight
    rest = per_gpu_share(DSV3.weight_bytes - routed, DSV3.replicated_weight_bytes, 2)
    assert weight_bytes_per_gpu(DSV3, 2, 4, True) == pytest.approx(rest + routed / 8, rel=1e-12)


def test_expert_parallel_holds_whole_experts_so_an_uneven_split_costs_the_fullest_gpu():
    """gpt-oss-20b's 32 experts over 3 GPUs: expert parallelism puts 11 whole experts on the fullest (vLLM's
    determine_expert_map: 11, 11, 10), where the split of every expert gives each a third."""
    oss = get_model("gpt-oss-20b")
    assert routed_divisor(oss, 1, 3, False) == 3
    assert routed_divisor(oss, 1, 3, True) == 32 / 11
    gap = weight_bytes_per_gpu(oss, 1, 3, True) - weight_bytes_per_gpu(oss, 1, 3, False)
    assert gap == pytest.approx(oss.routed_expert_bytes * (11 / 32 - 1 / 3), rel=1e-9)
    a100 = get_gpu("a100-80gb")
    assert (kv_capacity(oss, a100, data_parallel=3, expert_parallel=True).kv_tokens
            < kv_capacity(oss, a100, data_parallel=3).kv_tokens)


def test_deepseek_v3_on_eight_h200s_tp8_against_dp8_with_ep():
    """TP=8 keeps the whole MLA latent on every GPU, so its 8 GPUs hold one pool of 708,857 tokens (88,607 per
    GPU); DP=8 with EP gives each GPU its own pool of 488,290 tokens (a GPU holds 93.4 GiB of weights against
    79.3), 3,906,320 in all: 5.5 times the tokens."""
    tp8 = kv_capacity(DSV3, H200, tensor_parallel=8)
    dp8 = kv_capacity(DSV3, H200, data_parallel=8, expert_parallel=True)
    assert (tp8.kv_tokens, dp8.kv_tokens) == (708_857, 488_290)
    assert (dp8.data_parallel, dp8.expert_parallel, dp8.tensor_parallel) == (8, True, 1)
    assert tp8.weight_bytes_per_gpu / GIB == pytest.approx(79.29, abs=0.01)
    assert dp8.weight_bytes_per_gpu / GIB == pytest.approx(93.44, abs=0.01)
    assert pool_bytes_per_token(tp8.model, 8) == 8 * pool_bytes_per_token(dp8.model, 1)  # the latent on each GPU
    assert 8 * dp8.kv_tokens == 3_906_320 and math.isclose(8 * dp8.kv_tokens / tp8.kv_tokens, 5.51, abs_tol=0.01)


def test_a_dense_model_is_refused_expert_parallelism_and_replicates_under_data_parallelism():
    llama = get_model("llama-3-8b")
    with pytest.raises(ValueError, match="--enable-expert-parallel .* llama-3-8b is a dense model"):
        kv_capacity(llama, H200, expert_parallel=True)
    assert (kv_capacity(llama, H200, data_parallel=4).kv_tokens == kv_capacity(llama, H200).kv_tokens)
    with pytest.raises(ValueError, match="--data-parallel-size must be >= 1"):
        kv_capacity(llama, H200, data_parallel=0)


def test_a_rank_that_does_not_fit_says_so_and_names_data_parallelism():
    with pytest.raises(ValueError, match=r"does not fit on 1 x h100-80gb per data-parallel rank \(of 8\).*"
                                         r"--data-parallel-size"):
        kv_capacity(DSV3, get_gpu("h100-80gb"), data_parallel=8, expert_parallel=True)
