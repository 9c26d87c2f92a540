"""``kvsim capacity``: how many tokens of KV memory a deployment has and how many requests really fit.

The request count is not a formula: requests are admitted into a real allocator, each grown to its final
length, until the allocator refuses. That way buddy rounding, the paged null block and partly filled last
blocks all show up exactly as they would in the simulator.
"""

from __future__ import annotations

import json

import click

from allocators.catalog import GIB
from sim.commands.failure import fail
from sim.commands.one_spelling import OneSpellingCommand
from sim.commands.options import (
    ALLOCATOR_NAMES,
    BLOCK_SIZE_HELP,
    catalog_option,
    data_parallel_option,
    decode_context_parallel_option,
    enforce_eager_option,
    expert_parallel_option,
    kv_cache_dtype_option,
    prefix_caching_option,
    vllm_lookalike_options,
    vllm_option,
)


def capacity_report(*, model: str, gpu: str, kv_gib: float | None, kv_tokens: int | None, tensor_parallel: int,
                    gpu_memory_utilization: float, allocator: str, block_size: int | None, placement: str,
                    prompt_len: int | None, output_len: int | None, max_model_len: int | None,
                    page_size_kib: int = 2048, kv_cache_dtype: str = "auto",
                    disable_hybrid_kv_cache_manager: bool = False, enforce_eager: bool = False,
                    max_num_batched_tokens: int = 2048, data_parallel_size: int = 1,
                    enable_expert_parallel: bool = False, speculative_config: str | None = None,
                    decode_context_parallel_size: int = 1, prefix_caching: bool = True) -> dict:
    """The numbers `kvsim capacity` prints, as one dict. Raises ValueError/KeyError with a one-line reason.
    ``speculative_config``: vLLM's engine argument; a drafter's KV layers share every block
    (`sim.kernel.spec_decode`). ``prefix_caching``: vLLM's ``--enable-prefix-caching``, which sizes only a hybrid
    Mamba model's pool (its ``mamba_cache_mode``); the requests sized share no prompt."""
    from allocators import allocator_class, make_allocator
    from allocators.capacity import (
        fill_to_capacity,
        final_tokens,
        kv_capacity,
        pool_bytes_per_token,
        with_drafter_layers,
    )
    from allocators.catalog import get_gpu, get_model
    from allocators.hybrid import HybridPagedAllocator
    from allocators.kv_cache_groups import hybrid_disabled, uses_hybrid_manager
    from allocators.slab_layout import ring_options
    from allocators.vattention import page_options
    from sim.kernel.block_size import scheduler_block_size
    from sim.kernel.config import SimConfig
    from sim.kernel.memory import KVMemory
    from sim.kernel.over_length import vllm_refusals
    from sim.kernel.spec_decode import (
        check_drafter_budget,
        drafter_layers,
        parse_speculative,
        speculative_method,
    )

    spec = get_model(model)
    gpu_spec = get_gpu(gpu)
    max_len = spec.max_seq_len if max_model_len is None else max_model_len
    if max_len <= 0:
        raise ValueError(f"--max-model-len must be positive, got {max_len}")
    if max_num_batched_tokens < 1:
        raise ValueError(f"--max-num-batched-tokens must be >= 1, got {max_num_batched_tokens}")
    _check_lengths(prompt_len, output_len, max_len)
    if prompt_len is None and output_len is None:
        prompt_len, output_len = max_len, 0
    elif prompt_len is None:
        prompt_len = max_len - output_len
    elif output_len is None:
        output_len = max_len - prompt_len
    if prompt_len + output_len > max_len:
        raise ValueError(f"--prompt-len + --output-len = {prompt_len + output_len} exceeds --max-model-len {max_len}")
    draft = k = 0
    if speculative_config is not None:
        method, k = parse_speculative(speculative_config)
        check_drafter_budget(method, k, max_num_batched_tokens)
        if spec.mamba is None:  # a hybrid's after `check_mamba_capacity`, which refuses what is not modelled
            draft = drafter_layers(method, spec)
    if spec.mamba is not None:  # a hybrid Mamba model: its own report (`sim.commands.mamba_capacity`)
        from allocators.mamba_layout import check_mamba_capacity

        check_mamba_capacity(allocator=allocator, kv_cache_dtype=kv_cache_dtype, model=spec.name,
                             disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
                             speculative_method=speculative_method(speculative_config),
                             decode_context_parallel_size=decode_context_parallel_size,
                             prefix_caching=prefix_caching, mamba_kind=spec.mamba.label,
                             checkpoints=not (prefix_caching and speculative_config) or spec.mamba
                             .prefill_checkpoint_alignment(gpu_spec.compute_capability) is not None)
        if speculative_config is not None:  # an MTP drafter's attention layers (`check_mamba_speculation`)
            draft = drafter_layers(method, spec)
    cap = kv_capacity(spec, gpu_spec, tensor_parallel=tensor_parallel, gpu_memory_utilization=gpu_memory_utilization,
                      kv_gib=kv_gib, kv_tokens=kv_tokens, kv_cache_dtype=kv_cache_dtype,
                      max_num_batched_tokens=max_num_batched_tokens, data_parallel=data_parallel_size,
                      expert_parallel=enable_expert_parallel, drafter_layers=draft,
                      decode_context_parallel=decode_context_parallel_size)
    spec = cap.model  # at --kv-cache-dtype
    config = SimConfig(allocator=allocator, block_size=block_size, placement=placement, page_size_kib=page_size_kib,
                       kv_gib=kv_gib, kv_tokens=kv_tokens, gpu_memory_utilization=gpu_memory_utilization,
                       enforce_eager=enforce_eager, disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
                       tensor_parallel=tensor_parallel, data_parallel_size=data_parallel_size,
                       enable_expert_parallel=enable_expert_parallel,
                       decode_context_parallel_size=decode_context_parallel_size, prefix_caching=prefix_caching)
    if spec.mamba is not None:
        from sim.commands.mamba_capacity import mamba_capacity_report

        return mamba_capacity_report(cap, block_size=block_size, prompt_len=prompt_len, output_len=output_len,
                                     max_model_len=max_len, prefix_caching=prefix_caching,
                                     num_speculative_tokens=k, drafter_layers=draft) | _notes(
            config, max_model_len, spec, cap, False, max_num_batched_tokens)
    pages = page_options(allocator_class(allocator), spec, page_size_kib, cap.kv_tokens, tensor_parallel)
    pool_groups = with_drafter_layers(spec, draft).kv_groups()  # a drafter's layers join the full group
    hybrid = uses_hybrid_manager(allocator, pool_groups, hybrid_disabled(disable_hybrid_kv_cache_manager, pool_groups,
                                                                         drafter=bool(draft)))
    block_size = scheduler_block_size(config, spec, gpu_spec)  # vLLM's scheduler's (an MLA backend's x DCP)
    if hybrid:  # as `kvsim run` does: vLLM's hybrid KV cache manager, windows freeing as requests decode
        alloc = HybridPagedAllocator(cap.kv_tokens, kv_groups=pool_groups, block_size=block_size,
                                     max_model_len=max_len, max_num_batched_tokens=max_num_batched_tokens)
    else:
        alloc = make_allocator(allocator, cap.kv_tokens, block_size=block_size, max_model_len=max_len,
                               placement=placement, **pages, **ring_options(allocator_class(allocator), spec))
    refusals = vllm_refusals(config, max_len, KVMemory(alloc).longest_request(max_len), cap)
    reason = alloc.never_fits(prompt_len, final_tokens=final_tokens(prompt_len, output_len))
    count = 0 if reason else fill_to_capacity(alloc, prompt_len, output_len, max_num_batched_tokens)
    alloc.check_invariants()
    shares = alloc.breakdown(waiting=True).shares
    paged = alloc.kind == "paged"
    return {
        "model": spec.name,
        "gpu": gpu_spec.name,
        "tensor_parallel": tensor_parallel,
        "kv_source": cap.source,
        "kv_bytes": cap.kv_bytes,
        "kv_gib": cap.kv_gib,
        "kv_cache_dtype": spec.kv_cache_dtype,  # as stored: the flag's, else a catalog entry's own, else auto
        "kv_cache_dtype_flag": kv_cache_dtype.lower(),
        "kv_bytes_per_token": spec.kv_bytes_per_token,
        "kv_groups": [g.to_dict() for g in spec.kv_groups()],
        "kv_pool_bytes_per_token": pool_bytes_per_token(spec, tensor_parallel, draft, decode_context_parallel_size),
        "drafter_layers": draft,
        "kv_capacity_tokens": cap.kv_tokens,
        **_parallel_figures(cap),
        "kv_capacity_blocks": alloc.num_blocks if paged else None,
        "kv_cache_groups": [g.name for g in alloc.groups] if hybrid else None,
        "usable_blocks": alloc.num_usable_blocks if paged else None,
        "allocator": allocator,
        "block_size": block_size if paged else None,
        "placement": None if paged or pages else placement,
        "page_size_kib": page_size_kib if pages else None,
        "page_tokens": pages.get("page_tokens"),
        "kv_capacity_pages": pages.get("num_pages"),
        "max_model_len": max_len,
        "prompt_len": prompt_len,
        "output_len": output_len,
        "max_concurrent_requests": count,
        "never_fits": reason,
        "unusable_frac": 1.0 - shares["token_states"],
        "breakdown": shares,
    } | _notes(config, max_model_len, spec, cap, hybrid, max_num_batched_tokens, speculative_config) | (
        {"vllm_would_refuse": refusals} if refusals else {})


def _parallel_figures(cap) -> dict:
    """The deployment's GPUs and what each holds: ``kv_capacity_tokens`` is one data-parallel rank's pool (each
    rank has its own), ``kv_capacity_tokens_total`` all ranks' together (the tokens the deployment holds at once)
    and ``kv_capacity_tokens_per_gpu`` that total over every GPU: the figure that compares tensor with data
    parallelism, since MLA's latent is kept whole on every GPU of a rank (`allocators.capacity.pool_bytes_per_token`);
    ``decode_context_parallel_size``: the GPUs of a rank each token's KV is sharded over, which makes it whole once
    per that many GPUs (`allocators.decode_context_parallel`)."""
    total = cap.kv_tokens * cap.data_parallel
    gpus = cap.tensor_parallel * cap.data_parallel
    return {"data_parallel_size": cap.data_parallel, "enable_expert_parallel": cap.expert_parallel, "gpus": gpus,
            "decode_context_parallel_size": cap.decode_context_parallel,
            "weight_gib_per_gpu": cap.weight_bytes_per_gpu / GIB if cap.source == "derived" else None,
            "kv_capacity_tokens_total": total, "kv_capacity_tokens_per_gpu": total // gpus}


def _notes(config, max_model_len: int | None, spec, cap, hybrid: bool, max_num_batched_tokens: int,
           speculative_config: str | None = None) -> dict:
    """What `kvsim run` would say of the same settings (``config``: a `SimConfig` of the fields given):
    ``ignored_settings`` (a block size or placement the allocator has no use for, a utilization under a given KV
    size, ...; with those only capacity ignores, `sim.commands.capacity_ignored`), ``memory_omits`` (window
    layers an allocator keeps whole) and ``beyond_model_context`` (a ``--max-model-len`` past the model's own
    context), each only when there is something to say, so that the two commands do not disagree in silence.
    ``cap``: the `KVCapacity` sized; ``hybrid``: the pool is vLLM's hybrid KV cache manager over window groups."""
    from allocators import allocator_class
    from allocators.slab_layout import ring_options
    from sim.commands.capacity_ignored import capacity_ignored_settings
    from sim.kernel.ignored_settings import ignored_settings
    from sim.kernel.memory_omits import memory_omits
    from sim.kernel.over_length import beyond_model_context

    notes: dict = {}
    own = capacity_ignored_settings(config, spec, kv_source=cap.source, chunked_windows=hybrid,
                                    max_num_batched_tokens=max_num_batched_tokens,
                                    speculative_config=speculative_config, drafter_layers=cap.drafter_layers)
    run = ignored_settings(config, hybrid, model=spec)  # its words first where both would say it
    if ignored := run | {flag: why for flag, why in own.items() if flag not in run}:
        notes["ignored_settings"] = ignored
    rings = bool(ring_options(allocator_class(config.allocator), spec))
    if omits := memory_omits(config, spec, window_rings=rings):
        notes["memory_omits"] = list(omits)
    if note := beyond_model_context(max_model_len, spec):
        notes["beyond_model_context"] = note
    return notes


def _check_lengths(prompt_len: int | None, output_len: int | None, max_len: int) -> None:
    """Refuse a bad ``--prompt-len``/``--output-len`` before the missing one is derived from
    ``--max-model-len``, naming only what the user gave: a derived length in the message (``got -5 and 2053``)
    reads as a value they passed. A given output of all of ``--max-model-len`` leaves no prompt to derive."""
    if prompt_len is not None and prompt_len < 1:
        raise ValueError(f"--prompt-len must be positive, got {prompt_len}")
    if output_len is not None and output_len < 0:
        raise ValueError(f"--output-len must be non-negative, got {output_len}")
    for flag, length in (("--prompt-len", prompt_len), ("--output-len", output_len)):
        if length is not None and length > max_len:
            raise ValueError(f"{flag} {length} exceeds --max-model-len {max_len}")
    if prompt_len is None and output_len == max_len:
        raise ValueError(f"--output-len {output_len} leaves no prompt token within --max-model-len {max_len} "
                         "(a request needs at least one)")


def _dtype_text(r: dict) -> str:
    """How the KV is stored: the flag, or, where they differ, a ``--catalog`` model entry's own
    ``kv_cache_dtype`` (an fp8 entry stays fp8 under the flag's default ``auto``)."""
    if r["kv_cache_dtype"] == r["kv_cache_dtype_flag"]:
        return f"--kv-cache-dtype {r['kv_cache_dtype']}"
    return f"stored as {r['kv_cache_dtype']} (the model entry's kv_cache_dtype; --kv-cache-dtype auto keeps it)"


def _print_text(r: dict) -> None:
    if "mamba_pool" in r:
        from sim.commands.mamba_capacity import print_mamba_text

        return print_mamba_text(r)
    where = {"kv_gib": "given by --kv-gib", "kv_tokens": "given by --kv-tokens"}.get(
        r["kv_source"], f"derived from {r['tensor_parallel']} x {r['gpu']}"
        + (f" per data-parallel rank{' with expert parallelism' * r['enable_expert_parallel']}"
           if r["data_parallel_size"] > 1 else ""))
    click.echo(f"model {r['model']}: KV memory {r['kv_gib']:.2f} GiB ({where})")
    click.echo(f"KV bytes per token: {r['kv_bytes_per_token']:,} ({r['kv_bytes_per_token'] / 1024:.1f} KiB), "
               + _dtype_text(r))
    for g in r["kv_groups"]:
        span = "chunk" if g["attention"] == "chunked_local" else "window"
        window = f", {span} {g['window']:,} tokens" if g["window"] is not None else ""
        indexer = (f" ({g['indexer_bytes_per_token']:,} of them the sparse-attention indexer's keys)"
                   if g.get("indexer_bytes_per_token") else "")
        click.echo(f"  group {g['name']}: {g['layers']} {g['attention']} layers{window}, "
                   f"{g['bytes_per_token']:,} bytes per token{indexer}")
    dcp = r["decode_context_parallel_size"]
    sharded = f", sharded over {dcp} GPUs by decode context parallelism" if dcp > 1 else ""
    if r["kv_pool_bytes_per_token"] != r["kv_bytes_per_token"]:
        click.echo(f"  {r['kv_pool_bytes_per_token']:,} bytes of the {r['tensor_parallel']} GPUs' memory per token "
                   f"(GPUs keep copies: MLA's latent, or fewer KV heads than GPUs{sharded})")
    elif dcp > 1:
        click.echo(f"  {r['kv_pool_bytes_per_token']:,} bytes of the {r['tensor_parallel']} GPUs' memory per token"
                   f"{sharded}")
    ranks = r["data_parallel_size"] > 1
    each = " per data-parallel rank" if ranks else ""
    click.echo(f"KV capacity: {r['kv_capacity_tokens']:,} tokens{each}"
               + (f" (each rank its own pool), {r['kv_capacity_tokens_total']:,} on all {r['data_parallel_size']}"
                  if ranks else ""))
    if r["gpus"] > 1:
        click.echo(f"  {r['kv_capacity_tokens_per_gpu']:,} tokens per GPU of {r['gpus']}"
                   + (f", each holding {r['weight_gib_per_gpu']:.2f} GiB of weights"
                      if r["weight_gib_per_gpu"] is not None else ""))
    if r["kv_capacity_blocks"] is not None:
        click.echo(f"  {r['kv_capacity_blocks']:,} blocks of {r['block_size']}"
                   + (f" ({r['block_size'] // dcp} on each of {dcp} decode-context-parallel GPUs)" if dcp > 1 else "")
                   + f" ({r['usable_blocks']:,} usable; block 0 is the null block)")
    if r["kv_cache_groups"]:
        click.echo(f"  one pool shared by {len(r['kv_cache_groups'])} KV cache groups of equal layer count "
                   f"({', '.join(r['kv_cache_groups'])}): a block holds {r['block_size']} tokens of one group's layers")
    if r["kv_capacity_pages"] is not None:
        click.echo(f"  {r['kv_capacity_pages']:,} page sets of {r['page_tokens']} tokens ({r['page_size_kib']} KiB "
                   "per layer per K/V tensor)")
    layout = f"block size {r['block_size']}" if r["placement"] is None else f"{r['placement']} placement"
    if r["kv_capacity_pages"] is not None:
        layout = f"{r['page_tokens']}-token pages"
    click.echo(f"allocator {r['allocator']} ({layout}); requests of {r['prompt_len']} prompt + "
               f"{r['output_len']} output tokens")
    click.echo(f"max concurrent requests: {r['max_concurrent_requests']:,}{each}")
    if r["never_fits"]:
        click.echo(f"  no request fits: {r['never_fits']}")
    b = r["breakdown"]
    click.echo(f"unusable memory at that load: {r['unusable_frac']:.2%} (reservation {b['reservation']:.2%}, "
               f"internal fragmentation {b['internal_frag']:.2%}, external fragmentation and free "
               f"{b['external_frag'] + b['free']:.2%})")


@click.command("capacity", cls=OneSpellingCommand)
@click.option("--model", default="opt-13b", show_default=True, help="Model name from the catalog.")
@click.option("--gpu", default="a100-40gb", show_default=True, help="GPU name from the catalog.")
@click.option("--kv-gib", type=float, default=None,
              help="KV memory in GiB, all --tensor-parallel GPUs together (instead of deriving it).")
@click.option("--kv-tokens", type=int, default=None,
              help="KV memory in token slots, the whole pool (instead of deriving it).")
@vllm_option("--tensor-parallel", "tensor_parallel", type=int, default=1, show_default=True,
             help="GPUs the model is split over.")
@click.option("--gpu-memory-utilization", type=float, default=0.9, show_default=True,
              help="Share of GPU memory vLLM may use (weights + activations + KV).")
@data_parallel_option
@expert_parallel_option
@decode_context_parallel_option
@kv_cache_dtype_option
@click.option("--allocator", default="paged", show_default=True, help=f"{ALLOCATOR_NAMES}.")
@click.option("--block-size", type=int, default=None, help=BLOCK_SIZE_HELP)
@click.option("--placement", default="buddy", show_default=True, help="Slab placement (contiguous).")
@click.option("--page-size-kib", type=int, default=2048, show_default=True,
              help="Page size of the vattention allocator, KiB per layer per K/V tensor (64, 128, 256, 2048).")
@click.option("--prompt-len", type=int, default=None,
              help="Prompt tokens per request [default: the rest of --max-model-len, or all of it].")
@click.option("--output-len", type=int, default=None,
              help="Output tokens per request [default: the rest of --max-model-len, or 0].")
@click.option("--max-model-len", type=int, default=None, help="Maximum sequence length [default: the model's].")
@catalog_option
@enforce_eager_option
@click.option("--max-num-batched-tokens", type=int, default=2048, show_default=True,
              help="Tokens per step (vLLM's flag): sizes the activation memory reserved before the KV cache, and "
                   "the chunks a prompt is prefilled in (a sliding-window layer holds the window and one chunk).")
@prefix_caching_option
@click.option("--disable-hybrid-kv-cache-manager", is_flag=True,
              help="Treat sliding-window (and chunked-local) layers as full attention (vLLM's flag; paged on a "
                   "hybrid model).")
@click.option("--speculative-config", type=str, default=None, metavar="JSON",
              help="vLLM's speculative decoding (as `kvsim run`'s): a drafter of method eagle, eagle3 or mtp adds "
                   "its KV layers to every block (1 for eagle/eagle3, the model's num_nextn_predict_layers for "
                   "mtp) and its weights to the memory, so fewer slots fit; ngram adds nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@vllm_lookalike_options
def capacity(catalog: str | None, as_json: bool, **options: object) -> None:
    """KV capacity of a deployment and how many requests of a given length fit at once."""
    from sim.kernel.ignored_settings import ignored_lines

    try:
        report = capacity_report(**options)
    except (ValueError, KeyError) as exc:
        fail(exc)  # a KeyError's message is its argument: fail unwraps it
    if as_json:
        click.echo(json.dumps(report, sort_keys=True))
    else:
        _print_text(report)
    for line in ignored_lines(report):
        click.echo(f"Warning: {line}", err=True)
    for why in report.get("vllm_would_refuse", []):
        click.echo(f"Warning: {report['allocator']}: vLLM would refuse to start this server: {why}", err=True)
    for what in report.get("memory_omits", []):
        click.echo(f"Note: {report['allocator']}'s KV memory omits {what}", err=True)
    if note := report.get("beyond_model_context"):
        click.echo(f"Note: {note}", err=True)


COMMANDS = [capacity]
