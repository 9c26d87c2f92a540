"""`OneSpellingCommand`: a command that refuses two spellings of one setting on one command line.

Several options have more than one flag: vLLM's spellings of kvsim's (``--tensor-parallel-size`` beside
``--tensor-parallel``, `sim.kernel.vllm_names`) and old names (``--trace-columns``). click reads them as one
option and keeps the last value given, so ``--tensor-parallel 1 --tensor-parallel-size 2`` would run on two
GPUs with nothing said, though the two flags plainly disagree: most likely a vLLM command line pasted after
kvsim's own flags. Refused instead, naming both flags, as a sweep grid refuses two spellings of one field
(`sim.sweep.grid.parse_flag_tokens`). One flag repeated under the same spelling (``--seed 1 --seed 2``, or
``--prefix-caching --no-prefix-caching``) keeps click's behaviour: the last one wins.
"""

from __future__ import annotations

from collections.abc import Iterable

import click

from sim.commands.failure import fail


def _spellings(param: click.Option) -> dict[str, str]:
    """Every flag of ``param`` -> the spelling it belongs to: an on/off pair declared as ``--x/--no-x`` is one
    spelling (click keeps the pair's halves at the same index of ``opts`` and ``secondary_opts``)."""
    spelling = {opt: opt for opt in param.opts}
    if len(param.secondary_opts) == len(param.opts):
        spelling.update(zip(param.secondary_opts, param.opts, strict=True))
    else:
        spelling.update({opt: opt for opt in param.secondary_opts})
    return spelling


def _takes_values(param: click.Option) -> int:
    """How many tokens after its flag ``param`` reads as its value (0 for a flag or a counter)."""
    return 0 if param.is_flag or param.count else param.nargs


def two_spellings(params: Iterable[click.Parameter], args: list[str]) -> tuple[str, str, str] | None:
    """The first option that ``args`` set under two spellings, as (its name, the flag first given, the other
    flag as given), or None. Tokens are read as click reads them: ``--flag=value`` or ``--flag value``, the
    value skipped whatever it looks like; nothing after ``--`` is a flag."""
    flags: dict[str, tuple[click.Option, str]] = {}
    for param in params:
        if isinstance(param, click.Option):  # every option, so that each one's value is skipped
            flags.update({flag: (param, spelling) for flag, spelling in _spellings(param).items()})
    first: dict[str, tuple[str, str]] = {}  # option name -> (its spelling, the flag as given)
    i = 0
    while i < len(args) and args[i] != "--":
        flag, eq, _ = args[i].partition("=")
        i += 1
        if flag not in flags:
            continue
        param, spelling = flags[flag]
        name = param.name or flag
        if name in first and first[name][0] != spelling:
            return name, first[name][1], flag
        first.setdefault(name, (spelling, flag))
        i += 0 if eq else _takes_values(param)
    return None


class OneSpellingCommand(click.Command):
    """A click command whose options each take one spelling per command line (`two_spellings`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if (clash := two_spellings(self.get_params(ctx), args)) is not None:
            name, given, other = clash
            fail(f"{given} and {other} both set {name} (two spellings of one setting); give one")
        return super().parse_args(ctx, args)
