"""How hard the property-based tests drive the code: ``KVSIM_SOAK=N`` multiplies their example counts by N
and makes the stateful machines' runs up to 4x longer.

Why: CI runs each hypothesis test with a few dozen examples, enough to catch a broken invariant on every
change, within its time limit; a rare interleaving needs thousands. ``KVSIM_SOAK=20 python -m pytest
tests/allocators`` is the same suite run twenty times as hard, on demand (the README says when it was last run).
"""

import os

_SOAK = os.environ.get("KVSIM_SOAK", "1")
if not _SOAK.isdigit() or int(_SOAK) < 1:
    raise ValueError(f"KVSIM_SOAK must be a whole number >= 1, got {_SOAK!r}")
SOAK = int(_SOAK)


def examples(count: int) -> int:
    """``count`` examples, scaled by ``KVSIM_SOAK``."""
    return count * SOAK


def steps(count: int) -> int:
    """A stateful machine's ``count`` steps a run, up to 4x as many under ``KVSIM_SOAK`` (a long run reaches
    states a short one cannot: a host tier full of swap, caches evicted and refilled several times)."""
    return count * min(SOAK, 4)
