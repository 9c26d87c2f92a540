"""A speculative drafter's KV layers in every block (vLLM's drafter layers join the target's KV cache group:
``kv_cache_planning.get_kv_cache_config_from_groups``), and its weights out of the memory."""

import pytest

from allocators.capacity import drafter_weight_bytes, kv_capacity, pool_bytes_per_token
from allocators.catalog import get_gpu, get_model
from sim.kernel.spec_decode import drafter_layers


def test_an_eagle_layer_adds_one_layer_of_the_targets_layout():
    llama = get_model("llama-2-7b")
    assert pool_bytes_per_token(llama) == 2 * 32 * 32 * 128 * 2
    assert pool_bytes_per_token(llama, drafter_layers=1) == 2 * 33 * 32 * 128 * 2
    ds = get_model("deepseek-v3")  # MLA: the latent and rope dims on every GPU, one more layer
    assert pool_bytes_per_token(ds, 8, drafter_layers=1) * 61 == pool_bytes_per_token(ds, 8) * 62


def test_a_given_pool_holds_fewer_slots_with_the_drafter():
    """--kv-gib: the same bytes over 33 layers instead of 32."""
    llama = get_model("llama-2-7b")
    plain = kv_capacity(llama, kv_gib=10)
    eagle = kv_capacity(llama, kv_gib=10, drafter_layers=1)
    assert plain.kv_tokens == 10 * 2**30 // 524288
    assert eagle.kv_tokens == 10 * 2**30 // 540672
    assert kv_capacity(llama, kv_tokens=1000, drafter_layers=1).kv_tokens == 1000  # slots asked for are slots


def test_the_derived_pool_loses_the_drafters_kv_and_weights():
    """Llama-2-7B on an H100: 119,398 slots; with EAGLE the memory left after the drafter's weights (one average
    layer, (13.48e9 - 2 x 32000 x 4096 x 2) / 32 bytes) over 33 layers a slot."""
    llama, h100 = get_model("llama-2-7b"), get_gpu("h100-80gb")
    plain = kv_capacity(llama, h100)
    eagle = kv_capacity(llama, h100, drafter_layers=1)
    assert plain.kv_tokens == 119_398
    weights = drafter_weight_bytes(llama, 1)
    assert weights == pytest.approx((6.74e9 * 2 - 2 * 32000 * 4096 * 2) / 32)
    assert eagle.weight_bytes_per_gpu == pytest.approx(plain.weight_bytes_per_gpu + weights)
    assert eagle.kv_tokens == int(plain.kv_bytes - weights) // 540672 == 115_031
    assert eagle.drafter_layers == 1


def test_drafter_layers_by_method():
    llama, ds = get_model("llama-2-7b"), get_model("deepseek-v3")
    assert drafter_layers(None, llama) == drafter_layers("ngram", llama) == 0
    assert drafter_layers("eagle", llama) == drafter_layers("eagle3", llama) == 1
    assert drafter_layers("mtp", ds) == ds.num_nextn_predict_layers == 1
    with pytest.raises(ValueError, match="'llama-2-7b' gives no num_nextn_predict_layers"):
        drafter_layers("mtp", llama)


def test_drafters_outside_the_targets_kv_groups_are_refused():
    """EAGLE's GQA layer beside an MLA model would be a group of its own; beside a sliding-window model's groups
    it joins the full layers (`allocators.capacity.with_drafter_layers`)."""
    with pytest.raises(ValueError, match="an MLA model"):
        drafter_layers("eagle3", get_model("deepseek-v3"))
    assert drafter_layers("eagle", get_model("gpt-oss-20b")) == 1
