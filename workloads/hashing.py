"""Deterministic integer hashing for prefix identity.

Python's ``hash()`` of a string is salted per process, so block hashes built on it would differ between runs;
the simulator's outputs must be byte-identical across processes. We use the SplitMix64 finaliser, a cheap and
well-mixed 64-bit bijection, on plain integers, in a scalar form (for chaining over a few hash units) and a
numpy form (for the many blocks of a long prompt). Results are kept to 63 bits so they fit an int64 column.
"""

from __future__ import annotations

import numpy as np

MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def mix(a: int, b: int) -> int:
    """Hash the ordered pair ``(a, b)`` of non-negative ints to a 64-bit int (order matters)."""
    z = ((a * _GAMMA) ^ (b + _GAMMA)) & MASK64
    z = ((z ^ (z >> 30)) * _M1) & MASK64
    z = ((z ^ (z >> 27)) * _M2) & MASK64
    return z ^ (z >> 31)


def mix_array(a: int | np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise `mix` of ``a`` (an int or an array) and ``b`` (an array), as uint64 (wrapping is the point).

    In place on one fresh array, and with the only scalar product (``a * GAMMA`` for an int ``a``) done in
    Python: numpy array arithmetic wraps silently, so no ``np.errstate`` (a context switch costing more than
    the arithmetic on a prompt's few hundred blocks) is needed."""
    z = np.asarray(b).astype(np.uint64)
    z += _GAMMA64
    if isinstance(a, int):
        z ^= np.uint64((a * _GAMMA) & MASK64)
    else:
        a64 = np.asarray(a).astype(np.uint64)
        a64 *= _GAMMA64
        z ^= a64
    t = np.empty_like(z)
    for shift, factor in _ROUNDS:
        np.right_shift(z, shift, out=t)
        z ^= t
        if factor is not None:
            z *= factor
    return z


_GAMMA64 = np.uint64(_GAMMA)
_ROUNDS = ((np.uint64(30), np.uint64(_M1)), (np.uint64(27), np.uint64(_M2)), (np.uint64(31), None))
"""`mix`'s finaliser steps: ``z ^= z >> shift``, then ``z *= factor``."""
