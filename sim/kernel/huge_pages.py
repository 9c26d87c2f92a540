"""numpy's transparent-huge-page hint off where kvsim builds large arrays: the `kvsim` command's run, and the
memory-map table (`Recorder.memory_frame`) wherever it is built.

numpy asks the kernel for transparent huge pages (``madvise(MADV_HUGEPAGE)``) on every array of 4 MiB or more.
Where the kernel then compacts memory on each fault (``defrag`` set to ``madvise``, common on virtual
machines) and still fails to find huge pages, first touching such an array costs ten times as much: on the
2-core development VM a fresh 80 MB array took 0.32-0.51 s with the hint and 0.04 s without, and a Mooncake
run's 4-million-row memory-map table 1.30 s against 0.13 s. kvsim's large arrays are tables built once and
written out, which gain nothing from huge pages, so the command turns the hint off for its run, and building
the memory table turns it off for that alone (a library user's own arrays keep numpy's default), each putting
it back after; ``NUMPY_MADVISE_HUGEPAGE`` set in the environment (numpy's own switch) is left to rule.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


def _hint_setter():
    """numpy's private switch (``_set_madvise_hugepage(bool) -> previous``), or None where numpy has none."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # numpy 1.x
        try:
            from numpy.core.multiarray import _set_madvise_hugepage
        except ImportError:
            return None
    return _set_madvise_hugepage


set_huge_page_hint = _hint_setter()
"""``set_huge_page_hint(on) -> previous``: numpy's switch (None where this numpy has none)."""


@contextmanager
def without_huge_page_hint() -> Iterator[None]:
    """numpy's huge-page hint off inside the block (unless the environment sets numpy's switch)."""
    if set_huge_page_hint is None or "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        yield
        return
    previous = set_huge_page_hint(False)
    try:
        yield
    finally:
        set_huge_page_hint(previous)
