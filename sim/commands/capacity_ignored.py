"""Settings `kvsim capacity` accepts that change none of its figures in some combination, each with the reason.

Why: ``kvsim capacity`` sizes one deployment and fills it with requests of one length, none sharing a prompt, so
some flags that act on a run act on it only sometimes. ``--max-num-batched-tokens`` sizes the activation memory
profiled before a derived KV cache and the prefill chunks whose window blocks vLLM's hybrid KV cache manager frees
chunk by chunk; with ``--kv-tokens`` or ``--kv-gib`` on any other pool it moves nothing. So does
``--enable-expert-parallel``, which only moves weights, under a given KV size, and ``--speculative-config`` of a
method without a drafter model (ngram: no KV layers or weights to size). ``--no-prefix-caching``
sizes only a hybrid Mamba or gated DeltaNet model's pool (vLLM 0.33's ``mamba_cache_mode``: ``MambaModelConfig``
in ``model_executor/models/config.py``); elsewhere vLLM's planner and block size do not read it
(``v1/core/kv_cache_utils.py`` reads it only for prefix-cache hashes and hit granularity). Accepting either in
silence would let a user read the report as the answer to the question the flag asked. They go in the report's
``ignored_settings`` beside a run's (`sim.kernel.ignored_settings`), printed in the same words (`ignored_lines`).
"""

from __future__ import annotations

from sim.kernel.config import SimConfig

KV_SIZE_FLAGS = {"kv_gib": "--kv-gib", "kv_tokens": "--kv-tokens"}
"""A `KVCapacity.source` given by a flag -> that flag (``derived``: neither)."""


def capacity_ignored_settings(config: SimConfig, model, *, kv_source: str, chunked_windows: bool,
                              max_num_batched_tokens: int, speculative_config: str | None = None,
                              drafter_layers: int = 0) -> dict[str, str]:
    """Flag (as given, with its value) -> why it changes nothing in this capacity report (the module docstring).
    ``model``: the catalog model sized; ``kv_source``: the `KVCapacity`'s; ``chunked_windows``: the pool is
    vLLM's hybrid KV cache manager over sliding-window groups, whose prefill chunks bound what a prompt holds;
    ``drafter_layers``: the KV layers ``speculative_config``'s drafter adds (`sim.kernel.spec_decode`).
    Only a value other than the default can be told apart from "not given", so only those are reported."""
    ignored: dict[str, str] = {}
    given = KV_SIZE_FLAGS.get(kv_source)
    if given and config.enable_expert_parallel:
        ignored["--enable-expert-parallel"] = (
            f"{given} gives the KV memory; expert parallelism changes only how much of each GPU the weights take, "
            "which matters only to a KV memory derived from the GPU")
    if speculative_config is not None and drafter_layers == 0:
        ignored[f"--speculative-config {speculative_config}"] = (
            "its method has no drafter model (ngram), so no drafter KV layers or weights share the memory; the "
            "lookahead slots a decode step holds are a run's (kvsim run)")
    if given and max_num_batched_tokens != SimConfig().max_num_batched_tokens and not chunked_windows:
        ignored[f"--max-num-batched-tokens {max_num_batched_tokens}"] = (
            f"{given} gives the KV memory (this only sizes the activation memory reserved before a derived one), "
            "and no layer of this pool frees blocks as a prompt's prefill chunks pass (only vLLM's hybrid KV cache "
            "manager does, paged on a sliding-window model)")
    if not config.prefix_caching and model.mamba is None:
        ignored["--no-prefix-caching"] = (
            "the requests sized share no prompt, so prefix caching changes neither the pool nor the blocks a "
            f"request holds; it sizes only a hybrid Mamba model's pool (vLLM's mamba_cache_mode), and {model.name} "
            "has no Mamba layers")
    return ignored
