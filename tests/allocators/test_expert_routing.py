"""A mixture of experts' routed weights: the expected share of experts a step's tokens touch, the per-expert
size derived from the catalog's parameter counts (checked against the published configs), the split of the
weight bytes, and the catalog-file fields that declare them."""

from dataclasses import replace
from itertools import combinations, product

import pytest

from allocators import roofline
from allocators.catalog import GIB, MODELS, get_model
from allocators.catalog_file import load_catalog_file
from allocators.expert_routing import distinct_expert_fraction


@pytest.mark.parametrize("experts, per_tok, tokens, share", [
    (32, 4, 1, 4 / 32),  # gpt-oss-20b at batch 1: an eighth of its experts
    (256, 8, 1, 8 / 256),  # DeepSeek-V3 at batch 1
    (256, 8, 30, 1 - (31 / 32) ** 30),  # ~61%
    (32, 4, 0, 0.0),  # no tokens, no experts
])
def test_the_distinct_share_of_experts(experts, per_tok, tokens, share):
    assert distinct_expert_fraction(experts, per_tok, tokens) == pytest.approx(share, rel=1e-12)
    if tokens == 30:
        assert 0.61 < share < 0.62


@pytest.mark.parametrize("experts, per_tok, tokens", [(4, 2, 2), (5, 2, 3), (6, 3, 2), (4, 1, 4)])
def test_the_share_is_the_mean_over_every_uniform_routing(experts, per_tok, tokens):
    """Each token picks ``per_tok`` distinct experts, every choice equally likely: the mean count of distinct
    experts over all routings, enumerated, is ``E x`` the share."""
    choices = list(combinations(range(experts), per_tok))
    routings = list(product(choices, repeat=tokens))
    mean = sum(len(set().union(*routing)) for routing in routings) / len(routings)
    assert mean == pytest.approx(experts * distinct_expert_fraction(experts, per_tok, tokens), rel=1e-12)


def test_the_share_grows_with_the_tokens_to_all_experts():
    shares = [distinct_expert_fraction(256, 8, t) for t in (1, 2, 8, 30, 256, 4096)]
    assert shares == sorted(shares) and shares[-1] == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("name, per_expert_per_layer, moe_layers, rel", [
    ("deepseek-v3", 3 * 7168 * 2048, 58, 0.002),  # moe_intermediate_size 2048; 61 layers, first 3 dense
    # gate_up_proj 2880 x 2 x 2880 and down_proj 2880 x 2880 with their biases; the card's active count leaves
    # the 0.58e9-parameter input embedding out, which the derivation spreads over the 28 inactive experts
    ("gpt-oss-20b", 3 * 2880 * 2880 + 3 * 2880, 24, 0.035),
    ("gpt-oss-120b", 3 * 2880 * 2880 + 3 * 2880, 36, 0.006),
    # an expert's SwiGLU of intermediate_size 8192: Scout routes in every layer, Maverick in every second
    # (interleave_moe_layer_step 2); Scout's card rounds its counts to 109B and 17B
    ("llama-4-scout-17b-16e", 3 * 5120 * 8192, 48, 0.02),
    ("llama-4-maverick-17b-128e", 3 * 5120 * 8192, 24, 0.002),
    # Qwen3's MoE: every layer routes, an expert a SwiGLU of moe_intermediate_size; the counts are the config's sums
    ("qwen3-30b-a3b", 3 * 2048 * 768, 48, 1e-12),
    ("qwen3-235b-a22b", 3 * 4096 * 1536, 94, 1e-12),
])
def test_expert_size_from_the_parameter_counts_matches_the_config(name, per_expert_per_layer, moe_layers, rel):
    assert get_model(name).expert_params == pytest.approx(moe_layers * per_expert_per_layer, rel=rel)


def test_gpt_oss_splits_its_checkpoint_into_mxfp4_experts_and_the_rest():
    """32 experts of (20.91e9 - 3.61e9) / 28 parameters at 4.25 bits; the rest of the 12.8 GiB is read by
    every step. Memory still holds all of it."""
    m = get_model("gpt-oss-20b")
    assert m.weight_bytes == 12.8 * GIB
    assert m.routed_expert_bytes == pytest.approx(32 * (20.91e9 - 3.61e9) / 28 * 4.25 / 8, rel=1e-12)
    fixed, routed = roofline.step_weight_split(m)
    assert fixed + routed == pytest.approx(m.weight_bytes, rel=1e-12)
    assert roofline.step_weight_bytes(m, 1) == pytest.approx(fixed + routed * 4 / 32, rel=1e-12)
    assert roofline.step_weight_bytes(m, 10_000) == pytest.approx(m.weight_bytes, rel=1e-12)


def test_an_override_dtype_splits_at_that_dtype():
    m = get_model("deepseek-v3")
    fixed, routed = roofline.step_weight_split(m, 2)
    assert routed == m.num_experts * m.expert_params * 2 and fixed + routed == pytest.approx(m.num_params * 2)


@pytest.mark.parametrize("name", [n for n, m in MODELS.items() if not m.num_experts])
def test_dense_models_read_all_their_weights_every_step(name):
    m = get_model(name)
    assert m.expert_params == 0.0 and m.routed_expert_bytes == 0.0
    for tokens in (0, 1, 7, 4096):
        assert roofline.step_weight_bytes(m, tokens) == roofline.weight_bytes(m)
    assert roofline.step_weight_bytes(m, 3, 4) == roofline.weight_bytes(m, 4)


MOE = ("[models.mymoe]\nnum_layers = 24\nhidden_size = 2880\nnum_heads = 64\nnum_kv_heads = 8\nhead_dim = 64\n"
       "num_params = 20.91e9\nactive_params = 3.61e9\nmax_seq_len = 131072\nintermediate_size = 2880\n"
       "vocab_size = 201088\nweights_gib = 12.8\n")


def test_a_catalog_file_declares_the_experts(tmp_path):
    path = tmp_path / "moe.toml"
    path.write_text(MOE + "num_experts = 32\nnum_experts_per_tok = 4\nexpert_weight_bits = 4.25\n")
    models, _ = load_catalog_file(path)
    builtin = get_model("gpt-oss-20b")
    assert models["mymoe"].routed_expert_bytes == builtin.routed_expert_bytes
    path.write_text(MOE)  # no experts given: the whole checkpoint every step, as before
    assert roofline.step_weight_bytes(load_catalog_file(path)[0]["mymoe"], 1) == 12.8 * GIB


@pytest.mark.parametrize("extra, message", [
    ("num_experts = 32\n", "model 'mymoe': num_experts_per_tok must be a positive integer, got 0"),
    ("num_experts_per_tok = 4\n", "model 'mymoe': num_experts must be a positive integer, got 0"),
    ("num_experts = 4\nnum_experts_per_tok = 4\n", "num_experts_per_tok (4) must be less than num_experts (4)"),
    ("num_experts = 32\nnum_experts_per_tok = 4\nexpert_weight_bits = 0\n",
     "model 'mymoe': expert_weight_bits must be a positive number, got 0"),
    ("num_experts = 32\nnum_experts_per_tok = 4\nexpert_weight_bits = 64\n", "the routed experts' "),
])
def test_bad_expert_fields_name_the_file_and_field(tmp_path, extra, message):
    path = tmp_path / "moe.toml"
    path.write_text(MOE + extra)
    with pytest.raises(ValueError, match="moe.toml") as err:
        load_catalog_file(path)
    assert message in str(err.value)


def test_experts_need_the_active_count():
    with pytest.raises(ValueError, match="num_experts needs active_params below num_params"):
        replace(get_model("llama-3-8b"), num_experts=8, num_experts_per_tok=2)
