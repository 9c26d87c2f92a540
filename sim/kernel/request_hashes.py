"""The requests table's block-hash columns: what a Mooncake-style run's prefix cache hit on.

``kvsim run --out`` writes a table that ``kvsim calibrate --from-trace`` reads back as a measured run
(`sim.measured`). A request's ``prefix_hashes`` decided which blocks it shared with earlier requests; a table
without them replays every prompt computed in full, and the fit pays for the missing hits with slower
coefficients. So the table carries them as the measured reader reads them: ``hash_ids`` (Mooncake's name) and
``prefix_hash_tokens``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.kernel.parallel_sampling import first_children

HASH_COLUMNS = ("hash_ids", "prefix_hash_tokens")
"""The requests table's last columns, after ``trace_row`` (a fleet's ``replica`` between them)."""


def hash_columns(workload, *, fold: bool = True) -> dict[str, list | pd.arrays.IntegerArray]:
    """``hash_ids``: each request's prefix hashes, space-separated as a CSV cell of Mooncake's ``hash_ids`` is
    (``0 1 2``), NA (None) for none; ``prefix_hash_tokens``: the prompt tokens each hash covers, the workload's
    on every row, NA where the workload has no hashes. On every table, NA where unused, as the table's other
    optional columns (``session_id``, ``prefix_group``, ``trace_row``) are. A fanned-out request's (its
    children's rows folded back, `sim.kernel.parallel_sampling.aggregate`) are its first child's: its own; with
    ``fold`` False, every child's row keeps its own."""
    from workloads.frames import nullable

    values = getattr(workload, "hash_values", None)
    hashed = values is not None and len(values) > 0
    if hashed:
        offsets = np.asarray(workload.hash_offsets, np.int64)
        cells = [" ".join(map(str, h.tolist())) if len(h) else None for h in np.split(values, offsets[1:-1])]
    else:
        cells = [None] * len(workload.output_tokens)
    fan_parent = getattr(workload, "fan_parent", None)
    if fold and fan_parent is not None:
        cells = [cells[i] for i in first_children(fan_parent)]
    unit = np.full(len(cells), workload.prefix_hash_tokens if hashed else 0, np.int64)
    return {"hash_ids": cells, "prefix_hash_tokens": nullable(unit, np.full(len(cells), not hashed))}
