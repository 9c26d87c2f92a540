"""A hybrid Mamba-2 model in a ``--catalog`` file (`allocators.catalog_file`): ``attention_layers`` and a
``[models.NAME.mamba]`` table under config.json's names describe Nemotron-H-8B exactly as the built-in entry
does, and every bad value is one line naming the file, the model's table and the field."""

from dataclasses import replace

import pytest

from allocators.catalog import get_model
from allocators.catalog_file import load_catalog_file

NEMOTRON = get_model("nemotron-h-8b")

MODEL = ("num_layers = 52\nhidden_size = 4096\nnum_heads = 32\nnum_kv_heads = 8\nhead_dim = 128\n"
         "num_params = 8_100_852_736\nmax_seq_len = 8192\nintermediate_size = 21504\nvocab_size = 131072\n"
         "attention_layers = 4\n")
MAMBA = ('layers = 24\nmamba_num_heads = 128\nmamba_head_dim = 64\nssm_state_size = 128\nn_groups = 8\n'
         'conv_kernel = 4\nmamba_ssm_cache_dtype = "float32"\n')


def _table(text: str, values: dict[str, str | None]) -> str:
    """``text``'s ``key = value`` lines with ``values`` replacing or adding lines (None: the line left out)."""
    fields = dict(line.split(" = ") for line in text.splitlines()) | values
    return "".join(f"{k} = {v}\n" for k, v in fields.items() if v is not None)


def nemotron_toml(name: str = "my-nemotron-h", model: dict | None = None, mamba: dict | None = None) -> str:
    """Nemotron-H-8B as a user writes it from its config.json, ``model`` and ``mamba`` changing fields."""
    return (f"[models.{name}]\n{_table(MODEL, model or {})}"
            f"[models.{name}.mamba]\n{_table(MAMBA, mamba or {})}")


def test_a_toml_nemotron_h_is_the_built_in_entry(tmp_path):
    path = tmp_path / "cat.toml"
    path.write_text(nemotron_toml())
    models, gpus = load_catalog_file(path)
    assert not gpus
    assert replace(models["my-nemotron-h"], name=NEMOTRON.name, source=NEMOTRON.source) == NEMOTRON


def test_an_inline_table_and_auto_are_taken(tmp_path):
    """``mamba = {...}`` on the model's table is the same TOML; ``auto`` stores the SSM state at the model's
    dtype, as vLLM does for Granite-4.0-H (bf16: half Nemotron-H's float32 state)."""
    inline = "mamba = {" + ", ".join(_table(MAMBA, {"mamba_ssm_cache_dtype": '"auto"'}).splitlines()) + "}\n"
    path = tmp_path / "cat.toml"
    path.write_text(f"[models.granite-like]\n{MODEL}{inline}")
    mamba = load_catalog_file(path)[0]["granite-like"].mamba
    assert mamba.ssm_cache_dtype == "auto"
    assert mamba.ssm_state_bytes(2) == 128 * 64 * 128 * 2 == NEMOTRON.mamba.ssm_state_bytes(2) // 2


PATTERN = '"M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"'
"""Nemotron-H-8B's hybrid_override_pattern as its config.json writes it."""


@pytest.mark.parametrize(("pattern", "first"), [(None, True), (PATTERN, True), ('"*' + PATTERN[1:], False)])
def test_the_pattern_orders_the_groups(tmp_path, pattern, first):
    """vLLM lists the Mamba KV cache groups first iff layer 0 is a Mamba layer; Nemotron-H-8B's pattern starts with
    'M' (the built-in entry's), one starting with an attention layer puts them after; no pattern: first."""
    path = tmp_path / "cat.toml"
    path.write_text(nemotron_toml(mamba={"hybrid_override_pattern": pattern}))
    model = load_catalog_file(path)[0]["my-nemotron-h"]
    assert model.mamba.groups_first is first
    if first:
        assert replace(model, name=NEMOTRON.name, source=NEMOTRON.source) == NEMOTRON


GRANITE_LAYER_TYPES = ["attention" if PATTERN[1:-1][i] == "*" else "mamba" for i in range(52)
                       if PATTERN[1:-1][i] != "-"]
"""Nemotron-H-8B's Mamba-2 and attention layers in Granite-4.0-H's spelling: config.json's ``layer_types``, one
"mamba" or "attention" a layer (28 layers: the MLP-only '-' layers dropped, as Granite's Mamba and attention layers
each carry their MLP)."""


def _toml_list(names: list[str]) -> str:
    return "[" + ", ".join(f'"{n}"' for n in names) + "]"


_AT = GRANITE_LAYER_TYPES.index("attention")
ATTENTION_FIRST = ["attention"] + GRANITE_LAYER_TYPES[:_AT] + GRANITE_LAYER_TYPES[_AT + 1:]
"""The same layers with the first attention layer moved to the front."""


@pytest.mark.parametrize("spelling", [{}, {"mamba": "linear_attention", "attention": "full_attention"}])
@pytest.mark.parametrize(("types", "first"), [(GRANITE_LAYER_TYPES, True), (ATTENTION_FIRST, False)])
def test_granites_layer_types_order_the_groups(tmp_path, spelling, types, first):
    """Granite-4.0-H's config.json gives its layer order as ``layer_types`` of "mamba" and "attention" (transformers
    renames them "linear_attention" and "full_attention" on loading, and either spelling is read): layer 0 a Mamba
    layer puts the Mamba groups first, an attention layer after; the dims are the same either way."""
    path = tmp_path / "cat.toml"
    path.write_text(nemotron_toml(model={"num_layers": "28"},
                                  mamba={"layer_types": _toml_list([spelling.get(t, t) for t in types])}))
    model = load_catalog_file(path)[0]["my-nemotron-h"]
    assert model.mamba.groups_first is first
    assert replace(model.mamba, groups_first=True) == NEMOTRON.mamba


ENTRY = "[models.m.mamba]"
BAD = [
    (dict(mamba={"n_groups": "0"}), f"{ENTRY}: n_groups must be a positive integer, got 0"),
    (dict(mamba={"layers": "-24"}), f"{ENTRY}: layers must be a positive integer, got -24"),
    (dict(mamba={"mamba_num_heads": "128.0"}), f"{ENTRY}: mamba_num_heads must be a positive integer, got 128.0"),
    (dict(mamba={"mamba_head_dim": '"64"'}), f"{ENTRY}: mamba_head_dim must be a positive integer, got '64'"),
    (dict(mamba={"ssm_state_size": "true"}), f"{ENTRY}: ssm_state_size must be a positive integer, got True"),
    (dict(mamba={"conv_kernel": "1"}), f"{ENTRY}: mamba conv_kernel must be at least 2 (the state keeps "
                                       "conv_kernel - 1 inputs), got 1"),
    (dict(mamba={"mamba_ssm_cache_dtype": '"fp8"'}), f"{ENTRY}: mamba_ssm_cache_dtype must be one of auto, "
                                                     "float32, bfloat16, float16 (vLLM's --mamba-ssm-cache-dtype), "
                                                     "got 'fp8'"),
    (dict(mamba={"mamba_ssm_cache_dtype": '["float32"]'}), f"{ENTRY}: mamba_ssm_cache_dtype must be one of "
                                                            "auto, float32, bfloat16, float16 (vLLM's "
                                                            "--mamba-ssm-cache-dtype), got ['float32']"),
    (dict(mamba={"mamba_n_heads": "128"}), f"{ENTRY}: unknown field(s) mamba_n_heads; known: layers, "
                                           "mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups, "
                                           "conv_kernel, mamba_ssm_cache_dtype, hybrid_override_pattern, "
                                           "layer_types"),
    (dict(mamba={"layers": None, "conv_kernel": None}), f"{ENTRY}: missing field(s) layers, conv_kernel"),
    (dict(mamba={"hybrid_override_pattern": '"M*M"'}), f"{ENTRY}: hybrid_override_pattern has 2 'M' layers but "
                                                        "layers = 24"),
    (dict(mamba={"hybrid_override_pattern": '["M", "*"]'}), f"{ENTRY}: hybrid_override_pattern must be "
                                                            "config.json's string, got ['M', '*']"),
    (dict(mamba={"layer_types": '["mamba", "attention"]'}), f"{ENTRY}: layer_types has 1 'mamba' or "
                                                            "'linear_attention' layers but layers = 24"),
    (dict(mamba={"layer_types": '["mamba", "M"]'}), f"{ENTRY}: layer_types has unknown layer kind(s) 'M'; known: "
                                                    "'mamba', 'attention', 'linear_attention', 'full_attention'"),
    (dict(mamba={"layer_types": '"mamba"'}), f"{ENTRY}: layer_types must be config.json's list of strings, got "
                                             "'mamba'"),
    (dict(mamba={"layer_types": '["mamba"]', "hybrid_override_pattern": '"M"'}),
     f"{ENTRY}: give one of hybrid_override_pattern and layer_types, not both: each is the model's whole layer "
     "order"),
    (dict(mamba={"mamba_ssm_cache_dtype": None}),
     f"{ENTRY}: missing field(s) mamba_ssm_cache_dtype (vLLM 0.33 turns --mamba-ssm-cache-dtype auto into "
     "config.json's mamba_ssm_cache_dtype or float32 for NemotronHForCausalLM (NemotronHForCausalLMConfig) and "
     "into the model's dtype ('auto') for the other Mamba-2 hybrids (Granite-4.0-H, Bamba, Falcon-H1); give the "
     "one vLLM uses)"),
    (dict(model={"attention_layers": "0"}), "model 'm': attention_layers must be a positive integer, got 0"),
    (dict(model={"attention_layers": "30"}), "model 'm': attention_layers (30) + mamba layers (24) exceed "
                                             "num_layers (52)"),
    (dict(model={"attention_layers": None}), "model 'm': attention_layers and mamba come together (a hybrid "
                                             "Mamba model)"),
    (dict(model={"sliding_window": "4096"}), "model 'm': sliding windows, chunked-local attention or MLA beside "
                                             "Mamba layers are not modelled"),
    (dict(model={"mamba": "24"}), f"{ENTRY}: mamba must be a table [models.m.mamba] of the Mamba-2 layers' "
                                  "fields (layers, mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups, "
                                  "conv_kernel, mamba_ssm_cache_dtype), got 24"),
]


@pytest.mark.parametrize(("change", "message"), BAD)
def test_a_bad_value_is_one_line_naming_file_model_and_field(tmp_path, change, message):
    path = tmp_path / "cat.toml"
    text = nemotron_toml("m", **change)
    if change.get("model", {}).get("mamba"):  # a `mamba = 24` key, and no [models.m.mamba] table beside it
        text = text[:text.index("[models.m.mamba]")]
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_catalog_file(path)
    assert str(info.value) == f"{path}: {message}"


def test_attention_layers_alone_needs_the_mamba_table(tmp_path):
    path = tmp_path / "cat.toml"
    path.write_text(f"[models.m]\n{MODEL}")
    with pytest.raises(ValueError, match=r"^.*cat.toml: model 'm': attention_layers and mamba come together"):
        load_catalog_file(path)
