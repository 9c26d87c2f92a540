"""The real paged KV cache and kernels over kvsim's block tables, a timing harness, and the calibration fit.

This is the only package that imports torch (the optional ``gpu`` extra). This file itself does not, so that
`needs_torch` can word the refusal wherever torch is missing: in ``kvsim calibrate`` (sim imports gpu_validation,
never the other way) and in the ``python -m gpu_validation...`` commands.
"""

from __future__ import annotations

import sys
from typing import NoReturn


def needs_torch(command: str, exc: ImportError) -> str:
    """The one line that says `command` cannot run without torch and how to install it, `exc` saying what failed
    to import: the same words from every command that needs the ``gpu`` extra."""
    return f"{command} needs torch (pip install 'kvsim[gpu]'): {exc}"


def refuse_without_torch(command: str, exc: ImportError) -> NoReturn:
    """Exit 2 with `needs_torch`'s line on stderr: what a ``python -m gpu_validation...`` command does when its
    ``import torch`` fails, since a traceback from the import would bury the one thing to do."""
    print(f"Error: {needs_torch(command, exc)}", file=sys.stderr)
    raise SystemExit(2)
