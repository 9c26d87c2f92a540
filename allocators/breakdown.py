"""Where the KV capacity is: the five-share memory breakdown every allocator reports, and the owner and state
codes of its slot-level memory map.

Split from `allocators.base` (which re-exports every name here) because these are the results an allocator
reports, read by metrics and plots, while `base` holds the surface the scheduler calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

FREE_OWNER = -1
"""`Allocator.memory_map` value of a slot that is free."""
OVERHEAD_OWNER = -2
"""`Allocator.memory_map` value of a slot held by the allocator itself (null block, buddy rounding)."""
SHARED_OWNER = -3
"""`Allocator.memory_map` value of a slot in a block that several sequences (or a registered prefix) share."""


SLOT_STATES = ("token", "reserved", "internal_frag", "overhead", "external_frag", "free")
"""`Allocator.slot_states` codes, by position: a slot holding a live token, one a sequence will fill before it
finishes, one it holds but will never fill, one the allocator keeps for itself (null block, buddy rounding,
a pool's remainder), a free one that a waiting request cannot be given (`waiting_states`), and a free one.
Together they are the paper's Fig. 3 view of memory, slot for slot the `MemoryBreakdown` shares: token,
reserved and internal_frag are the shares of those names, overhead and external_frag together the
``external_frag`` share, free the ``free`` share."""
SLOT_TOKEN, SLOT_RESERVED, SLOT_INTERNAL, SLOT_OVERHEAD, SLOT_EXTERNAL, SLOT_FREE = range(len(SLOT_STATES))


def fill_states(states: np.ndarray, slots: np.ndarray, tokens: int, final: int) -> None:
    """Mark ``slots`` (one sequence's slots in logical order) token, reserved up to ``final``, else internal
    fragmentation."""
    position = np.arange(len(slots))
    states[slots] = np.where(position < tokens, SLOT_TOKEN,
                             np.where(position < final, SLOT_RESERVED, SLOT_INTERNAL))


def waiting_states(states: np.ndarray) -> np.ndarray:
    """``states`` (`Allocator.slot_states`, changed in place) as `Allocator.breakdown` counts them with
    ``waiting``: while a request waits that memory cannot take, every free slot is one it cannot be given, so
    external fragmentation, not free. Done here, once, rather than by every allocator (a new allocator's
    ``slot_states`` keeps its signature), whose ``slot_states`` stays the view with nobody waiting, as
    ``breakdown()``."""
    states[states == SLOT_FREE] = SLOT_EXTERNAL
    return states


class GroupShare(NamedTuple):
    """One attention group's part of a hybrid pool's breakdown (`MemoryBreakdown.groups`), in slots:
    ``slots_per_token`` is how many slots one appended token fills in it (its KV cache groups)."""

    name: str
    slots_per_token: int
    token_states: int
    reservation: int
    internal_frag: int
    used_blocks: int


SHARE_NAMES = ("token_states", "reservation", "internal_frag", "external_frag", "free")
"""The five shares of the KV capacity (``anchors.md`` section 4), in the order stacked charts draw them."""


@dataclass(slots=True)
class MemoryBreakdown:
    """Where the KV capacity is at one instant, in token slots (``anchors.md`` section 4).

    The five shares ``token_states + reservation + internal_frag + external_frag + free`` sum exactly to
    ``capacity``. ``used_blocks / total_blocks`` is block-level usage (vLLM's "KV cache usage"), which can read
    far higher than token-level occupancy ``token_states / capacity``. ``shared_saved`` is the slots that
    sequences reference but that exist only once thanks to sharing.

    ``cached`` is the slots held only by a prefix cache: blocks no running sequence references that still
    carry a hash, so a later request can hit them, and that are evicted (LRU) when memory is needed. It is a
    part of the free share (of ``external_frag`` while ``waiting``, where the free slots are counted), not a
    sixth share: the five shares above still sum exactly to ``capacity``, and ``free - cached`` (or
    ``external_frag - overhead - cached``) is the memory that holds nothing at all.

    A value to read, never to change: every `Allocator.breakdown` call builds a fresh one. It is not frozen
    only because a frozen dataclass's constructor costs about 1.3 us against 0.5 us for this one, and the
    simulator builds one per step row.
    """

    capacity: int
    token_states: int
    reservation: int
    internal_frag: int
    external_frag: int
    free: int
    used_blocks: int
    total_blocks: int
    shared_saved: int = 0
    cached: int = 0
    groups: tuple[GroupShare, ...] = ()
    """Per attention group (a hybrid pool: `allocators.hybrid`), what of the used share each holds; empty for
    a pool of one group. External fragmentation and free slots belong to the whole pool."""

    @property
    def shares(self) -> dict[str, float]:
        return {name: getattr(self, name) / self.capacity for name in SHARE_NAMES}
