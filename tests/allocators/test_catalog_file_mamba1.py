"""A Mamba-1 hybrid (Jamba) in a ``--catalog`` file: ``attention_layers`` and a ``[models.NAME.mamba1]`` table under
Jamba's config.json names describe AI21-Jamba-1.5-Mini exactly as the built-in entry does (``mamba_expand`` times the
model's ``hidden_size``, as vLLM builds the mixer), and every bad value is one line naming the file, table and
field."""

from dataclasses import replace

import pytest

from allocators.catalog import get_model
from allocators.catalog_file import load_catalog_file

JAMBA = get_model("jamba-1.5-mini")

MODEL = {"num_layers": "32", "hidden_size": "4096", "num_heads": "32", "num_kv_heads": "8", "head_dim": "128",
         "num_params": "51_570_323_328", "max_seq_len": "262144", "intermediate_size": "14336",
         "vocab_size": "65536", "active_params": "12_110_311_296", "num_experts": "16", "num_experts_per_tok": "2",
         "attention_layers": "4"}
MAMBA1 = {"layers": "28", "mamba_expand": "2", "mamba_d_state": "16", "mamba_d_conv": "4",
          "mamba_ssm_cache_dtype": '"auto"'}
LAYER_TYPES = ["attention" if i % 8 == 4 else "mamba" for i in range(32)]
"""transformers' ``JambaConfig.layer_types`` before its renaming: attention where ``i % 8 == 4``."""


def jamba_toml(name: str = "my-jamba", model: dict | None = None, mamba1: dict | None = None) -> str:
    """AI21-Jamba-1.5-Mini as a user writes it from its config.json, ``model`` and ``mamba1`` changing fields
    (None: the line left out)."""
    def lines(fields: dict) -> str:
        return "".join(f"{k} = {v}\n" for k, v in fields.items() if v is not None)
    return f"[models.{name}]\n{lines(MODEL | (model or {}))}[models.{name}.mamba1]\n{lines(MAMBA1 | (mamba1 or {}))}"


def load(tmp_path, text: str):
    path = tmp_path / "cat.toml"
    path.write_text(text)
    return load_catalog_file(path)


def test_a_toml_jamba_is_the_built_in_entry(tmp_path):
    model = load(tmp_path, jamba_toml())[0]["my-jamba"]
    assert model.mamba.intermediate_size == 2 * 4096
    assert replace(model, name=JAMBA.name, source=JAMBA.source) == JAMBA


def test_mamba_expand_multiplies_the_models_hidden_size(tmp_path):
    """vLLM's JambaMambaDecoderLayer: ``intermediate_size = mamba_expand x hidden_size``."""
    model = load(tmp_path, jamba_toml(mamba1={"mamba_expand": "3"}))[0]["my-jamba"]
    assert model.mamba.intermediate_size == 3 * 4096
    assert model.mamba.state_bytes(2) == 3 * 4096 * (3 + 16) * 2


@pytest.mark.parametrize(("types", "first"), [
    (LAYER_TYPES, True), (["attention"] + LAYER_TYPES[:4] + LAYER_TYPES[5:], False),
    (["linear_attention" if t == "mamba" else "full_attention" for t in LAYER_TYPES], True)])
def test_layer_types_order_the_groups(tmp_path, types, first):
    """Layer 0 a Mamba layer: the Mamba-1 groups first (Jamba's, and without layer_types); an attention layer
    first: after it. transformers' renamed kinds read the same."""
    text = "[" + ", ".join(f'"{t}"' for t in types) + "]"
    model = load(tmp_path, jamba_toml(mamba1={"layer_types": text}))[0]["my-jamba"]
    assert model.mamba.groups_first is first


ENTRY = r"\[models.m.mamba1\]"


@pytest.mark.parametrize("change, message", [
    (dict(mamba1={"mamba_expand": "0"}), ENTRY + ": mamba_expand must be a positive integer, got 0"),
    (dict(mamba1={"mamba_d_conv": "1"}), ENTRY + ": Mamba-1 conv_kernel must be at least 2"),
    (dict(mamba1={"mamba_ssm_cache_dtype": None}), ENTRY + r": missing field\(s\) mamba_ssm_cache_dtype \(vLLM "
                                                   "0.33 keeps --mamba-ssm-cache-dtype auto"),
    (dict(mamba1={"mamba_d_head": "64"}), ENTRY + r": unknown field\(s\) mamba_d_head; known: layers, "
                                          "mamba_expand, mamba_d_state, mamba_d_conv, mamba_ssm_cache_dtype, "
                                          "layer_types"),
    (dict(mamba1={"layer_types": '["mamba", "attention"]'}), ENTRY + ": layer_types has 1 'mamba' or "
                                                             "'linear_attention' layers but layers = 28"),
    (dict(model={"hidden_size": None}), r"\[models.m\]: hidden_size must be a positive integer, got None"),
    (dict(model={"attention_layers": "5"}), r"model 'm': attention_layers \(5\) \+ mamba layers \(28\) exceed "
                                            r"num_layers \(32\)"),
])
def test_bad_mamba1_fields_name_file_table_and_field(tmp_path, change, message):
    with pytest.raises(ValueError, match=r"^.*cat.toml: " + message):
        load(tmp_path, jamba_toml("m", **change))


def test_mamba_and_mamba1_tables_together_are_refused(tmp_path):
    text = jamba_toml("m") + "[models.m.mamba]\nlayers = 28\n"
    with pytest.raises(ValueError, match=r"cat.toml: \[models.m\]: give one of \[models.m.mamba\] \(Mamba-2\) and "
                                         r"\[models.m.mamba1\] \(Mamba-1\), not both"):
        load(tmp_path, text)
