"""Decode context parallelism (vLLM's ``--decode-context-parallel-size N``, ``-dcp N``): each request's KV is
sharded over N GPUs of the tensor-parallel group, so KV that tensor parallelism copies is stored once per N GPUs.

Why it matters for memory: under tensor parallelism an MLA model keeps its whole latent on every GPU
(`ModelSpec.kv_bytes_per_token_per_gpu`), and a GQA model with fewer KV heads than GPUs keeps copies of them.
With DCP the N ranks of a DCP group store the tokens of a request interleaved (token ``i`` on rank
``i % N`` at vLLM's default ``cp_kv_cache_interleave_size`` 1, ``config/parallel.py`` ParallelConfig), so the same
memory holds N times the tokens. What vLLM 0.33 does, read from its source:

* The pool. Each worker's KV spec is its rank's (``block_size`` tokens a page, the rank's heads), so
  ``get_kv_cache_config_from_groups`` gives the same ``num_blocks`` with or without DCP; only the token span of
  a block changes: ``resolve_dcp_kv_block_size`` (``v1/core/kv_cache_utils.py``) is ``block_size x N`` for a
  ``dcp_sharded`` spec (every ``AttentionSpec`` by default, ``v1/kv_cache_interface.py`` ``dcp_sharded: bool =
  True``), the logged capacity divides ``max_model_len`` by N (``FullAttentionSpec.max_memory_usage_bytes``).
* The interleave (``cp_kv_cache_interleave_size``) only decides which rank stores which token of a block
  (``v1/worker/block_table.py``); nothing in ``v1/core`` reads it, so kvsim has no setting for it.
* The scheduler's blocks. ``resolve_kv_cache_block_sizes`` returns ``cache_config.block_size x N`` for one KV cache
  group (scheduler and hash block size alike), and ``SingleTypeKVCacheManager`` allocates blocks of
  ``kv_cache_spec.block_size x dcp_world_size`` tokens (``v1/core/single_type_kv_cache_manager.py``), so a
  block, a prefix-cache hash and a cache hit cover ``block_size x N`` tokens (``FullAttentionManager.
  find_longest_cache_hit``: "hashes must be viewed at the sharded block size").
* Refusals (`check_decode_context_parallel`): ``tp_size`` divisible by ``dcp_size`` (``ParallelConfig``
  validator); for a GQA/MQA model ``tensor_parallel_size`` above its KV heads, N at most ``tp // kv_heads`` and
  dividing the query heads per KV head (``ModelConfig.verify_with_parallel_config``, ``config/model.py``);
  sliding-window layers are not supported by the DCP managers ("DCP not support sliding window attn now",
  ``SlidingWindowManager``; the coordinator's "DCP with hybrid KV cache layouts only supports full-attention,
  Mamba, and replicated draft groups").
* The attention step (``v1/attention/ops/dcp.py``; ``ParallelConfig.dcp_comm_backend``): each rank attends the
  all-gathered queries of the group's heads over its own tokens and the partial outputs are merged by their
  log-sum-exps, with an all-gather and a reduce-scatter ("ag_rs", three NCCL calls per MLA layer with the query
  all-gather; "a2a" two). kvsim prices each GPU's KV reads at its share of the tokens and leaves that
  communication out of the clock, saying so (`communication_omitted`).

Not modelled, refused rather than run otherwise: a sparse-attention (indexer) model, whose first Hopper backend
(FLASH_ATTN_MLA_SPARSE) refuses DCP so that vLLM falls back to another one with another block size; allocators
other than vLLM's paged cache.
"""

from __future__ import annotations

from allocators.catalog import ModelSpec


def check_decode_context_parallel(model: ModelSpec, tensor_parallel: int, dcp: int) -> None:
    """A one-line ValueError, with vLLM's reason, for a ``--decode-context-parallel-size`` vLLM refuses on
    ``model`` over ``tensor_parallel`` GPUs, or one kvsim does not model (the module docstring)."""
    if dcp < 1:
        raise ValueError(f"--decode-context-parallel-size must be >= 1, got {dcp}")
    if dcp == 1:
        return
    if tensor_parallel % dcp:  # vllm/config/parallel.py, ParallelConfig's validator (DCP reuses the TP ranks)
        raise ValueError(f"--decode-context-parallel-size {dcp}: vLLM requires tp_size={tensor_parallel} to be "
                         f"divisible by dcp_size={dcp} (DCP shards KV over the tensor-parallel GPUs)")
    groups = model.kv_groups()
    if any(g.window is not None for g in groups):
        raise ValueError(f"--decode-context-parallel-size {dcp}: {model.name} has sliding-window or chunked-local "
                         "layers, and vLLM's KV cache managers do not support DCP there ('DCP not support sliding "
                         "window attn now', 'DCP not support chunked local attn now')")
    if model.sparse_attention:
        raise ValueError(f"--decode-context-parallel-size {dcp} on {model.name} (sparse attention) is not modelled: "
                         "vLLM's first sparse MLA backend on Hopper refuses DCP and another, with its own block "
                         "size, serves it")
    if all(g.attention == "mla" for g in groups):
        return
    kv, heads = model.num_kv_heads, model.num_heads  # vllm/config/model.py, verify_with_parallel_config
    if tensor_parallel <= kv:
        raise ValueError(f"--decode-context-parallel-size {dcp}: decode context parallelism for GQA/MQA requires "
                         f"--tensor-parallel-size ({tensor_parallel}) to be greater than {model.name}'s "
                         f"{kv} KV heads (vLLM's check)")
    if dcp > tensor_parallel // kv:
        raise ValueError(f"--decode-context-parallel-size ({dcp}) exceeds the maximum vLLM supports "
                         f"({tensor_parallel // kv}) for --tensor-parallel-size ({tensor_parallel}) and "
                         f"{model.name}'s {kv} KV heads")
    if (heads // kv) % dcp:
        raise ValueError(f"--decode-context-parallel-size {dcp}: {model.name}'s query heads per KV head "
                         f"({heads // kv}) must be divisible by it for GQA/MQA (vLLM's check)")


def communication_omitted(dcp: int) -> str:
    """The ``clock_omits`` phrase for a run with ``dcp`` > 1."""
    return (f"decode-context-parallel communication: per attention layer and step, the query all-gather and the "
            f"all-gather and reduce-scatter merging the {dcp} ranks' partial outputs by their log-sum-exps (vLLM's "
            f"dcp_comm_backend ag_rs); each GPU's KV reads are priced at its 1/{dcp} of the tokens")
