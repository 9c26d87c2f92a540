"""The real paged KV cache and kernels over kvsim's block tables, a timing harness, and the calibration fit.

This is the only package that imports torch (the optional ``gpu`` extra). This file itself does not, so that
`needs_torch` can word the refusal wherever torch is missing: in ``kvsim calibrate`` (sim imports gpu_validation,
never the other way) and in the ``python -m gpu_validation...`` commands, whose option types are here too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, TypeVar

if TYPE_CHECKING:
    from allocators.catalog import ModelSpec

T = TypeVar("T")


def needs_torch(command: str, exc: ImportError) -> str:
    """The one line that says `command` cannot run without torch and how to install it, `exc` saying what failed
    to import: the same words from every command that needs the ``gpu`` extra."""
    return f"{command} needs torch (pip install 'kvsim[gpu]'): {exc}"


def refuse_without_torch(command: str, exc: ImportError) -> NoReturn:
    """Exit 2 with `needs_torch`'s line on stderr: what a ``python -m gpu_validation...`` command does when its
    ``import torch`` fails, since a traceback from the import would bury the one thing to do."""
    print(f"Error: {needs_torch(command, exc)}", file=sys.stderr)
    raise SystemExit(2)


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number >= 1 (a batch, a block size), else the parser's one-line error naming
    the option, where a batch of 0 failed deep in torch and a negative block size made a negative tensor."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def catalog_model(name: str) -> ModelSpec:
    """An argparse ``type``: a catalog model by name, else the parser's one-line error listing the known ones (the
    catalog's KeyError was a traceback)."""
    from allocators.catalog import UnknownNameError, get_model

    try:
        return get_model(name)
    except UnknownNameError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def comma_list(item: Callable[[str], T]) -> Callable[[str], list[T]]:
    """An argparse ``type`` of comma-separated values, each read by ``item`` (``--batches 1,8,32``)."""
    def parse(text: str) -> list[T]:
        return [item(part.strip()) for part in text.split(",")]

    return parse
