"""``kvsim capacity`` of a hybrid attention/Mamba model (Nemotron-H; gated DeltaNet: Qwen3-Next; Mamba-1: Jamba): vLLM
0.33's block pool (`allocators.mamba_layout`) and how many requests of a length it holds at once, with prefix
caching on, vLLM's default, or off (``--no-enable-prefix-caching``). vLLM 0.33's ``MambaModelConfig``
(``model_executor/models/config.py``) turns prefix caching into ``mamba_cache_mode="align"``, in which
``Platform._align_hybrid_block_size`` (``platforms/interface.py``) also makes the block size a multiple of the
layers' prefill checkpoint alignment (a gated DeltaNet model's 64 tokens on Hopper: `allocators.gdn_layout`), and no
prefix caching into ``"none"``, in which it does not. A request holds the same blocks at rest in both modes
(`allocators.mamba_layout.HybridMambaPool`).

Only what was checked against vLLM 0.33 is reported: the paged pool (vLLM's only one) with the model's own KV
and Mamba dtypes. Other allocators (contiguous slabs or virtual ranges for a recurrent state are not modelled),
``--kv-cache-dtype`` other than auto (FlashAttention's fp8 kernel block on Hopper was not checked),
and ``--disable-hybrid-kv-cache-manager`` are refused with the reason; ``--speculative-config`` is sized with the
ngram drafter, prefix caching off or on (Mamba-2) (a state block more per Mamba group and draft token:
`allocators.mamba_layout.mamba_state_blocks`; with prefix caching on, those a decoding request rests at:
`allocators.mamba_align.place_blocks`), and with Qwen3-Next's MTP drafter, prefix caching off or on, whose
full-attention layer joins the attention group (groups of 13 layers, exact against vLLM's planner: its weights
out of the memory, kvsim's estimate) and whose lookahead slots a request at rest does not hold; refused otherwise
(`check_mamba_speculation`).
"""

from __future__ import annotations

import click

from allocators.catalog import GIB


def mamba_capacity_report(cap, *, block_size: int | None, prompt_len: int, output_len: int,
                          max_model_len: int, prefix_caching: bool = True, num_speculative_tokens: int = 0,
                          drafter_layers: int = 0) -> dict:
    """The `kvsim capacity` figures of a hybrid Mamba model (``cap``: its `KVCapacity`, whose bytes vLLM's
    profiling leaves, sized as for any model); ``prefix_caching``: vLLM's ``--enable-prefix-caching``, whose
    ``mamba_cache_mode`` decides the block size's alignment (the module docstring); ``num_speculative_tokens``:
    ``--speculative-config``'s, a state block more per Mamba group each (`mamba_state_blocks`);
    ``drafter_layers``: an MTP drafter's attention layers, in the attention group (`model_pool`)."""
    from allocators.capacity import final_tokens
    from allocators.mamba_layout import KERNEL_BLOCK, block_alignment, mamba_state_blocks, model_pool

    spec = cap.model
    align = block_alignment(spec.mamba, prefix_caching, cap.gpu.compute_capability if cap.gpu else None)
    pool = model_pool(spec, cap.kv_bytes, cap.tensor_parallel, KERNEL_BLOCK if block_size is None else block_size,
                      align, drafter_layers)
    tokens = final_tokens(prompt_len, output_len)
    state_blocks = mamba_state_blocks(num_speculative_tokens)
    return {
        "model": spec.name, "gpu": cap.gpu.name if cap.gpu else None, "tensor_parallel": cap.tensor_parallel,
        "data_parallel_size": cap.data_parallel, "kv_source": cap.source, "kv_bytes": cap.kv_bytes,
        "kv_gib": cap.kv_gib, "allocator": "paged", "kv_groups": [g.to_dict() for g in spec.kv_groups()],
        "mamba_layers": spec.mamba.layers, "mamba_kind": spec.mamba.label, "mamba_pool": pool.to_dict(), "block_size": pool.block_size,
        "kv_capacity_blocks": pool.num_blocks, "usable_blocks": pool.num_blocks - 1,
        "max_model_len": max_model_len, "prompt_len": prompt_len, "output_len": output_len,
        "blocks_per_request": pool.blocks_per_request(tokens, state_blocks),
        "max_concurrent_requests": pool.requests_that_fit(tokens, state_blocks),
        "num_speculative_blocks": state_blocks - 1, "drafter_layers": drafter_layers,
        "enable_prefix_caching": prefix_caching, "mamba_cache_mode": "align" if prefix_caching else "none",
        "block_alignment": align,
    }


def print_mamba_text(r: dict) -> None:
    """`mamba_capacity_report` as text."""
    p = r["mamba_pool"]
    click.echo(f"model {r['model']}: KV memory {r['kv_gib']:.2f} GiB ({r['kv_source']}), "
               f"{r['kv_groups'][0]['layers']} attention layers and {r['mamba_layers']} {r['mamba_kind']} layers"
               + (f", and the MTP drafter's {r['drafter_layers']} attention layer (in the attention group)"
                  if r["drafter_layers"] else ""))
    click.echo(_mode_text(r))
    click.echo(f"  attention block size {p['block_size']} (raised so one attention page, {p['page_bytes']:,} bytes "
               f"per layer, holds a Mamba state of {p['mamba_state_bytes']:,} bytes, padded by "
               f"{p['mamba_padding_frac']:.2%})")
    click.echo(f"  {p['attention_groups'] + p['mamba_groups']} KV cache groups of {p['group_size']} layers "
               f"({p['attention_groups']} attention, {p['mamba_groups']} Mamba): {p['num_blocks']:,} blocks of "
               f"{p['bytes_per_block'] / GIB * 1024:.2f} MiB per GPU (block 0 is the null block)")
    spec = r["num_speculative_blocks"]
    states = (f"{1 + spec} state blocks per Mamba group: 1 + {spec} speculative" if spec
              else "one state block per Mamba group")
    click.echo(f"requests of {r['prompt_len']} prompt + {r['output_len']} output tokens hold "
               f"{r['blocks_per_request']} blocks each ({states})")
    click.echo(f"max concurrent requests: {r['max_concurrent_requests']:,}")


def _mode_text(r: dict) -> str:
    """Which of vLLM's two pools was sized: prefix caching on or off, and what that did to the block size."""
    if not r["enable_prefix_caching"]:
        spec = r["num_speculative_blocks"]
        held = f"1 + {spec} speculative state blocks" if spec else "one state block"
        return ("  prefix caching off (--no-enable-prefix-caching): vLLM's mamba_cache_mode 'none', "
                f"{held} per Mamba group for a request's whole life")
    grid = (f", the block size a multiple of {r['block_alignment']} (the {r['mamba_kind']} layers' prefill "
            "checkpoint grid)" if r["block_alignment"] > 1 else "")
    return f"  prefix caching on (vLLM's default): mamba_cache_mode 'align'{grid}"
