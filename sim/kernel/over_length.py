"""Requests longer than ``max_model_len``: their output cut where vLLM stops it (``--over-length cap``, the
default), or refused (``--over-length reject``).

vLLM serves a request whose prompt fits ``max_model_len`` even when prompt + output does not: its OpenAI server
lowers ``max_tokens`` to ``max_model_len - prompt`` (``get_max_tokens``, 0.33) and its scheduler stops a
request whose tokens reach ``max_model_len`` (``check_stop``: ``FINISHED_LENGTH_CAPPED``). Only a prompt of
``max_model_len`` tokens or more is refused, since not one output token fits after it. kvsim does the same
to the workload before the run (`cap_outputs`): such a row's ``output_tokens`` become ``max_model_len -
prompt``, as does any row's ``max_tokens`` (a bound `contiguous-max` reserves by) that is larger, and
``Workload.length_capped`` keeps how many tokens each row lost, so the requests table says it
(``length_capped_tokens``) and the summary counts the rows (``length_capped``). Sampled and beam sequences are
cut alike (each stops at the same length). A session's later turns keep their prompts as the trace gives them
(what the client sent); they hit the cut turn's blocks as far as it computed them.

``reject`` refuses every request whose prompt + output exceeds ``max_model_len`` on arrival, with that reason:
what kvsim did before it modelled vLLM's cut, and what a server that refuses over-long requests does.
"""

from __future__ import annotations

import numpy as np

from allocators.catalog import GIB
from allocators.catalog_file import model_with_catalog
from sim.kernel.block_size import block_size_refusal

OVER_LENGTH = ("cap", "reject")
"""``--over-length`` values: ``cap`` (vLLM: the output stops at ``max_model_len``) or ``reject``."""


def max_model_len_of(config) -> int:
    """The run's ``max_model_len``: ``config``'s (a `SimConfig`), else its model's own context."""
    if config.max_model_len is not None:
        return config.max_model_len
    return model_with_catalog(config.model, config.catalog).max_seq_len


def beyond_model_context(max_model_len: int | None, model) -> str | None:
    """The note for a ``--max-model-len`` above ``model``'s own context (None when it is not): `kvsim run`'s
    summary and `kvsim capacity` say it in the same words."""
    if max_model_len is None or max_model_len <= model.max_seq_len:
        return None
    return (f"--max-model-len {max_model_len:,} exceeds {model.name}'s own context of {model.max_seq_len:,} tokens: "
            "vLLM refuses that unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set, and kvsim simulates requests that "
            "long as if the model took them")


def vllm_refusals(config, max_model_len: int, longest: int, cap=None) -> list[str]:
    """Why vLLM would refuse to start this server, which kvsim runs anyway (rejecting, with their reason, the
    requests that cannot fit): a KV pool that holds one request of at most ``longest`` tokens
    (`KVMemory.longest_request`), short of ``max_model_len`` (vLLM's ``check_enough_kv_cache_memory``); a
    token budget below ``max_model_len`` with chunked prefill off (its ``SchedulerConfig`` check); a
    ``--kv-gib`` that no GPU of ``cap`` (the `KVCapacity`) has room for beside the weights; and an MLA model
    that none of vLLM's MLA attention backends takes on that GPU (`block_size_refusal`). Empty if none."""
    reasons = []
    if cap is not None and cap.gpu is not None and (refusal := block_size_refusal(config, cap.model, cap.gpu)):
        reasons.append(refusal)
    if cap is not None and cap.source == "kv_gib" and cap.gpu is not None:
        tp = cap.tensor_parallel
        weights, kv = cap.model.weight_bytes_per_gpu(tp), cap.kv_bytes / tp
        if weights + kv > cap.gpu.memory_bytes:
            reasons.append(f"--kv-gib {cap.kv_gib:g} does not fit beside the weights: {kv / GIB:.2f} GiB of KV and "
                           f"{weights / GIB:.2f} GiB of weights per GPU exceed the {cap.gpu.name}'s "
                           f"{cap.gpu.memory_gib:.1f} GiB (--kv-tokens sizes a pool regardless of the GPU)")
    if longest < max_model_len:
        reasons.append(f"the KV cache holds one request of at most {longest:,} tokens, short of max_model_len "
                       f"{max_model_len:,} (lower --max-model-len to {longest:,} or give more KV memory)")
    budget = config.max_num_batched_tokens
    if config.scheduler == "continuous" and not config.chunked_prefill and budget < max_model_len:
        reasons.append(f"max_num_batched_tokens {budget:,} is below max_model_len {max_model_len:,} with chunked "
                       "prefill off (vLLM's default budget is then max_model_len), so longer prompts and recomputes "
                       "cannot be scheduled")
    return reasons


def cap_outputs(config, workload):
    """``workload`` with the output of each request whose prompt fits ``max_model_len`` but whose prompt +
    output does not cut to ``max_model_len - prompt``, and every ``max_tokens`` past that room lowered to it
    (``config.over_length == "cap"``; vLLM's server takes the least of the two); ``workload`` itself when there
    is nothing to cut, or under ``reject``."""
    if config.over_length != "cap" or not len(workload):
        return workload
    limit = max_model_len_of(config)
    prompt, output = np.asarray(workload.prompt_tokens), np.asarray(workload.output_tokens)
    max_tokens = np.asarray(workload.max_tokens)  # NONE (-1) where the trace gives none
    room = limit - prompt
    fits = room >= 1  # a longer prompt is rejected on arrival
    cut = np.where(fits & (output > room), output - room, 0)
    lower = fits & (max_tokens > room)
    if not cut.any() and not lower.any():
        return workload
    return workload.select(np.arange(len(workload)), output_tokens=output - cut,
                           max_tokens=np.where(lower, room, max_tokens),
                           length_capped=cut if workload.length_capped is None else workload.length_capped + cut)
