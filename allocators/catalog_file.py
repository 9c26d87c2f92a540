"""Catalog files: extra models and GPUs from a user's TOML (``--catalog FILE`` or ``$KVSIM_CATALOG``).

A file holds ``[models.NAME]`` and ``[gpus.NAME]`` tables whose keys are the fields of `ModelSpec` and
`GpuSpec` (``catalog.py``), and a hybrid Mamba-2 model's layers a ``[models.NAME.mamba]`` table under config.json's
names (`MAMBA_KEYS`), so Nemotron-H or Granite-4.0-H is described as the built-in nemotron-h-8b is, and a gated
DeltaNet hybrid's a ``[models.NAME.gdn]`` table (`GDN_KEYS`, Qwen3-Next's and Qwen3.5's names) and a Mamba-1
hybrid's (Jamba) a ``[models.NAME.mamba1]`` table (`MAMBA1_KEYS`, Jamba's names), each optionally with the model's
layer pattern (`LAYER_PATTERNS`, which orders vLLM's KV cache groups). Every mistake
(an unknown table or field, a missing one, a value out of range, a file that is not TOML) is a one-line
ValueError naming the file and the entry, so a typo never adds nothing silently.
"""

from __future__ import annotations

import sys
from dataclasses import MISSING, fields
from pathlib import Path

from allocators.catalog import GIB, GPUS, MODELS, GpuSpec, ModelSpec, check_positive, get_model
from allocators.gdn_layout import GatedDeltaNetLayers
from allocators.mamba1_layout import Mamba1Layers
from allocators.mamba_layout import MAMBA_DTYPES, Mamba2Layers, first_layer_recurrent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CATALOG_SECTIONS = ("models", "gpus")

MAMBA_KEYS: dict[str, str] = {"layers": "layers", "mamba_num_heads": "num_heads", "mamba_head_dim": "head_dim",
                              "ssm_state_size": "state_size", "n_groups": "n_groups", "conv_kernel": "conv_kernel",
                              "mamba_ssm_cache_dtype": "ssm_cache_dtype"}
"""A ``[models.NAME.mamba]`` table's keys -> `Mamba2Layers` fields. The keys are Nemotron-H's config.json names,
which users copy (Granite-4.0-H spells them ``mamba_n_heads``, ``mamba_d_head``, ``mamba_d_state``,
``mamba_n_groups``, ``mamba_d_conv``: docs/token-cost.md); ``layers`` counts the Mamba-2 layers, which
config.json gives as a pattern (Nemotron-H's ``hybrid_override_pattern`` 'M's, Granite's ``layer_types``
"mamba")."""

MAMBA_SSM_DTYPE_DEFAULTS = ("vLLM 0.33 turns --mamba-ssm-cache-dtype auto into config.json's mamba_ssm_cache_dtype or "
                            "float32 for NemotronHForCausalLM (NemotronHForCausalLMConfig) and into the model's dtype "
                            "('auto') for the other Mamba-2 hybrids (Granite-4.0-H, Bamba, Falcon-H1); give the one "
                            "vLLM uses")
"""Why ``mamba_ssm_cache_dtype`` has no default in a catalog file: the SSM state is most of a Mamba page, and
vLLM's default for it depends on the architecture (``model_executor/models/config.py``), so no single default
would be right for both Nemotron-H (float32 when config.json is silent) and Granite-4.0-H (bf16)."""


GDN_KEYS: dict[str, str] = {"layers": "layers", "linear_num_key_heads": "num_k_heads",
                            "linear_num_value_heads": "num_v_heads", "linear_key_head_dim": "head_k_dim",
                            "linear_value_head_dim": "head_v_dim", "linear_conv_kernel_dim": "conv_kernel",
                            "mamba_ssm_cache_dtype": "ssm_cache_dtype"}
"""A ``[models.NAME.gdn]`` table's keys -> `GatedDeltaNetLayers` fields: Qwen3-Next's and Qwen3.5's config.json
names; ``layers`` counts the ``linear_attention`` entries of ``layer_types``."""

GDN_SSM_DTYPE_DEFAULTS = ("vLLM 0.33 keeps --mamba-ssm-cache-dtype auto (the model's dtype) for Qwen3NextForCausalLM "
                          "and turns it into config.json's mamba_ssm_dtype for the Qwen3.5 architectures "
                          "(Qwen3_5ForConditionalGenerationConfig); give the one vLLM uses")
"""Why a ``gdn`` table's ``mamba_ssm_cache_dtype`` has no default: as `MAMBA_SSM_DTYPE_DEFAULTS`, the recurrent
state is most of the page and vLLM's default for it depends on the architecture."""

MAMBA1_KEYS: dict[str, str] = {"layers": "layers", "mamba_expand": "intermediate_size", "mamba_d_state": "state_size",
                               "mamba_d_conv": "conv_kernel", "mamba_ssm_cache_dtype": "ssm_cache_dtype"}
"""A ``[models.NAME.mamba1]`` table's keys -> `Mamba1Layers` fields: Jamba's config.json names; ``layers`` counts
the Mamba layers (every layer but each ``attn_layer_period``-th from ``attn_layer_offset``). ``mamba_expand`` is
config.json's factor: vLLM's ``JambaMambaDecoderLayer`` builds the mixer ``mamba_expand x hidden_size`` wide, so the
field is that product (`EXPANDED`)."""

EXPANDED = {"mamba_expand": "hidden_size"}
"""Keys given as a factor of one of the model's own fields: the layer field is ``key x model[field]``."""

MAMBA1_SSM_DTYPE_DEFAULTS = ("vLLM 0.33 keeps --mamba-ssm-cache-dtype auto (the model's dtype) for JambaForCausalLM "
                             "(no entry in MODELS_CONFIG_MAP); give the one vLLM uses")
"""Why a ``mamba1`` table's ``mamba_ssm_cache_dtype`` has no default: as `MAMBA_SSM_DTYPE_DEFAULTS`."""

LAYER_PATTERNS: dict[str, dict[str, tuple[str, ...]]] = {
    "mamba": {"hybrid_override_pattern": ("M",), "layer_types": ("mamba", "linear_attention")},
    "gdn": {"layer_types": ("linear_attention",)},
    "mamba1": {"layer_types": ("mamba", "linear_attention")},
}
"""A recurrent-layer table's optional layer patterns (at most one given), config.json's key for each and its names
for a recurrent layer: Nemotron-H's ``hybrid_override_pattern`` string (one letter a layer, 'M' Mamba-2), a
``layer_types`` list (Granite-4.0-H's config.json spells its layers "mamba" and "attention"; Qwen3-Next's, Qwen3.5's
and transformers' own, which renames those two on loading (``_LEGACY_LAYER_TYPE_REMAP`` in transformers 5.20's
``configuration_utils.py``), "linear_attention" and "full_attention"; Jamba's config.json gives none, transformers'
``JambaConfig.layer_types`` lists its layers so). It sets ``groups_first`` (vLLM lists the recurrent KV cache groups
first iff layer 0 is recurrent: `MambaStateLayers.groups_first`) and must count ``layers`` recurrent layers; without
it the order is `RECURRENT_FIRST`'s (every hybrid kvsim knows of starts with a recurrent layer)."""

LAYER_TYPE_NAMES = ("mamba", "attention", "linear_attention", "full_attention")
"""The ``layer_types`` entries a hybrid's list may hold (`LAYER_PATTERNS`): any other is a typo, not a layer."""

RECURRENT_TABLES: dict[str, tuple[type, dict[str, str], str, str]] = {
    "mamba": (Mamba2Layers, MAMBA_KEYS, "Mamba-2", MAMBA_SSM_DTYPE_DEFAULTS),
    "gdn": (GatedDeltaNetLayers, GDN_KEYS, "gated DeltaNet", GDN_SSM_DTYPE_DEFAULTS),
    "mamba1": (Mamba1Layers, MAMBA1_KEYS, "Mamba-1", MAMBA1_SSM_DTYPE_DEFAULTS),
}
"""A model table's recurrent-layer sub-table -> the class it builds, its keys, what its layers are called and why
its SSM dtype has no default. Each becomes the `ModelSpec`'s ``mamba`` (vLLM holds every kind as Mamba states)."""


def _spec_from_table(cls: type, section: str, name: str, table: dict, path: Path) -> object:
    known = {f.name for f in fields(cls)} - {"name"}
    unknown = set(table) - known
    if unknown:
        raise ValueError(f"{path}: [{section}.{name}]: unknown field(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(sorted(known))}")
    required = [f.name for f in fields(cls) if f.name != "name" and f.default is MISSING]
    missing = [f if f != "memory_bytes" else "memory_gib (or memory_bytes)" for f in required if f not in table]
    if missing:
        raise ValueError(f"{path}: [{section}.{name}]: missing field(s) {', '.join(missing)}")
    try:
        return cls(name=name.lower(), **table)
    except ValueError as exc:  # a field out of range: name the file too
        raise ValueError(f"{path}: {exc}") from None


def _mamba_from_table(name: str, table: object, path: Path, kind: str = "mamba",
                      model: dict | None = None) -> Mamba2Layers | GatedDeltaNetLayers | Mamba1Layers:
    """``[models.NAME.KIND]`` as the class `RECURRENT_TABLES` names for ``kind``, each bad key named as the file
    spells it; ``model``: the model's own table, whose fields `EXPANDED` keys multiply."""
    cls, keys, label, dtype_why = RECURRENT_TABLES[kind]
    entry = f"{path}: [models.{name}.{kind}]"
    if not isinstance(table, dict):
        raise ValueError(f"{entry}: {kind} must be a table [models.{name}.{kind}] of the {label} layers' fields "
                         f"({', '.join(keys)}), got {table!r}")
    patterns = LAYER_PATTERNS[kind]
    unknown = set(table) - set(keys) - set(patterns)
    if unknown:
        raise ValueError(f"{entry}: unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(keys)}, "
                         f"{', '.join(patterns)}")
    given = [k for k in patterns if k in table]
    if len(given) > 1:
        raise ValueError(f"{entry}: give one of {' and '.join(given)}, not both: each is the model's whole layer order")
    table = dict(table)
    pattern = {k: table.pop(k) for k in given}
    missing = [k for k in keys if k not in table]
    if missing:
        why = f" ({dtype_why})" if "mamba_ssm_cache_dtype" in missing else ""
        raise ValueError(f"{entry}: missing field(s) {', '.join(missing)}{why}")
    for key, value in table.items():
        if key == "mamba_ssm_cache_dtype":
            if not isinstance(value, str) or value not in MAMBA_DTYPES:  # a TOML array is not hashable
                raise ValueError(f"{entry}: mamba_ssm_cache_dtype must be one of {', '.join(MAMBA_DTYPES)} "
                                 f"(vLLM's --mamba-ssm-cache-dtype), got {value!r}")
        else:
            check_positive(entry, key, value, integer=True)
    for key, field in EXPANDED.items():
        if key in table:
            base = (model or {}).get(field)
            check_positive(f"{path}: [models.{name}]", field, base, integer=True)  # before the product uses it
            table[key] *= base
    order = {}
    for key, value in pattern.items():
        order["groups_first"] = _first_recurrent(entry, key, value, patterns[key], table["layers"])
    try:
        return cls(**{keys[k]: v for k, v in table.items()}, **order)
    except ValueError as exc:  # a rule between fields (conv_kernel of at least 2): name the file and model too
        raise ValueError(f"{entry}: {exc}") from None


def _first_recurrent(entry: str, key: str, pattern: object, recurrent: tuple[str, ...], layers: int) -> bool:
    """Whether a table's layer pattern (`LAYER_PATTERNS`) starts with a recurrent layer (one of ``recurrent``). It
    must be config.json's type (a string for ``hybrid_override_pattern``, a list of `LAYER_TYPE_NAMES` for
    ``layer_types``) and hold ``layers`` recurrent layers."""
    text = key == "hybrid_override_pattern"
    if not (isinstance(pattern, str) if text else isinstance(pattern, list) and all(
            isinstance(p, str) for p in pattern)):
        raise ValueError(f"{entry}: {key} must be config.json's {'string' if text else 'list of strings'}, "
                         f"got {pattern!r}")
    if not text and (odd := sorted(set(pattern) - set(LAYER_TYPE_NAMES))):
        raise ValueError(f"{entry}: {key} has unknown layer kind(s) {', '.join(map(repr, odd))}; known: "
                         f"{', '.join(map(repr, LAYER_TYPE_NAMES))}")
    count = sum(p in recurrent for p in pattern)
    if count != layers:
        raise ValueError(f"{entry}: {key} has {count} {' or '.join(map(repr, recurrent))} layers but layers = "
                         f"{layers}")
    return any(first_layer_recurrent(pattern, name) for name in recurrent)


def _tables(data: dict, section: str, path: Path) -> dict[str, dict]:
    """The ``[section.NAME]`` tables of a catalog file, each as a plain dict."""
    entries = data.get(section, {})
    if not isinstance(entries, dict):
        raise ValueError(f"{path}: {section} must be tables [{section}.NAME]")
    for name, table in entries.items():
        if not isinstance(table, dict):
            raise ValueError(f"{path}: {section}.{name} must be a table [{section}.{name}] of fields")
    seen: dict[str, str] = {}
    for name in entries:  # names are case-insensitive (`get_model`): a second spelling would replace the first
        if name.lower() in seen:
            raise ValueError(f"{path}: [{section}.{seen[name.lower()]}] and [{section}.{name}] are the same entry "
                             "(names are case-insensitive); keep one")
        seen[name.lower()] = name
    return {name: dict(table) for name, table in entries.items()}


def load_catalog_file(path: str | Path) -> tuple[dict[str, ModelSpec], dict[str, GpuSpec]]:
    """Read extra models and GPUs from TOML: ``[models.NAME]`` and ``[gpus.NAME]`` tables.

    GPU entries may give ``memory_gib`` instead of ``memory_bytes``. Returns only the new entries; use
    `register_catalog_file` to merge them into the catalog.
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")  # drops a BOM (Windows editors write one; TOML has none)
        data = tomllib.loads(text)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read catalog file: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a TOML catalog file (binary, or not UTF-8 text)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(CATALOG_SECTIONS))
    if unknown:  # [model.x] for [models.x] would otherwise add nothing, silently
        raise ValueError(f"{path}: unknown table(s) {', '.join(f'[{u}]' for u in unknown)}; a catalog has "
                         "[models.NAME] and [gpus.NAME] tables")
    models = {}
    for name, table in _tables(data, "models", path).items():
        kinds = [k for k in RECURRENT_TABLES if k in table]
        if len(kinds) > 1:
            raise ValueError(f"{path}: [models.{name}]: give one of "
                             + " and ".join(f"[models.{name}.{k}] ({RECURRENT_TABLES[k][2]})" for k in kinds)
                             + ", not both: kvsim models one kind of recurrent layer per model")
        if kinds:
            table["mamba"] = _mamba_from_table(name, table.pop(kinds[0]), path, kinds[0], table)
        models[name.lower()] = _spec_from_table(ModelSpec, "models", name, table, path)
    gpus = {}
    for name, table in _tables(data, "gpus", path).items():
        if "memory_gib" in table:
            if "memory_bytes" in table:  # one would silently win over the other
                raise ValueError(f"{path}: [gpus.{name}]: give one of memory_gib, memory_bytes, not both "
                                 f"(got memory_gib = {table['memory_gib']!r}, "
                                 f"memory_bytes = {table['memory_bytes']!r})")
            gib = table.pop("memory_gib")
            check_positive(f"{path}: gpu {name!r}", "memory_gib", gib)  # not a string times GIB
            table["memory_bytes"] = int(gib * GIB)
        gpus[name.lower()] = _spec_from_table(GpuSpec, "gpus", name, table, path)
    if not models and not gpus:
        raise ValueError(f"{path}: no [models.NAME] or [gpus.NAME] table: the catalog adds nothing")
    return models, gpus


def register_catalog_file(path: str | Path) -> None:
    """Add a file's models and GPUs to `MODELS` and `GPUS` (user entries win over built-ins)."""
    models, gpus = load_catalog_file(path)
    MODELS.update(models)
    GPUS.update(gpus)


def model_with_catalog(name: str, catalog: str | Path | None) -> ModelSpec:
    """The model ``name``, after registering ``catalog`` (a run's ``--catalog``, whose entries it may name: a sweep
    point in another process reads the file itself)."""
    if catalog is not None:
        register_catalog_file(catalog)
    return get_model(name)
