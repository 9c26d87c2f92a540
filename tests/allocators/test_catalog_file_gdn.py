"""A gated DeltaNet hybrid in a ``--catalog`` file (`allocators.catalog_file`): ``attention_layers`` and a
``[models.NAME.gdn]`` table under Qwen3-Next's config.json names describe Qwen3-Next-80B-A3B exactly as the built-in
entry does, and every bad value is one line naming the file, the model's table and the field."""

from dataclasses import replace

import pytest

from allocators.catalog import get_model
from allocators.catalog_file import load_catalog_file
from tests.allocators.test_catalog_file_mamba import MAMBA, _table

QWEN3_NEXT = get_model("qwen3-next-80b-a3b")

MODEL = ("num_layers = 48\nhidden_size = 2048\nnum_heads = 16\nnum_kv_heads = 2\nhead_dim = 256\n"
         "num_params = 79_674_391_296\nmax_seq_len = 262144\nintermediate_size = 512\nvocab_size = 151936\n"
         "active_params = 3_874_929_408\nnum_experts = 512\nnum_experts_per_tok = 10\nattention_layers = 12\n"
         "num_nextn_predict_layers = 1\n")  # its one MTP layer
GDN = ('layers = 36\nlinear_num_key_heads = 16\nlinear_num_value_heads = 32\nlinear_key_head_dim = 128\n'
       'linear_value_head_dim = 128\nlinear_conv_kernel_dim = 4\nmamba_ssm_cache_dtype = "auto"\n')


def qwen_toml(name: str = "my-qwen3-next", model: dict | None = None, gdn: dict | None = None) -> str:
    """Qwen3-Next-80B-A3B as a user writes it from its config.json, ``model`` and ``gdn`` changing fields."""
    return f"[models.{name}]\n{_table(MODEL, model or {})}[models.{name}.gdn]\n{_table(GDN, gdn or {})}"


def load(tmp_path, text: str):
    path = tmp_path / "cat.toml"
    path.write_text(text)
    return load_catalog_file(path)


def test_a_toml_qwen3_next_is_the_built_in_entry(tmp_path):
    models, _ = load(tmp_path, qwen_toml())
    assert replace(models["my-qwen3-next"], name=QWEN3_NEXT.name, source=QWEN3_NEXT.source) == QWEN3_NEXT


LAYER_TYPES = [("full_attention" if (i + 1) % 4 == 0 else "linear_attention") for i in range(48)]
"""Qwen3-Next's layer_types (every 4th layer full attention)."""


@pytest.mark.parametrize(("layer_types", "first"), [(None, True), (LAYER_TYPES, True), (LAYER_TYPES[::-1], False)])
def test_layer_types_order_the_groups(tmp_path, layer_types, first):
    """vLLM lists the gated DeltaNet KV cache groups first iff layer 0 is one (Qwen3-Next's; reversed, layer 0 is a
    full-attention layer and they come after it); no layer_types: first."""
    text = None if layer_types is None else "[" + ", ".join(f'"{t}"' for t in layer_types) + "]"
    model = load(tmp_path, qwen_toml(gdn=dict(layer_types=text)))[0]["my-qwen3-next"]
    assert model.mamba.groups_first is first
    if first:
        assert replace(model, name=QWEN3_NEXT.name, source=QWEN3_NEXT.source) == QWEN3_NEXT


@pytest.mark.parametrize("gdn, message", [
    (dict(layer_types='["linear_attention", "full_attention"]'), r"\[models.m.gdn\]: layer_types has 1 "
                                                                  r"'linear_attention' layers but layers = 36"),
    (dict(layer_types='"linear_attention"'), r"\[models.m.gdn\]: layer_types must be config.json's list of strings"),
    (dict(linear_num_value_heads="0"), r"\[models.m.gdn\].*linear_num_value_heads must be a positive integer"),
    (dict(linear_key_head_dim="1.5"), r"\[models.m.gdn\].*linear_key_head_dim must be a positive integer"),
    (dict(linear_conv_kernel_dim="1"), r"\[models.m.gdn\]: gated DeltaNet conv_kernel must be at least 2"),
    (dict(mamba_ssm_cache_dtype='"fp8"'), r"\[models.m.gdn\]: mamba_ssm_cache_dtype must be one of"),
    (dict(mamba_ssm_cache_dtype=None), r"\[models.m.gdn\]: missing field\(s\) mamba_ssm_cache_dtype \(vLLM 0.33 "
                                       r"keeps --mamba-ssm-cache-dtype auto"),
    (dict(linear_num_heads="16"), r"\[models.m.gdn\]: unknown field\(s\) linear_num_heads; known: layers, "),
])
def test_bad_gdn_fields_name_file_model_and_field(tmp_path, gdn, message):
    with pytest.raises(ValueError, match=r"^.*cat.toml: " + message):
        load(tmp_path, qwen_toml("m", gdn=gdn))


def test_a_gdn_value_that_is_not_a_table(tmp_path):
    with pytest.raises(ValueError, match=r"cat.toml: \[models.m.gdn\]: gdn must be a table \[models.m.gdn\] of the "
                                         "gated DeltaNet layers' fields"):
        load(tmp_path, f"[models.m]\n{MODEL}gdn = 3\n")


def test_mamba_and_gdn_tables_together_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"cat.toml: \[models.m\]: give one of \[models.m.mamba\] \(Mamba-2\) and "
                                         r"\[models.m.gdn\]"):
        load(tmp_path, qwen_toml("m") + f"[models.m.mamba]\n{MAMBA}")


def test_too_many_gdn_layers_name_the_model(tmp_path):
    with pytest.raises(ValueError, match=r"cat.toml: model 'm': attention_layers \(12\) \+ mamba layers \(40\) exceed"):
        load(tmp_path, qwen_toml("m", gdn=dict(layers="40")))
