"""``kvsim capacity`` of a hybrid attention/Mamba model (Nemotron-H; gated DeltaNet: Qwen3-Next): vLLM 0.33's block
pool (`allocators.mamba_layout`) and how many requests of a length it holds at once, with prefix caching on, vLLM's
default (its ``"align"`` mode moves a gated DeltaNet model's block size on Hopper: `allocators.gdn_layout`).

Only what was checked against vLLM 0.33 is reported: the paged pool (vLLM's only one) with the model's own KV
and Mamba dtypes. Other allocators (contiguous slabs or virtual ranges for a recurrent state are not modelled),
``--kv-cache-dtype`` other than auto (FlashAttention's fp8 kernel block on Hopper was not checked),
``--disable-hybrid-kv-cache-manager`` and ``--speculative-config`` (Mamba's speculative state blocks) are refused
with the reason.
"""

from __future__ import annotations

import click

from allocators.catalog import GIB


def mamba_capacity_report(cap, *, block_size: int | None, prompt_len: int, output_len: int,
                          max_model_len: int) -> dict:
    """The `kvsim capacity` figures of a hybrid Mamba model (``cap``: its `KVCapacity`, whose bytes vLLM's
    profiling leaves, sized as for any model)."""
    from allocators.capacity import final_tokens
    from allocators.mamba_layout import KERNEL_BLOCK, block_alignment, model_pool

    spec = cap.model
    # vLLM's default, prefix caching on (mamba_cache_mode "align"): gated DeltaNet's block size follows the GPU
    align = block_alignment(spec.mamba, True, cap.gpu.compute_capability if cap.gpu else None)
    pool = model_pool(spec, cap.kv_bytes, cap.tensor_parallel, KERNEL_BLOCK if block_size is None else block_size,
                      align)
    tokens = final_tokens(prompt_len, output_len)
    return {
        "model": spec.name, "gpu": cap.gpu.name if cap.gpu else None, "tensor_parallel": cap.tensor_parallel,
        "data_parallel_size": cap.data_parallel, "kv_source": cap.source, "kv_bytes": cap.kv_bytes,
        "kv_gib": cap.kv_gib, "allocator": "paged", "kv_groups": [g.to_dict() for g in spec.kv_groups()],
        "mamba_layers": spec.mamba.layers, "mamba_kind": spec.mamba.label, "mamba_pool": pool.to_dict(), "block_size": pool.block_size,
        "kv_capacity_blocks": pool.num_blocks, "usable_blocks": pool.num_blocks - 1,
        "max_model_len": max_model_len, "prompt_len": prompt_len, "output_len": output_len,
        "blocks_per_request": pool.blocks_per_request(tokens),
        "max_concurrent_requests": pool.requests_that_fit(tokens),
    }


def print_mamba_text(r: dict) -> None:
    """`mamba_capacity_report` as text."""
    p = r["mamba_pool"]
    click.echo(f"model {r['model']}: KV memory {r['kv_gib']:.2f} GiB ({r['kv_source']}), "
               f"{r['kv_groups'][0]['layers']} attention layers and {r['mamba_layers']} {r['mamba_kind']} layers")
    click.echo(f"  attention block size {p['block_size']} (raised so one attention page, {p['page_bytes']:,} bytes "
               f"per layer, holds a Mamba state of {p['mamba_state_bytes']:,} bytes, padded by "
               f"{p['mamba_padding_frac']:.2%})")
    click.echo(f"  {p['attention_groups'] + p['mamba_groups']} KV cache groups of {p['group_size']} layers "
               f"({p['attention_groups']} attention, {p['mamba_groups']} Mamba): {p['num_blocks']:,} blocks of "
               f"{p['bytes_per_block'] / GIB * 1024:.2f} MiB per GPU (block 0 is the null block)")
    click.echo(f"requests of {r['prompt_len']} prompt + {r['output_len']} output tokens hold "
               f"{r['blocks_per_request']} blocks each (one state block per Mamba group)")
    click.echo(f"max concurrent requests: {r['max_concurrent_requests']:,}")
