"""Slot-level pictures of a paged pool, drawn from its block tables: who owns each slot (`memory_map`) and
what each slot holds (`slot_states`). Plain functions of the tables, so the allocator's file keeps only its
state changes; `paged-cow` paints its registered prefixes over them."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain

import numpy as np

from allocators.base import FREE_OWNER, OVERHEAD_OWNER, SHARED_OWNER, SLOT_FREE, SLOT_OVERHEAD, fill_states


def owner_map(capacity: int, block_size: int, num_blocks: int, tables: Mapping[int, list[int]],
              ref: list[int]) -> np.ndarray:
    """Owner of every slot: the sequence whose table holds its block alone, `SHARED_OWNER` for a block more
    than one holds, `OVERHEAD_OWNER` for the null block and the tail no block covers, else `FREE_OWNER`."""
    bs = block_size
    owners = np.full(capacity, FREE_OWNER, dtype=np.int64)
    owners[:bs] = OVERHEAD_OWNER
    owners[num_blocks * bs:] = OVERHEAD_OWNER
    sizes = [len(table) for table in tables.values()]
    count = sum(sizes)
    if not count:
        return owners
    # every table's blocks at once (a block two tables hold is SHARED_OWNER from each, so order is moot)
    blocks = np.fromiter(chain.from_iterable(tables.values()), np.int64, count)
    seqs = np.repeat(np.fromiter(tables.keys(), np.int64, len(sizes)), sizes)
    held = np.fromiter(map(ref.__getitem__, blocks.tolist()), np.int64, count)
    owner = np.where(held == 1, seqs, SHARED_OWNER)
    owners[(blocks[:, None] * bs + np.arange(bs)).ravel()] = np.repeat(owner, bs)
    return owners


def slot_state_map(capacity: int, block_size: int, num_blocks: int,
                   seqs: Mapping[int, tuple[list[int], int, int]], pending: Mapping[int, int]) -> np.ndarray:
    """State of every slot; ``seqs`` maps a sequence to ``(table, tokens, reserved)``, ``pending`` to the
    tokens it computed that the allocator was not told yet (they fill reserved slots first)."""
    bs = block_size
    states = np.full(capacity, SLOT_FREE, dtype=np.int8)
    states[:bs] = SLOT_OVERHEAD
    states[num_blocks * bs:] = SLOT_OVERHEAD
    offsets = np.arange(bs)
    for seq_id, (table, tokens, res) in seqs.items():
        slots = (np.asarray(table, np.int64)[:, None] * bs + offsets).ravel()
        fill_states(states, slots, min(tokens + pending.get(seq_id, 0), tokens + res), tokens + res)
    return states
