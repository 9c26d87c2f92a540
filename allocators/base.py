"""The allocator surface the scheduler talks to (the breakdown it reports lives in `allocators.breakdown`).

The scheduler never reaches inside an allocator: it asks to admit a sequence, grow it, fork it or free it,
and gets a result or None (no room, nothing changed). Sequences are named by integer ids the caller picks.

Waste accounting needs one fact the policy may not use: a sequence's ``final_tokens`` (prompt plus the
output it will really produce). It separates slots a sequence *will* fill (reservation) from slots it never
fills (internal fragmentation). Only the oracle policy is allowed to size its slab from it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import NamedTuple

import numpy as np

from allocators.breakdown import (
    FREE_OWNER,
    OVERHEAD_OWNER,
    SHARE_NAMES,
    SHARED_OWNER,
    SLOT_EXTERNAL,
    SLOT_FREE,
    SLOT_INTERNAL,
    SLOT_OVERHEAD,
    SLOT_RESERVED,
    SLOT_STATES,
    SLOT_TOKEN,
    GroupShare,
    MemoryBreakdown,
    fill_states,
    waiting_states,
)
from allocators.placement import placement_class


class Copy(NamedTuple):
    """A copy of one block (or slab) from ``src`` to ``dst`` moving ``slots`` token slots, returned by the call
    that caused it (a copy-on-write `grow`, a copying `fork`) so the cost model can charge its bytes."""

    src: int
    dst: int
    slots: int


class PageMap(NamedTuple):
    """``pages`` page sets that a call mapped into a sequence's virtual range (vAttention: one driver map call
    per page per cache tensor: K and V of every layer), returned beside any `Copy` so the cost model charges
    the mapping. It moves no KV, so ``slots`` is 0 and sums of copied slots stay right."""

    pages: int
    slots: int = 0


NO_COPIES: tuple[Copy, ...] = ()
"""The result of a `grow` or `fork` that copied nothing (the per-token hot path returns this shared constant)."""


class GroupSwap(NamedTuple):
    """What swapping a group's sequences out to host memory moves, and how they share it (`Allocator.swap_group`):
    ``slots`` and ``transfers`` (each block the sequences hold moves once, as vLLM v0's swap maps every GPU
    block of a group to one CPU block, reference counted, and back), and ``forks``, which rebuild that sharing
    when the group is placed again: one ``(source, tokens)`` per sequence after the first, in the order they
    are made (see `fork_plan`). ``resident_slots``: slots of blocks the group holds that stay on the GPU and
    are not moved (a pinned shared prefix's, `PagedCowAllocator.swap_group`), which vLLM v0.3's
    ``can_swap_out`` still counts against the free swap space."""

    slots: int
    transfers: int
    forks: tuple[tuple[int, int], ...]
    resident_slots: int = 0


def fork_plan(forks: Sequence[tuple[int, int]], count: int, num_tokens: int,
              total_tokens: int) -> list[tuple[int, int]]:
    """The ``count`` forks that make a group of sequences holding ``total_tokens`` each from one admitted with
    ``num_tokens``, in order: ``(source, tokens)``, fork from sequence ``source`` (0 the admitted one, ``k`` the
    ``k``-th fork) once it is grown to ``tokens``, then grow every sequence to ``total_tokens``. ``forks`` are
    `GroupSwap.forks`' (their tokens clamped to ``num_tokens`` .. ``total_tokens``: the group first forked at its
    prompt, and nobody holds more than the total); none: every fork from the first at ``num_tokens``."""
    if not forks:
        return [(0, num_tokens)] * count
    assert len(forks) == count, f"{len(forks)} forks given for {count} sequences"
    return [(source, min(max(tokens, num_tokens), total_tokens)) for source, tokens in forks]


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers (blocks needed for ``a`` tokens of ``b`` per block)."""
    return -(-a // b)


@dataclass(frozen=True, slots=True)
class Admission:
    """What `Allocator.admit` did: ``cached_tokens`` prompt tokens were found in the prefix cache or a shared
    prefix and need no prefill; ``host_tokens`` of them came from the host tier (`allocators.host_tier`) and
    are loaded over PCIe, in ``host_blocks`` blocks (``host_tokens / block_size``, except in a hybrid pool, where
    a hit needs blocks of every KV cache group); ``copies`` are block copies the admission caused."""

    cached_tokens: int = 0
    copies: tuple[Copy, ...] = ()
    host_tokens: int = 0
    host_blocks: int = 0


class Allocator(ABC):
    """A KV memory manager over ``capacity`` token slots. Subclasses keep real identities: slabs or blocks
    with ids, per-sequence block tables, reference counts and a free structure."""

    name: str = ""
    kind: str = ""
    """``"contiguous"`` (one slab per sequence) or ``"paged"`` (blocks on demand): what the cost model's
    attention kernel and the capacity report key on. An attribute, never derived from ``name``."""
    block_size: int = 1
    follows_vllm_block_size: bool = False
    """Whether the class's blocks are vLLM's, whose size vLLM sets from an MLA model's attention backend
    (`allocators.mla_backends`) rather than taking ``--block-size`` as given."""
    prefix_caching: bool = False
    """Whether `admit` looks ``block_hashes`` up in an automatic prefix cache."""
    shares_prefixes: bool = False
    """Whether `register_prefix` pins shared prefixes (the caller then hashes prompts even without caching)."""
    supports_host_tier: bool = False
    """Whether the class can spill evicted cached blocks to a `HostTier` and load host hits back
    (`attach_host_tier`); such a class keeps its prefix cache at ``_cache`` (a `PrefixCache` or `RadixTree`),
    whose evictions call its ``spill``."""
    host_tier = None
    """The attached `allocators.host_tier.HostTier`, or None (no host tier)."""
    host_hits_to_end = False
    """Whether a host-tier lookup may cover the last of a request's tokens, which a GPU lookup never does: vLLM's
    offloading connector looks the host up to the end of the request's tokens and loads beside the steps
    (``--offload-loads async``), so a request whose whole block-aligned prompt is cached loads its last block
    (GPU lookups stop a block short of it) and, once loaded, recomputes only its last token."""
    processed_basis: bool = False
    """Whether the pool frees window blocks by the tokens whose output is processed, a step late (vLLM's async
    scheduling on a hybrid pool): it then implements ``begin_step``, which `sim.kernel.memory.KVMemory` calls as
    each step is planned (the caller reads the attribute, it never probes for the method)."""
    step_basis: bool = False
    """With ``processed_basis``: whether the steps are told instead of snapshots taken at each planned one (its
    ``clock``, ``idle``; `allocators.hybrid.HybridPagedAllocator._processed`), so that decoders may grow lazily,
    several steps at once (set by `sim.kernel.replica.build_replica` where the scheduler is lazy)."""
    align: bool = False
    """Whether the pool holds Mamba states in vLLM's ``mamba_cache_mode="align"`` (`allocators.mamba_align`: a
    hybrid pool with Mamba groups and prefix caching on), whose prefill chunks the scheduler cuts at block
    boundaries (`sim.kernel.mamba_split`)."""
    reports_growth: bool = False
    """Whether `grow_due` is exact: growth never copies, so what it reports (headroom, new blocks, reservation
    change) is the whole change to the breakdown. The decode fast-forward then integrates memory from those
    deltas; otherwise it re-reads `breakdown` at every sub-event."""
    window_released: int = 0
    """Blocks released so far because they slid out of a sliding window during growth (vLLM's
    ``remove_skipped_blocks``; only a hybrid pool has windows). Decode growth otherwise only takes memory, so a
    queued request refused at the start of a decode run stays refused through it; a release can let it in, so
    the fast-forward ends a run where one happens while requests wait."""
    hit_changes: int = 0
    """Blocks so far whose entry in or eviction from the prefix cache can let a queued request in during decode
    growth, counted where the fast-forward reads it (its sub-event path: allocators without ``reports_growth``).
    A hybrid pool counts every one: a window group hits on the window's last blocks only and releases blocks
    from the middle of a chain, so the free queue does not evict a chain tail first, and evicting one block
    can cut a queued request's hit by many (a shorter hit's first chunk then needs fewer blocks); a block a
    decoder fills may lengthen a queued request's hit (a session turn's output). `paged-cow` counts the blocks
    it indexes that other requests may carry (its evictions cost a queued request one hit block for the one
    free block); pools with ``reports_growth`` say so per growth instead (`shared_fill`) and leave it 0. The
    fast-forward ends a run where it moves while requests wait, as it does at a window release."""
    slots_per_token: int = 1
    """Breakdown slots one appended token fills: 1, except in a hybrid pool, which counts a token once per KV
    cache group (`allocators.hybrid`), and in contiguous slabs with ring-buffer window layers, a token's slots in
    the full layers once the rings are full (`allocators.contiguous`); the simulator scales the tokens a lazily
    grown decoder owes by it."""
    group_names: tuple[str, ...] = ()
    """A hybrid pool's attention groups, in `MemoryBreakdown.groups` order; empty for a pool of one group."""
    allocates_per_chunk: bool = False
    """Whether chunked prefill allocates slots chunk by chunk (vLLM's paged KV cache manager: `admit` takes
    ``full_tokens`` and ``apply_watermark``) rather than the whole prompt at admission (contiguous slabs)."""
    reserves_final_length: bool = False
    """Whether `admit` holds, for each sequence, every slot it will grow into (`never_fits` refuses one whose
    reservation falls short of its final length): its growth then never fails, so only a fork, which places a
    new sequence, can find no room, and a run whose requests never fork preempts nothing (the contiguous slabs;
    `sim.kernel.ignored_settings` reports swap preemption on such a run)."""
    parks_own_blocks: bool = False
    """Whether `admit` takes ``own_from`` (where a request's own block ids start) and `free` takes ``finished``:
    a request's own blocks are then indexed in the prefix cache only when it is freed to come back."""
    knows_own_hashes: bool = False
    """Whether `admit` takes ``own_from`` to tell, as a sequence grows, a block other requests may carry (a
    session turn's output) from one of its own (`shared_fill`), whether or not it parks its own blocks."""
    knows_prompt: bool = False
    """Whether `admit` takes ``prompt_tokens``, the request's prompt, and ``request_tokens``, all its tokens (a
    resumed one's include its output; an admission may place a first chunk only): vLLM's hybrid manager caches a
    window group's blocks by where its prompt and a shared prefix end (`allocators.window_retention`)."""

    def __init__(self, capacity_slots: int, *, block_size: int, max_model_len: int, placement: str,
                 prefix_caching: bool, watermark: float) -> None:
        """Validate every option of the constructor contract, so that a bad one is a one-line ValueError
        whichever allocator is built, even one it ignores (a typo should not pass silently). The public
        classes' signatures give the defaults; this sets the options every allocator uses."""
        if isinstance(capacity_slots, bool) or not isinstance(capacity_slots, Integral):  # 1000.7 ran as 1000
            raise ValueError(f"capacity must be a whole number of token slots, got {capacity_slots!r}")
        if capacity_slots <= 0:
            raise ValueError(f"capacity must be positive, got {capacity_slots}")
        for name, value in (("block_size", block_size), ("max_model_len", max_model_len)):
            if isinstance(value, bool) or not isinstance(value, Integral) or value <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")
        placement_class(placement)
        if prefix_caching not in (True, False):
            raise ValueError(f"prefix_caching must be True or False, got {prefix_caching!r}")
        if not 0.0 <= watermark < 1.0:
            raise ValueError(f"--watermark must be a fraction of blocks in [0, 1), got {watermark!r}")
        self.capacity = int(capacity_slots)
        self.max_model_len = int(max_model_len)

    def attach_host_tier(self, tier, *, to_end: bool = False) -> bool:
        """Put a host-memory tier behind the prefix cache, whose evicted blocks then spill into the tier's
        `offload_many` (write-back; a write-through tier is given computed blocks instead, by `admit` and
        `grow_due`); False (nothing attached) if this allocator has no prefix cache to spill
        (``supports_host_tier`` and ``prefix_caching`` both needed). ``to_end``: host lookups may cover a
        request's last token (``host_hits_to_end``)."""
        if not (self.supports_host_tier and self.prefix_caching):
            return False
        self.host_tier = tier
        self.host_hits_to_end = to_end
        if not tier.write_through:
            self._cache.spill = tier.offload_many
        return True

    def reload_transfers(self, host_blocks: int) -> int:
        """Copy calls (per layer, K and V) that loading ``host_blocks`` blocks back from the host tier in one
        admission takes. Default: one per block, as vLLM moves offloaded blocks (``swap_blocks``: one
        ``cudaMemcpyAsync`` per block pair, per layer and K/V)."""
        return host_blocks

    def swap_extent(self, seq_id: int, pending: int = 0) -> tuple[int, int]:
        """``(slots, transfers)`` that moving this sequence's KV to host memory (or back) takes, when it holds
        ``pending`` tokens beyond those the allocator was told (a lazily grown decoder; they lie within its
        headroom). Default: its tokens, in one transfer (a contiguous region); paged allocators move whole
        blocks, one transfer each."""
        return self.num_tokens(seq_id) + pending, 1

    def swap_group(self, seq_ids: Sequence[int], pending: Sequence[int]) -> GroupSwap:
        """What moving a group's sequences to host memory (or back) takes, each holding ``pending[i]`` tokens it
        was not told, and the forks that make them again as they share memory (`GroupSwap`). Default, for
        allocators whose sequences share nothing: every sequence's `swap_extent`, and every fork made where the
        group first forked."""
        slots = transfers = 0
        for seq_id, lag in zip(seq_ids, pending, strict=True):
            seq_slots, seq_transfers = self.swap_extent(seq_id, lag)
            slots += seq_slots
            transfers += seq_transfers
        return GroupSwap(slots, transfers, ((0, 0),) * (len(seq_ids) - 1))

    def swap_hashes(self, seq_id: int) -> frozenset[int]:
        """The host-tier keys (the prefix cache's hashes) of the blocks this sequence holds that carry one: the
        KV a swap-out parks on the host, which a write-back host tier then does not offload again. Default: none
        (no prefix cache to spill)."""
        return frozenset()

    @abstractmethod
    def never_fits(self, num_tokens: int, *, final_tokens: int, max_total_tokens: int | None = None) -> str | None:
        """A reason why this sequence could not be admitted even into an empty pool, or None if it could."""

    def num_cached_tokens(self, block_hashes: Sequence[int], num_tokens: int) -> int:
        """Prompt tokens a new sequence would find cached (no side effects). Default: no cache."""
        return 0

    def num_gpu_cached_tokens(self, block_hashes: Sequence[int], num_tokens: int) -> int:
        """`num_cached_tokens` without the host tier's hits. Default: the same (no host tier to leave out)."""
        return self.num_cached_tokens(block_hashes, num_tokens)

    @abstractmethod
    def admit(
        self,
        seq_id: int,
        num_tokens: int,
        *,
        final_tokens: int,
        max_total_tokens: int | None = None,
        block_hashes: Sequence[int] = (),
    ) -> Admission | None:
        """Place a new sequence holding ``num_tokens`` tokens; None (and no change) if it does not fit now."""

    @abstractmethod
    def grow(self, seq_id: int, num_tokens: int = 1) -> tuple[Copy, ...] | None:
        """Append ``num_tokens`` to a sequence; returns the copies it caused (`NO_COPIES` when none), or None
        (and no change) if there is no room. A hybrid pool's windows free what the computed tokens left even
        then, as vLLM's ``allocate_slots`` does before it checks for room."""

    def grow_to(self, seq_id: int, num_tokens: int) -> tuple[Copy, ...] | None:
        """`grow` a sequence until it holds ``num_tokens`` tokens (`NO_COPIES`, nothing done, if it holds as
        many): how a group is made again at the points its forks were made (`fork_plan`)."""
        more = num_tokens - self.num_tokens(seq_id)
        return self.grow(seq_id, more) if more > 0 else NO_COPIES

    def growth_fits(self, growth: Sequence[tuple[int, int]]) -> bool:
        """Whether growing each ``(seq_id, num_tokens)`` of ``growth`` in turn (one sequence group's decoders)
        would all succeed now; changes nothing. The scheduler asks it before growing any sequence of a group
        of several, so that a group that cannot grow whole is preempted before it copies or takes anything:
        vLLM v0 asks ``can_append_slots(seq_group)`` before ``_append_slots`` (`sim.kernel.group_growth`).
        Default: not known ahead (a sliding-window pool frees blocks as it grows): True, each sequence's
        growth is tried as it is made and its failure preempts then."""
        return True

    def grow_chunk(self, seq_id: int, num_tokens: int) -> tuple[Copy, ...] | None:
        """`grow` by a prefill chunk computed in one step. The same as `grow` except in a hybrid pool, whose
        sliding windows free by the tokens computed before the step (`grow`: by the last new token)."""
        return self.grow(seq_id, num_tokens)

    def grow_due(self, seq_id: int, num_tokens: int) -> tuple[int, int, int] | None:
        """`grow` reporting ``(headroom, new_blocks, reserved_delta)`` instead of copies; only allocators with
        ``reports_growth`` implement it (the caller reads the attribute, it never probes for the method)."""
        raise NotImplementedError(f"{self.name} does not report growth deltas (reports_growth is False)")

    def evicted_blocks(self, seq_id: int, num_tokens: int) -> list[int]:
        """The cached blocks `grow_due` of ``num_tokens`` would evict; only allocators with ``reports_growth``
        implement it."""
        raise NotImplementedError(f"{self.name} does not report growth deltas (reports_growth is False)")

    def new_blocks(self, seq_id: int, num_tokens: int) -> int:
        """The blocks `grow_due` of ``num_tokens`` would take; only allocators with ``reports_growth``
        implement it."""
        raise NotImplementedError(f"{self.name} does not report growth deltas (reports_growth is False)")

    def hit_layout(self, block_hashes: Sequence[int], num_tokens: int) -> tuple[list[int], Sequence[int]]:
        """A new sequence's prefix hit: its GPU blocks and the hashes after them only the host tier holds;
        only allocators with ``reports_growth`` implement it."""
        raise NotImplementedError(f"{self.name} does not report growth deltas (reports_growth is False)")

    def stores(self, seq_id: int, num_tokens: int) -> bool:
        """Whether `grow_due` of ``num_tokens`` offers blocks to a write-through host tier; only allocators
        with ``reports_growth`` implement it."""
        raise NotImplementedError(f"{self.name} does not report growth deltas (reports_growth is False)")

    def host_evictions(self, seq_id: int, num_tokens: int, evicted: Sequence[int]) -> list[int] | None:
        """The hashes `grow_due` of ``num_tokens`` would evict from the host tier (None: some, which the
        tier's policy picks); only allocators with ``reports_growth`` implement it."""
        raise NotImplementedError(f"{self.name} does not report growth deltas (reports_growth is False)")

    def shared_fill(self, seq_id: int, num_tokens: int) -> Sequence[int]:
        """The hashes that `grow_due` of ``num_tokens`` would make hittable by other requests (blocks it fills
        whose hashes others carry); only allocators with ``reports_growth`` implement it."""
        raise NotImplementedError(f"{self.name} does not report growth deltas (reports_growth is False)")

    def touch_prefixes(self, lookups: Sequence[tuple[Sequence[int], int]]) -> None:
        """The scheduler looked waiting requests up, in this order (``(block_hashes, num_tokens)`` each: the
        request it tried to admit, or every request an ``lpm`` sort ranked): an allocator whose lookups count
        as use (SGLang's radix cache stamps every node it walks) makes their cached blocks the most recently
        used, the last lookup's the newest. Default: lookups change nothing (vLLM's cache)."""
        return None

    def register_prefix(self, block_hashes: Sequence[int]) -> int | None:
        """Pin a shared prefix (chained hashes of its full blocks); returns its length in tokens, or None
        (nothing changed) if it could not be placed. Default, for allocators without ``shares_prefixes``:
        nothing is pinned."""
        return None

    @abstractmethod
    def fork(self, parent_id: int, child_id: int, *, final_tokens: int) -> tuple[Copy, ...] | None:
        """Make ``child_id`` a copy of ``parent_id`` (shared where the allocator can share); None if no room."""

    def group_fits(self, num_tokens: int, count: int, *, final_tokens: int, max_total_tokens: int | None = None,
                   block_hashes: Sequence[int] = (), then_tokens: int = 1,
                   forks: Sequence[tuple[int, int]] = ()) -> bool:
        """Whether a sequence admitted with ``num_tokens`` tokens, then forked ``count`` times, with every one
        of the ``count + 1`` sequences then grown to ``num_tokens + then_tokens`` (a slot for its next token,
        or the tokens a group being recomputed or swapped in had generated), fits now; changes nothing.
        ``forks``: where the forks are made (`fork_plan`: a swapped group's `GroupSwap.forks`); default, every
        one from the first at ``num_tokens``.

        The scheduler asks it before admitting a group whose parallel samples or beams fork at the first
        token, so a group whose sequences cannot all be placed keeps waiting instead of being admitted,
        prefilled and preempted again at the fork. Default: a trial (admit, fork, grow, free) rolled back,
        exact for allocators whose `free` restores the state (contiguous slabs); paged allocators answer from
        their counters, so a trial cannot touch the prefix cache."""
        made, ok = [], True
        ids = iter(range(-1, -(1 << 62), -1))  # ids the caller does not use (it picks non-negative ones)
        parent = next(seq for seq in ids if not self._holds(seq))
        if self.admit(parent, num_tokens, final_tokens=final_tokens, max_total_tokens=max_total_tokens) is None:
            return False
        made.append(parent)
        total = num_tokens + then_tokens
        for source, tokens in fork_plan(forks, count, num_tokens, total):
            child = next(seq for seq in ids if not self._holds(seq))
            if self.grow_to(made[source], tokens) is None or \
                    self.fork(made[source], child, final_tokens=final_tokens) is None:
                ok = False
                break
            made.append(child)
        for seq in made if ok else ():
            if self.grow_to(seq, total) is None:
                ok = False
                break
        for seq in reversed(made):
            self.free(seq)
        return ok

    def _holds(self, seq_id: int) -> bool:
        try:
            self.num_tokens(seq_id)
        except KeyError:
            return False
        return True

    @abstractmethod
    def free(self, seq_id: int) -> int:
        """Release a sequence; returns the slots it no longer references."""

    def hide_shared_tail(self, seq_id: int, unknown: int = 1) -> bool:
        """Uncache the sequence's blocks its last ``unknown`` tokens reach into, whose hashes other requests may look
        up, while vLLM's async scheduling has not hashed them yet (those tokens in flight); True if hidden. Only the
        block pools that cache generated blocks under shared hashes (`PagedAllocator`, the hybrid pool) have one to
        hide."""
        return False

    @abstractmethod
    def num_tokens(self, seq_id: int) -> int:
        """Tokens the sequence holds now."""

    @abstractmethod
    def headroom(self, seq_id: int) -> int:
        """Tokens the sequence can still append without any allocator work (the simulator skips ahead by it)."""

    @abstractmethod
    def breakdown(self, waiting: bool = False) -> MemoryBreakdown:
        """The memory breakdown now. ``waiting``: a request is queued that memory cannot take, so free slots
        count as external fragmentation rather than idle capacity."""

    @abstractmethod
    def memory_map(self) -> np.ndarray:
        """Owner of every slot of the arena in physical order (seq id, `FREE_OWNER`, `OVERHEAD_OWNER` or
        `SHARED_OWNER`)."""

    @abstractmethod
    def slot_states(self, pending: Mapping[int, int] | None = None) -> np.ndarray:
        """State of every slot of the arena in physical order, as `SLOT_STATES` codes (int8), for the memory
        map: read with `memory_map`, it shows where each request's tokens, reservation and internal
        fragmentation lie. ``pending``: tokens a sequence has appended that the allocator was not told about
        yet (the simulator's lazily grown decoders); they fill reserved slots (negative: told tokens a step has
        not computed yet, shown reserved). Free slots are `SLOT_FREE`, as ``breakdown()`` counts them with
        nobody waiting; `waiting_states` relabels them as ``breakdown(waiting=True)`` does."""

    @abstractmethod
    def check_invariants(self) -> None:
        """Recompute all state from scratch and raise AssertionError on any inconsistency."""


# The breakdown names are re-exported: allocators and callers import them from base as before.
__all__ = [
    "Admission", "Allocator", "Copy", "FREE_OWNER", "GroupShare", "GroupSwap", "MemoryBreakdown", "NO_COPIES",
    "OVERHEAD_OWNER", "PageMap", "SHARED_OWNER", "SHARE_NAMES", "SLOT_EXTERNAL", "SLOT_FREE", "SLOT_INTERNAL",
    "SLOT_OVERHEAD", "SLOT_RESERVED", "SLOT_STATES", "SLOT_TOKEN", "cdiv", "fill_states", "fork_plan", "waiting_states",
]
