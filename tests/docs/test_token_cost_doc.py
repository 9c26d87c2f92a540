"""docs/token-cost.md quotes what `sim.token_cost` computes: its bytes-per-token and what-fits tables are parsed
from the page and compared with a fresh computation, so a catalog change that moves a number fails here."""

from __future__ import annotations

import re
from pathlib import Path

from sim.token_cost import requests_per_gpu_table, token_cost_table

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "token-cost.md").read_text()


def rows(header_start: str) -> dict[str, list[str]]:
    """The table whose header begins with ``header_start``: first cell (a model in backticks) -> cells."""
    block = PAGE[PAGE.index(header_start):].split("\n\n")[0].splitlines()[2:]
    out = {}
    for line in block:
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[cells[0].strip("`")] = cells[1:]
    return out


def numbers(cell: str) -> list[int]:
    return [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", cell)]


def test_bytes_per_token_table():
    models = rows("| model | layout")
    table = token_cost_table(list(models)).groupby(["model", "kv_cache_dtype"])["bytes_per_token"].sum()
    for model, (_, bf16, fp8) in models.items():
        assert numbers(bf16)[-1] == table[(model, "bf16")], model
        assert numbers(fp8) == [table[(model, "fp8")]], model


def test_what_fits_table():
    r = requests_per_gpu_table().set_index(["model", "kv_cache_dtype"])
    for model, (gpus, kv_gib, slots, requests, all_full) in rows("| model | GPUs").items():
        bf16, fp8 = r.loc[(model, "bf16")], r.loc[(model, "fp8")]
        assert int(gpus) == bf16["tensor_parallel"] and kv_gib == f"{bf16['kv_gib']:.2f}", model
        assert numbers(slots) == [bf16["kv_tokens"], fp8["kv_tokens"]], model
        assert numbers(requests)[:2] == [bf16["requests"], fp8["requests"]], model
        assert numbers(all_full) == [bf16["requests_all_full"]], model


def test_long_request_counts_in_the_text():
    r = requests_per_gpu_table(dtypes=("bf16",), tokens=8192).set_index("model")
    text = " ".join(PAGE.split())
    for model, phrase in (("mistral-7b", "`mistral-7b` fits {} requests instead of {}"),
                          ("gemma-3-12b", "`gemma-3-12b` {} instead of {}"),
                          ("gpt-oss-20b", "`gpt-oss-20b` {} instead of {}")):
        assert phrase.format(r.loc[model, "requests"], r.loc[model, "requests_all_full"]) in text, model
    assert f"`llama-3.1-8b` {r.loc['llama-3.1-8b', 'requests']}" in text


def test_sparse_mla_figures_in_the_text():
    r = requests_per_gpu_table(("deepseek-v3", "deepseek-v3.2"), ("fp8",)).set_index("model")
    text = " ".join(PAGE.split())
    v32, v3 = r.loc["deepseek-v3.2"], r.loc["deepseek-v3"]
    assert (f"16 H100s at fp8 hold {v32['kv_tokens']:,} tokens against {v3['kv_tokens']:,} "
            f"({v32['requests']:,} requests of 499 tokens against {v3['requests']:,})") in text


def example_entry(tmp_path: Path, heading: str, built_in: str):
    """The page's section from ``heading`` on, and the model its first TOML example describes, checked to be the
    catalog's ``built_in`` entry but for its name and source."""
    from dataclasses import replace

    from allocators.catalog import get_model
    from allocators.catalog_file import load_catalog_file

    section = PAGE[PAGE.index(heading):]
    path = tmp_path / "mine.toml"
    path.write_text(section.split("```toml\n")[1].split("```")[0])
    entry = get_model(built_in)
    (mine,) = load_catalog_file(path)[0].values()
    assert replace(mine, name=entry.name, source=entry.source) == entry
    return section, mine


def test_the_mamba_catalog_example_is_the_built_in_entry(tmp_path):
    """The page's ``[models.NAME.mamba]`` example loads as nemotron-h-8b, and the figures it quotes are what
    ``kvsim capacity`` gives that entry on an H100."""
    from allocators.capacity import kv_capacity
    from allocators.catalog import get_gpu
    from allocators.mamba_layout import model_pool

    section, mine = example_entry(tmp_path, "### A hybrid Mamba-2 model", "nemotron-h-8b")
    pool = model_pool(mine, kv_capacity(mine, get_gpu("h100-80gb")).kv_bytes)
    quoted = (f"an attention block of {pool.block_size:,} tokens, {pool.attention_groups + pool.mamba_groups} KV "
              f"cache groups of {pool.group_size} layers, {pool.num_blocks:,} blocks, "
              f"{pool.requests_that_fit(8192):,} requests of 8,192 tokens")
    assert quoted in " ".join(section.split())


def test_the_gdn_catalog_example_is_the_built_in_entry(tmp_path):
    """The page's ``[models.NAME.gdn]`` example loads as qwen3-next-80b-a3b, and the figures it quotes are what
    ``kvsim capacity`` gives that entry on an H200 at -tp 2 (prefix caching on: 64-aligned blocks on Hopper)."""
    from allocators.capacity import kv_capacity
    from allocators.catalog import get_gpu
    from allocators.mamba_layout import block_alignment, model_pool

    section, mine = example_entry(tmp_path, "### A gated DeltaNet hybrid", "qwen3-next-80b-a3b")
    gpu = get_gpu("h200")
    pool = model_pool(mine, kv_capacity(mine, gpu, tensor_parallel=2).kv_bytes, 2,
                      checkpoint_alignment=block_alignment(mine.mamba, True, gpu.compute_capability))
    quoted = (f"blocks of {pool.block_size:,} tokens (544 with prefix caching off in a run), "
              f"{pool.attention_groups + pool.mamba_groups} KV cache groups of {pool.group_size} layers (1 "
              f"attention, 3 gated DeltaNet) and {pool.num_blocks:,} blocks per GPU")
    assert quoted in " ".join(section.split())


def test_the_mamba1_catalog_example_is_the_built_in_entry(tmp_path):
    """The page's ``[models.NAME.mamba1]`` example loads as jamba-1.5-mini, and the figures it quotes are what
    ``kvsim capacity`` gives that entry on two H100s."""
    from allocators.capacity import kv_capacity
    from allocators.catalog import get_gpu
    from allocators.mamba_layout import model_pool

    section, mine = example_entry(tmp_path, "### A Mamba-1 hybrid (Jamba)", "jamba-1.5-mini")
    pool = model_pool(mine, kv_capacity(mine, get_gpu("h100-80gb"), tensor_parallel=2).kv_bytes, 2)
    quoted = (f"gives blocks of {pool.block_size:,} tokens (16 x cdiv({pool.mamba_state_bytes:,}-byte state, 16 x "
              f"2,048 bytes a token a layer a GPU)), {pool.attention_groups + pool.mamba_groups} KV cache groups of "
              f"{pool.group_size} layers (1 attention, {pool.mamba_groups} Mamba) and {pool.num_blocks:,} blocks per "
              f"GPU, as vLLM's planner does")
    assert quoted in " ".join(section.split())
    assert f"and {pool.requests_that_fit(262_144):,} requests of 262,144 tokens" in " ".join(section.split())
