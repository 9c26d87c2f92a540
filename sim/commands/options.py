"""Flags that several commands share, declared once so that one concept has one name on every command.

Old spellings stay accepted as hidden aliases (`AliasOption`): ``--trace-columns``, ``trace stats --format``;
``compare --allocators`` is a hidden option of its own, so that giving it with ``--allocator`` is an error.
vLLM's spellings of kvsim's flags (``--tensor-parallel-size``, `sim.kernel.vllm_names`) are not old names but
another engine's, so ``--help`` shows them on kvsim's line (`vllm_option`); the vLLM flags that only look like
one of kvsim's are hidden options that fail saying why (`vllm_lookalike_options`).
``--catalog`` (or ``$KVSIM_CATALOG``) is read as soon as it is parsed, so every later lookup of ``--model`` and
``--gpu`` in the command sees its entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from sim.commands.failure import fail
from sim.kernel.vllm_names import VLLM_LOOKALIKES, VLLM_SHORT_FLAGS, lookalike_message, vllm_names_of

ALLOCATOR_NAMES = ("contiguous-max, contiguous-pow2, contiguous-oracle, paged, paged-cow, vattention or radix")
"""Every name in `allocators.ALLOCATORS`, for --allocator's help without importing the allocators (a test
keeps the two in step)."""
TRACE_FORMAT_HELP = ("Read the trace as this format (azure, mooncake, burstgpt, vidur or kvsim) instead of "
                     "detecting it from the columns; with --columns, the default is kvsim's own (seconds).")
COLUMNS_HELP = ("Column mapping for the trace: field=column[,field=column...] (e.g. prompt_tokens=input_len). "
                "The file is then read as kvsim's canonical format (arrival times in seconds) unless "
                "--trace-format names another.")

BLOCK_SIZE_HELP = ("Tokens per KV block (paged allocators; also the cost model's kernel overhead) [default: vLLM's "
                   "choice: 16, or for an MLA model the block size of the attention backend vLLM serves it with, "
                   "e.g. 64 for fp8 latents on an H100; a given size, 16 included, is kept as vLLM keeps it].")
"""``--block-size``'s help: not given and given 16 differ, as in vLLM (`sim.kernel.block_size`)."""


class AliasOption(click.Option):
    """An option whose first flag is its name in ``--help``; the other flags still work (old spellings)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        opts = self.opts
        self.opts = opts[:1]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = opts


def alias_option(*names: str, **kwargs: Any) -> Callable[[Any], Any]:
    """``click.option`` whose flags after the first are hidden aliases."""
    return click.option(*names, cls=AliasOption, **kwargs)


def vllm_spellings(field: str, flag: str) -> tuple[str, ...]:
    """vLLM's spellings of the flag ``flag`` that sets ``field`` (`sim.kernel.vllm_names`), as further click
    declarations, so that ``--help`` shows them on kvsim's line and a pasted vLLM command line is read:
    ``--tensor-parallel-size``, ``-tp``; for an on/off pair (``flag`` holds a '/'),
    ``--enable-prefix-caching/--no-enable-prefix-caching``."""
    spellings = []
    for name in vllm_names_of(field):
        dashed = name.replace("_", "-")
        spellings.append(f"--{dashed}/--no-{dashed}" if "/" in flag else f"--{dashed}")
    if short := VLLM_SHORT_FLAGS.get(field):
        spellings.append(short)
    return tuple(spellings)


def vllm_option(flag: str, field: str, **kwargs: Any) -> Callable[[Any], Any]:
    """``click.option`` for ``field`` under kvsim's ``flag`` and vLLM's spellings of it (`vllm_spellings`)."""
    return click.option(flag, *vllm_spellings(field, flag), field, **kwargs)


def _refuse_lookalike(ctx: click.Context, param: click.Parameter, value: object) -> None:
    if value is not None:
        fail(lookalike_message(param.name or ""))


def vllm_lookalike_options(func: Any) -> Any:
    """Hidden options for the vLLM flags kvsim does not alias (`VLLM_LOOKALIKES`): given, each fails saying why
    kvsim's nearest setting is not it, rather than click's bare "No such option" pointing at that setting."""
    for name in VLLM_LOOKALIKES:
        func = click.option(f"--{name.replace('_', '-')}", name, hidden=True, expose_value=False,
                            callback=_refuse_lookalike)(func)
    return func


def _read_catalog(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        from allocators.catalog_file import register_catalog_file

        try:
            register_catalog_file(value)
        except ValueError as exc:
            fail(exc)
    return value


catalog_option = click.option(
    "--catalog", type=click.Path(dir_okay=False), envvar="KVSIM_CATALOG", callback=_read_catalog,
    is_eager=True, help="TOML file of extra models and GPUs ([models.NAME], [gpus.NAME] tables with the fields "
                        "of allocators/catalog.py); default $KVSIM_CATALOG.")
"""``--catalog FILE`` for every command that takes ``--model`` or ``--gpu``."""

kv_cache_dtype_option = click.option(
    "--kv-cache-dtype", default="auto", show_default=True,
    help="How KV is stored (vLLM's flag): auto (the model's dtype), fp16, bf16 or fp8 (also vLLM's fp8_e4m3, "
         "fp8_e5m2); fp8 halves a token's bytes, so the same memory holds twice the tokens. vLLM 0.33's packed "
         "formats cost what their backends pack, scales included: int8_per_token_head, fp8_per_token_head, "
         "int4_per_token_head, nvfp4, nvfp4_4over6 (Blackwell only), turboquant_k8v4, turboquant_4bit_nc, "
         "turboquant_k3v4_nc, turboquant_3bit_nc (first and last two layers kept at the model dtype), and for "
         "sparse MLA fp8_ds_mla, nvfp4_ds_mla (Blackwell only); fp8_inc (Intel Gaudi) and octave_k3v4, "
         "octave_k3v3, octave_k3v3_compact, ultraquant_4bit (AMD ROCm) are refused, as vLLM stores them on no "
         "NVIDIA GPU.")
"""``--kv-cache-dtype`` for every command that sizes KV memory (the `SimConfig` field of the same name)."""

enforce_eager_option = click.option(
    "--enforce-eager", is_flag=True,
    help="No CUDA graphs (vLLM's flag). Accepted and reported ignored: vLLM 0.11 sizes the KV cache before it "
         "captures graphs, and kvsim's clock does not change with it.")
"""``--enforce-eager`` for the commands that size KV memory as vLLM does (``run``, ``compare``, ``capacity``)."""

trace_format_option = alias_option("--trace-format", "--format", "trace_format", default=None,
                                   help=TRACE_FORMAT_HELP)
"""``--trace-format`` for commands without an output format (``trace stats``: ``--format`` is its old name)."""

columns_option = alias_option("--columns", "--trace-columns", "trace_columns", default=None, help=COLUMNS_HELP)

DATA_PARALLEL_HELP = ("Engines of --tensor-parallel GPUs each, every one with its own scheduler and KV pool, behind "
                      "vLLM's data-parallel load balancer (--router dp-lb, the default then); vLLM's flag. On a "
                      "mixture of experts the routed experts are split over all of their GPUs (vLLM's MoE group of "
                      "DP x TP GPUs). Sets --replicas to the same number (another --replicas is refused).")
data_parallel_option = vllm_option("--data-parallel-size", "data_parallel_size", type=int, default=1,
                                   show_default=True, help=DATA_PARALLEL_HELP)
"""``--data-parallel-size`` (and vLLM's ``-dp``) for the commands that size KV memory (the `SimConfig` field of the same name)."""

EXPERT_PARALLEL_HELP = ("Hold a mixture of experts' routed experts whole, E / (DP x TP) on each GPU, where without "
                        "it each GPU holds that share of every expert (vLLM's flag): the same memory when the GPUs "
                        "divide the experts evenly; refused on a dense model.")
expert_parallel_option = vllm_option("--enable-expert-parallel", "enable_expert_parallel", is_flag=True,
                                     help=EXPERT_PARALLEL_HELP)
"""``--enable-expert-parallel`` (and vLLM's ``-ep``; the `SimConfig` field of the same name)."""

DECODE_CONTEXT_PARALLEL_HELP = ("Shard each request's KV over this many of the --tensor-parallel GPUs, interleaved, "
                                "instead of copying what tensor parallelism copies (an MLA model's latent, GQA heads "
                                "on more GPUs than KV heads): N times the tokens in the same memory, in blocks of "
                                "N x --block-size tokens (vLLM's flag; --allocator paged or paged-cow).")
decode_context_parallel_option = vllm_option("--decode-context-parallel-size", "decode_context_parallel_size",
                                             type=int, default=1, show_default=True,
                                             help=DECODE_CONTEXT_PARALLEL_HELP)
"""``--decode-context-parallel-size`` (and vLLM's ``-dcp``; the `SimConfig` field of the same name)."""


class _IntOrNone(click.ParamType):
    """An integer, or ``None`` spelled out (vLLM's engine arguments of type ``int | None`` parse it so)."""

    name = "INTEGER|None"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        if value is None or isinstance(value, int):
            return value
        if str(value) == "None":
            return None
        try:
            return int(value)
        except ValueError:
            self.fail(f"{value!r} is neither an integer nor None", param, ctx)


RETENTION_HELP = ("Which full blocks a sliding-window KV cache group keeps in the prefix cache (vLLM 0.33's flag): "
                  "0 only those a hit can end on, before the prompt's last token and a shared prefix's end; K > 0 "
                  "also one window's worth every K tokens (a multiple of --block-size); None every block "
                  "(vLLM before 0.33). Full-attention groups keep every block either way. Mamba states (prefix "
                  "caching on) likewise, one state a boundary (None: every full state). With prefix caching off "
                  "a Mamba model accepts only 0, None or a multiple of lcm(block size, max_model_len), which "
                  "does nothing (vLLM's check).")
retention_option = vllm_option("--prefix-cache-retention-interval", "prefix_cache_retention_interval",
                               type=_IntOrNone(), default=0, show_default=True, help=RETENTION_HELP)
"""``--prefix-cache-retention-interval`` (the `SimConfig` field of the same name)."""

PREFIX_CACHING_HELP = ("Automatic prefix caching (vLLM's flag; on by default, as in vLLM v1). On a hybrid Mamba or "
                       "gated DeltaNet model it is vLLM's mamba_cache_mode: on, 'align' (the block size also a "
                       "multiple of the layers' prefill checkpoint grid: 64 tokens for gated DeltaNet on Hopper); "
                       "off, 'none'.")
prefix_caching_option = vllm_option("--prefix-caching/--no-prefix-caching", "prefix_caching", default=True,
                                    show_default=True, help=PREFIX_CACHING_HELP)
"""``--prefix-caching`` (and vLLM's ``--enable-prefix-caching``; the `SimConfig` field of the same name) for
``kvsim capacity``, whose requests share no prompt: it sizes a hybrid Mamba model's pool there."""
