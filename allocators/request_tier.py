"""`RequestTier`: a host tier that stores blocks as they are computed and decides by request, as vLLM's CPU
offloading manager does (``--offload-write-policy write_through``).

Why: vLLM 0.33's ``OffloadingConnector`` with its CPU spec (the oracle's version) does not see blocks, it sees
requests: what a request offers, reuses and stores, and when it finishes. Its two host policies, LRU
(`lru_tier.LruTier`, the default) and ARC (`arc_tier.ArcTier`, ``eviction_policy: arc``),
rank blocks on those events. What they share, here:

- **What is offered.** Each step offers the blocks the request completed since its last successful store
  (its own hits included), except that a request loading host hits skips every hit block (vLLM's default
  ``CHUNK_LEVEL`` policy). A block the host holds is reused, one it lacks is stored. With ``prompt_only``
  (vLLM's ``offload_prompt_only``, on by default) only the blocks of its prompt are offered (`bind`):
  what it generates is stored, if at all, as part of a later request's prompt (a conversation's next turn).
  Under vLLM's async scheduling an offer stops at the blocks hashed by then (`hashed_blocks`: a block whose last
  token is in an output still in flight has no hash) and the rest is offered at the next step that schedules the
  request, or with its last offer once it has finished.
- **All or nothing.** A store that needs more evictions than the host has blocks outside the offer (and
  outside what is being written or loaded) fails whole: a host smaller than one step's blocks stores nothing.
  vLLM's ``prepare_store`` then returns None and the request's store index does not advance, so the request
  offers the same blocks again at every later step that schedules it, and once more after it finishes (its
  final stores); kvsim does the same (`behind`, ``scheduled`` in `flush_stores`), skipping only the offers
  again that nothing since could let through or make record anything new.
- **Store threshold.** With ``store_threshold`` (``--offload-store-threshold``) a block is stored only once it
  has been offered that many times (`store_filter.StoreFilter`), each request counting a block once; a skipped
  block is not offered again by the same request.
- **A request's record**: the blocks it has stored or reused (with their positions), which of them it
  inserted and which it reused, and the store misses it has reported; the policy reads it when the request
  finishes (`release`).

A request's record outlives its preemption, as vLLM keeps it (the request's context): the sequences that
place it again are bound to it (`bind`, from `KVMemory.new_seq`), and its offers start again from its first
block. Stores are made when vLLM makes them: a step's offers once the step is planned, after its admissions
looked the host up (`hold_stores`, `flush_stores`; a decode run holds each of its steps' offers the same way,
`run_step`), and a finished request's blocks are ranked anew after the next step's stores; blocks being loaded
beside the steps (``--offload-loads async``) are ``pinned`` until their load lands: no store evicts them, nor a
swap-out making room for parked KV (`_room`; a swap-out that would need them is refused), and the blocks a
swapped request's KV is parked in while the host stores them already are kept the same way (`swap_out`). A block one offer of a
step stores is being written until the step ends (vLLM: a chunk not ready), so a later offer of the same step
neither reuses it nor evicts it (``_writing``; under ARC a reuse would move it to T2). What kvsim leaves out: every
store is written by the end of its step (vLLM's are asynchronous and may take longer, holding their blocks
meanwhile).

The allocator's calls (``paged.py``; ``KVMemory.free`` calls `release`), each with the sequence id as the
request::

    n = tier.lookup(hashes, start, stop)      # as `HostTier`
    tier.load(seq, hashes, start, n)          # host hits hashes[start:start + n] loaded
    tier.computed(seq, hashes, full)          # the sequence has hashes[:full] computed: store what is due
    tier.release(seq, finished)               # the sequence is freed (finished: for good)

and `KVMemory`'s, as it places a sequence: ``tier.bind(seq, request, prompt_blocks)``.

A policy implements `_recording`, `_reuse` (via `_reused`), `_missed`, `_evict`, `_store`, `_finish`,
`_forget` and `_check_order`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from allocators.host_tier import HostTier
from allocators.store_filter import StoreFilter

_DUE = (-1, True)
"""The stamp of an offer that is due again whatever happens meanwhile (`_worth_offering_again`): one that stopped
short of blocks not hashed yet (`RequestTier.hashed_blocks`), or a finished request's last offer."""


@dataclass(slots=True)
class Access:
    """A request's record: its rank (LRU: 0 until it first records a block), the blocks it has stored or
    reused (hash -> position, first seen first), where its next offer starts, the blocks it inserted and
    those it reused, the store misses it has reported and the blocks it has counted towards a store threshold."""

    rank: int = 0
    seen: dict[int, int] = field(default_factory=dict)
    next_stored: int = 0
    inserted: set[int] = field(default_factory=set)
    reused: set[int] = field(default_factory=set)
    misses: set[int] = field(default_factory=set)
    counted: set[int] = field(default_factory=set)  # the hashes its offers counted towards a store threshold


class RequestTier(HostTier):
    """`HostTier`'s blocks, swap parking and lookups, filled by request (the module doc); the order is the
    subclass's."""

    __slots__ = ("store_filter", "prompt_only", "_requests", "_bound", "_limits", "_queued", "_finished",
                 "_writing", "_step", "_changes", "_behind", "_last_offers", "_finishing", "_parked_copies", "_sharing",
                 "write_lag", "_late", "_final",
                 "hashed_blocks")

    write_through = True

    def __init__(self, num_blocks: int, block_bytes: int, *, store_threshold: int = 0,
                 prompt_only: bool = False) -> None:
        """``store_threshold``: offers a block needs before it is stored (below 2: none); ``prompt_only``:
        offer a sequence's prompt blocks only (told by `bind`)."""
        super().__init__(num_blocks, block_bytes)
        self.store_filter = StoreFilter(store_threshold) if store_threshold >= 2 else None
        self.prompt_only = prompt_only
        self._requests: dict[object, Access] = {}  # by request (`bind`; a sequence never bound is its own)
        self._bound: dict[int, object] = {}  # sequence -> its request
        self._limits: dict[object, int] = {}  # request -> the blocks it may offer (its prompt's full blocks)
        self._queued: list[tuple[int, Sequence[int], int]] | None = None  # offers held back (`hold_stores`)
        self._finished: list[object] | None = None  # requests finished since the last `flush_stores` (None: no
        # steps are planned, as when a test drives the tier: a finished request's record closes at once)
        self._writing: set[int] = set()  # the hashes stored in the current step (`begin_step`): not written yet
        self._step: int | None = None  # the current step (None: no steps are planned, stores are written at once)
        self._changes = 0  # counts what can change a failed offer's outcome: stores, writes done, swaps
        # sequences whose last offer failed -> that offer's (hashes, full) and its stamp (``_changes`` then,
        # whether loads pinned blocks then): offered again at each step that schedules them (`flush_stores`), as
        # vLLM retries a failed ``prepare_store`` at the request's next step, unless nothing changed since (the
        # offer would fail again, recording nothing new)
        self._behind: dict[int, tuple[Sequence[int], int, tuple[int, bool]]] = {}
        # finished sequences that were behind -> (request, hashes, full, stamp): vLLM makes a finished request's
        # failed store once more, after the next step's stores and before ranking it anew (`flush_stores`)
        self._last_offers: dict[int, tuple[object, Sequence[int], int, tuple[int, bool]]] = {}
        # a finishing sequence (`finishing`) -> the offer of the tokens it was told last, made as a last offer
        self._finishing: dict[int, tuple[Sequence[int], int] | None] = {}
        # cached hash -> the swapped requests whose parked copy its block is (`swap_out`): not evicted meanwhile
        self._parked_copies: dict[int, int] = {}
        self._sharing: dict[int, list[int]] = {}  # swap key -> the cached hashes it took as parked copies
        # steps a store's write is reported done after its own (1: vLLM's async scheduling, which processes step
        # t's output, the worker's report that t's stores are written, after it has scheduled step t + 1), and
        # the hashes of ``_writing`` stored by the step before, written at the next `begin_step`
        self.write_lag = 0
        self._late: set[int] = set()
        self._final = False  # a finished request's last offer is being made (`flush_stores`)
        # vLLM's async scheduling: sequence -> its full blocks hashed by now, for the sequences with outputs in
        # flight (vLLM keys a request's stores by its block hashes, which grow only as its outputs are processed):
        # an offer stops there, and the rest is offered at the next step that schedules the request
        # (`flush_stores`) or as its last offer once it has finished (set as each step is planned)
        self.hashed_blocks: dict[int, int] = {}

    @property
    def skipped_blocks(self) -> int:
        return 0 if self.store_filter is None else self.store_filter.skipped_blocks

    # -- the allocator's calls -----------------------------------------------------------------------------
    def begin_step(self, step: int) -> None:
        """Stores from here on are step ``step``'s: those of an earlier step are written now (the oracle's worker
        finishes every transfer within its step), and may be reused and evicted; with ``write_lag`` those of the
        step just before only at the step after this one."""
        if step != self._step:
            # with ``write_lag`` the previous step's stores stay unwritten through this step (not read, reused nor
            # evicted: vLLM's chunk ``is_ready`` only once that step's output is processed)
            lagging = self.write_lag and self._step is not None and step == self._step + 1
            if self._writing:
                if lagging:
                    self._writing -= self._late
                    self._late = set(self._writing)
                else:
                    self._writing, self._late = set(), set()
                self._changes += 1
            self._step = step

    def hold_stores(self, step: int | None = None) -> None:
        """Step ``step`` (the next one if None) is being planned: hold back every offer (`computed`) until
        `flush_stores`, as vLLM prepares a step's stores after it has scheduled the step, so the lookups of the
        step's admissions see the host as the step found it."""
        self.begin_step(step if step is not None else (self._step or 0) + 1)
        if self._queued is None:  # a decode run that stopped at this step holds its syncs' offers (`run_step`)
            self._queued = []
        if self._finished is None:
            self._finished = []

    def run_step(self, step: int) -> None:
        """A decode run makes step ``step``'s syncs: the previous step's offers are made now, and this step's are
        held back as the scheduler holds them. If the run stops at this step (a sync refused: the scheduler
        plans the step, preempting if memory ran out), its offers stay held for the scheduler's planning of it,
        which drops those of the sequences it preempts and makes the rest after its admissions' lookups, as
        step by step; a step the run completes has them made at the next step or the run's end (`end_run`)."""
        if self._queued is not None and step != self._step:
            self.flush_stores()
        self.hold_stores(step)

    def end_run(self, next_step: int) -> None:
        """A decode run ends before step ``next_step``: make the offers it holds of an earlier step (one it
        completed); those of ``next_step`` itself, where it stopped, stay held for the scheduler (`run_step`)."""
        if self._queued is not None and self._step is not None and self._step < next_step:
            self.flush_stores()

    @property
    def behind(self) -> dict[int, tuple[Sequence[int], int, tuple[int, bool]]]:
        """The sequences whose last offer failed (read-only): each step that schedules one offers it again."""
        return self._behind

    def _worth_offering_again(self, stamp: tuple[int, bool]) -> bool:
        """Whether an offer that failed with this stamp may now do otherwise: something was stored, written or
        swapped since, loads pinned blocks then or do now (a load landing unpins its blocks), or a store
        threshold records every offer (another request's offers may have raised a count since)."""
        return stamp[0] != self._changes or stamp[1] or bool(self.pinned) or self.store_filter is not None

    def not_ready(self, block_hashes: Sequence[int]) -> bool:
        """Whether any of these hashes is stored but not written yet: vLLM's lookup finds such a chunk
        ``HIT_PENDING`` and defers the request (``OffloadingConnectorScheduler._maximal_prefix_lookup`` returns
        None, ``get_num_new_matched_tokens`` too, and the scheduler skips the request this step:
        ``v1/kv_offload/cpu/manager.py`` ``lookup``, ``kv_connector/v1/offloading/scheduler.py``). Only a step's
        lookups after another's stores can meet one: under async scheduling, the step after."""
        writing = self._writing
        return bool(writing) and any(h in writing for h in block_hashes)

    @property
    def retries_due(self) -> bool:
        """Whether a failed offer is to be made again at the next step that schedules its sequence (the decode
        fast-forward then plans that step)."""
        if self._last_offers:
            return True
        if not self._behind:
            return False
        if self._writing:  # written by the next step (`begin_step`): a change for every failed offer
            return True
        return any(self._worth_offering_again(entry[2]) for entry in self._behind.values())

    def flush_stores(self, scheduled: Sequence[int] = ()) -> None:
        """Make the offers held back, in the order they came (those of sequences freed meanwhile dropped), with
        the failed offers of the ``scheduled`` sequences (the step's, in vLLM's order: its running loop, then
        its admissions) made again where they fall in that order, then close the records of the requests
        finished since the last flush: vLLM ranks a finished request's blocks anew at the end of the next step
        it plans, after that step's stores."""
        queued, self._queued = self._queued or [], None
        if self._behind and scheduled:
            queued = self._with_retries(queued, scheduled)
        for seq_id, block_hashes, full in queued:
            self.computed(seq_id, block_hashes, full)
        last_offers, self._last_offers = self._last_offers, {}
        self._final = True
        for seq_id, (request, block_hashes, full, stamp) in last_offers.items():
            if self._worth_offering_again(stamp):
                self._bound[seq_id] = request
                self.computed(seq_id, block_hashes, full)
                del self._bound[seq_id]
                self._behind.pop(seq_id, None)
        self._final = False
        finished, self._finished = self._finished or (), []
        for request in finished:
            self._close(request)

    def settle(self) -> None:
        """The engine goes idle with requests finished in its last step: vLLM still schedules once more (its
        scheduler has finished requests to report, ``has_finished_requests``), an empty step whose connector pass
        makes their last offers and ranks their blocks anew; kvsim plans no step while idle, so that pass is made
        now, before any later arrival is looked up (a request arriving later finds them ranked already)."""
        if self._finished or self._last_offers:
            self.hold_stores()
            self.flush_stores()

    def _with_retries(self, queued: list[tuple[int, Sequence[int], int]],
                      scheduled: Sequence[int]) -> list[tuple[int, Sequence[int], int]]:
        """``queued`` with an offer again for each scheduled sequence that is behind and has none queued, all in
        ``scheduled`` order (an offer of a sequence not in it stays behind the offer before it)."""
        offering = {offer[0] for offer in queued}
        behind = self._behind
        retries = [(seq_id, *behind[seq_id][:2]) for seq_id in scheduled
                   if seq_id in behind and seq_id not in offering and self._worth_offering_again(behind[seq_id][2])]
        if not retries:
            return queued
        rank = {seq_id: i for i, seq_id in enumerate(scheduled)}
        keys, last = [], -1
        for offer in queued:
            last = rank.get(offer[0], last)
            keys.append(last)
        keys += [rank[offer[0]] for offer in retries]
        offers = queued + retries
        return [offers[i] for i in sorted(range(len(offers)), key=keys.__getitem__)]

    def _close(self, request: object) -> None:
        """The finished request's record: read by the policy (`_finish`), then ended."""
        self._limits.pop(request, None)
        a = self._requests.pop(request, None)
        if a is not None:
            self._finish(a)
            self._forget(a)

    def bind(self, seq_id: int, request: object, prompt_blocks: int) -> None:
        """Sequence ``seq_id`` (about to be placed) is ``request``'s: it carries on the request's record if a
        preemption left one, offering again from the first block (vLLM restarts its offers); with
        ``prompt_only`` it offers at most the ``prompt_blocks`` full blocks of the request's prompt."""
        self._bound[seq_id] = request
        a = self._requests.get(request)
        if a is not None:
            a.next_stored = 0
        if self.prompt_only:
            self._limits[request] = prompt_blocks

    def load(self, seq_id: int, block_hashes: Sequence[int], start: int, count: int) -> int:
        """Load the host hits ``block_hashes[start:start + count]`` (after ``start`` GPU hits) into the GPU: the
        request reuses them, and its stores skip every hit block. Returns the blocks loaded."""
        lru = self._lru
        a = self._access(seq_id)
        for pos in range(start, start + count):
            if block_hashes[pos] not in lru:
                raise KeyError(block_hashes[pos])  # not a host hit (`lookup` first)
            self._reused(a, block_hashes[pos], pos)
        a.next_stored = max(a.next_stored, start + count)
        self.reloaded_blocks += count
        return count

    def computed(self, seq_id: int, block_hashes: Sequence[int], full: int) -> int:
        """The sequence has computed its first ``full`` blocks: offer those after its last store (the tier stores
        the new ones, evicting as its policy says outside the offer, or none if too few are left). Returns the
        blocks stored (0 while stores are held back, `hold_stores`)."""
        if self._queued is not None:
            self._queued.append((seq_id, block_hashes, full))
            return 0
        if seq_id in self._finishing:
            self._finishing[seq_id] = (block_hashes, full)
            return 0
        a = self._access(seq_id)
        self._behind.pop(seq_id, None)
        request = self._request_of(seq_id)
        stop = self._stop(request, block_hashes, full)
        hashed, due = self.hashed_blocks.get(seq_id, full), False
        if hashed < full and not self._final and (known := self._stop(request, block_hashes, hashed)) < stop:
            stop, due = known, True  # blocks not hashed yet: offered again once they are
            self._behind[seq_id] = (block_hashes, full, _DUE)
        if stop <= a.next_stored:
            return 0
        self._check_positions(stop)
        start = a.next_stored
        offered = block_hashes[start:stop]
        lru, writing = self._lru, self._writing
        passing = None if self.store_filter is None else set(self.store_filter.offer(offered, lru, a.counted))
        new: dict[int, int] = {}  # hash -> position, first occurrence (a hash twice in one offer is stored once)
        held: list[tuple[int, int]] = []
        for pos, h in enumerate(offered, start):
            if h in lru:
                if h not in writing:  # stored by an earlier offer of this step: not written yet, neither reused
                    held.append((pos, h))  # nor stored again (vLLM: a chunk not ready)
            elif passing is None or h in passing:
                new.setdefault(h, pos)
        if not new and not held:
            a.next_stored = stop
            return 0
        if new:
            self._missed(a, new)
        need = len(new) - len(self._free)
        stored = need <= 0 or self._evict(need, set(offered).union(self.pinned, writing, self._parked_copies))
        # vLLM records the offer (reused blocks, new ones seen, even if the store fails) before it evicts;
        # doing it after orders nothing differently, as the offer is protected.
        self._recording(a)
        for pos, h in held:
            self._reused(a, h, pos)
        a.seen.update(new)
        if not stored:
            if not due:
                self._behind[seq_id] = (block_hashes, full, (self._changes, bool(self.pinned)))  # offered again
            return 0
        if new:
            free, n = self._free, len(new)
            blocks = free[:-n - 1:-1]  # popped from the end
            del free[-n:]
            self._lru.update(zip(new, blocks, strict=True))
            self._store(new, a)
            a.inserted.update(new)
            if self._step is not None:
                writing.update(new)
            self._changes += 1
            self.offloaded_blocks += n
        a.next_stored = stop
        return len(new)

    def offers(self, seq_id: int, block_hashes: Sequence[int], full: int) -> bool:
        """Whether `computed` with ``full`` blocks computed would offer the tier anything: blocks past the
        request's last store (a block just filled, or blocks a failed store or a fork left unoffered). A
        lazily grown decoder stops one token short of such a fill (`PagedAllocator` ``headroom``), as it is
        tier work in the step that fills the block."""
        request = self._request_of(seq_id)
        a = self._requests.get(request)
        return self._stop(request, block_hashes, full) > (0 if a is None else a.next_stored)

    def store_evicts(self, seq_id: int, block_hashes: Sequence[int], full: int) -> bool:
        """Whether `computed` with ``full`` blocks computed may evict: it would offer more blocks the host lacks
        than it has free, after those the held offers would store (the policy then picks what goes; a store
        threshold may store fewer)."""
        held = self._held_new()
        new = sum(1 for h in self._unstored(seq_id, block_hashes, full) if h not in held)
        return len(held) + new > len(self._free)

    def _held_new(self) -> set[int]:
        """The hashes the held offers (`hold_stores`) would store, at most: they take host blocks before a later
        offer of the step, so `store_evicts` counts them (a store threshold may store fewer)."""
        return {h for offer in self._queued or () for h in self._unstored(*offer)}

    def _unstored(self, seq_id: int, block_hashes: Sequence[int], full: int) -> Iterator[int]:
        """The hashes an offer of the request's first ``full`` blocks would store that the host lacks: from its
        first block not yet stored to where the offer ends (`_stop`)."""
        request = self._request_of(seq_id)
        a = self._requests.get(request)
        lru = self._lru
        return (h for h in block_hashes[0 if a is None else a.next_stored:self._stop(request, block_hashes, full)]
                if h not in lru)

    def _stop(self, request: object, block_hashes: Sequence[int], full: int) -> int:
        """Where an offer of the request's first ``full`` blocks ends: at its known blocks, with ``prompt_only`` at
        its prompt's."""
        return min(full, len(block_hashes), self._limits.get(request, full))

    def finishing(self, seq_id: int) -> None:
        """The finishing sequence is told its last tokens (speculative drafts its last step accepted) before it
        is released: their offer is made as a last offer (`release`), not now. vLLM stores a finished request's
        blocks through ``num_tokens - 1`` when it plans the next step, after that step's stores
        (``_build_store_jobs`` over ``finished_req_ids``, after the scheduled requests)."""
        if self._finished is not None:
            self._finishing[seq_id] = None

    def release(self, seq_id: int, finished: bool) -> None:
        """The sequence is freed. If its request ``finished``, the policy reads its record (`_finish`) and the
        record ends, at the next `flush_stores`, after its last offer: one that failed, or of the tokens it was
        told `finishing`; a preempted request's record waits for the sequence that places it again (`bind`)."""
        request = self._bound.pop(seq_id, seq_id)
        behind = self._behind.pop(seq_id, None)
        final = self._finishing.pop(seq_id, None)
        if final is not None:  # offered whatever changed since: the offer covers any failed one
            behind = (*final, _DUE)
        if finished and behind is not None and self._finished is not None:
            self._last_offers[seq_id] = (request, *behind)
        if self._queued:  # a sequence preempted while its step is planned offers nothing (vLLM: not scheduled)
            self._queued = [offer for offer in self._queued if offer[0] != seq_id]
        if finished:
            if self._finished is None:
                self._close(request)
            else:
                self._finished.append(request)

    # -- the record ----------------------------------------------------------------------------------------
    def _request_of(self, seq_id: int) -> object:
        """The request a sequence is bound to (`bind`; a sequence never bound is its own)."""
        return self._bound.get(seq_id, seq_id)

    def _access(self, seq_id: int) -> Access:
        request = self._request_of(seq_id)
        a = self._requests.get(request)
        if a is None:
            a = self._requests[request] = Access()
        return a

    def _reused(self, a: Access, block_hash: int, pos: int) -> None:
        """A held block the request offers or loads: reused unless it inserted it, and recorded (`_reuse`) the
        first time it sees it."""
        if block_hash not in a.inserted:
            a.reused.add(block_hash)
        if block_hash not in a.seen:
            a.seen[block_hash] = pos
            self._reuse(a, block_hash, pos)

    def _check_positions(self, stop: int) -> None:
        """A policy whose ranks hold bounded positions refuses a longer request (none here)."""

    # -- the policy's ------------------------------------------------------------------------------------
    def _recording(self, a: Access) -> None:
        """The request records blocks of an offer (before `_reuse` and `_store`)."""

    def _reuse(self, a: Access, block_hash: int, pos: int) -> None:
        """A held block the request reuses, first seen."""

    def _missed(self, a: Access, new: dict[int, int]) -> None:
        """Blocks the request offers that the host lacks, before the store evicts for them."""

    def _evict(self, count: int, protected: set[int]) -> bool:
        """Drop ``count`` cached hashes outside ``protected`` (their blocks to the free list); False, changing
        nothing, if there are fewer."""
        raise NotImplementedError

    def _store(self, new: dict[int, int], a: Access) -> None:
        """Order ``new`` (hash -> position, just cached in `_lru`) as the request's."""
        raise NotImplementedError

    def _finish(self, a: Access) -> None:
        """The request finished: reorder what it stored and reused."""

    def _forget(self, a: Access) -> None:
        """The finished request's record ends."""

    def swap_out(self, key: int, num_blocks: int, block_hashes: frozenset[int] = frozenset()) -> bool:
        """`HostTier.swap_out`, but a hashed block the host stores already is not copied, and the room it makes is
        outside the ``pinned`` hashes and those (`_room`): False, changing nothing, if the free blocks and the
        cached ones not being loaded nor taken are too few.

        Why not as the write-back tier: its swap takes such a block out of the cache while parked, but here the
        policy (LRU by request, ARC's lists) ranks every cached hash and its requests' records name them, so the
        block stays cached, where lookups still find the KV it holds, and is only kept from eviction while
        parked (`_parked_copies`, as a load's ``pinned`` blocks are); the policy ranks it as before. A hashed
        block another swapped request parks is shared with it, as in `HostTier.swap_out`."""
        if key in self._swapped:
            raise ValueError(f"host tier: {key} is already swapped out")
        lru, held = self._lru, self._parked_copies
        shared = sorted(h for h in block_hashes if h in lru)[:num_blocks]
        rest = block_hashes.difference(shared)  # parked as in `HostTier.swap_out`: shared among parkers
        joined = sum(1 for h in rest if h in self._parked_block)
        kept = self.pinned.union(held, shared, self._writing)
        if num_blocks - len(shared) - joined > len(self._free) + len(lru) - sum(1 for h in kept if h in lru):
            return False
        self._changes += 1
        for h in shared:
            held[h] = held.get(h, 0) + 1
        if shared:
            self._sharing[key] = shared
            self.shared_blocks += len(shared)
        return super().swap_out(key, num_blocks - len(shared), rest)

    def swap_in(self, key: int) -> int:
        """`HostTier.swap_in`, and the cached blocks the swap took as its parked copies may be evicted again.
        Returns how many blocks it held, those included."""
        self._changes += 1
        held = self._parked_copies
        shared = self._sharing.pop(key, ())
        for h in shared:
            n = held.pop(h)
            if n > 1:
                held[h] = n - 1
        return super().swap_in(key) + len(shared)

    def check_invariants(self) -> None:
        """`HostTier.check_invariants`, and each parked copy (`swap_out`) a cached block, counted once for every
        swapped request that took it."""
        super().check_invariants()
        for key in self._sharing:
            assert key in self._swapped, f"host tier: parked copies taken under {key}, which is not swapped out"
        counts = Counter(h for hashes in self._sharing.values() for h in hashes)
        assert counts == self._parked_copies, "host tier: parked copies miscounted"
        assert all(h in self._lru for h in counts), "host tier: a parked copy's block was evicted"

    def _room(self) -> int | None:
        """A free host block for swapped KV, evicting as the policy says if none is free, never a ``pinned`` hash
        (vLLM holds the host blocks a load is reading until it lands, so nothing evicts them meanwhile), one
        a swapped request's parked copy is (`swap_out`), nor one this step's stores are still writing
        (``_writing``: vLLM's offloading policies evict only ready chunks, ``ref_cnt == 0``,
        ``v1/kv_offload/cpu/policies``). kvsim's steps swap out while they are planned, before their stores,
        so the last never binds in a run; it keeps the rule whole for any caller."""
        if not self._free and not self._evict(1, self.pinned.union(self._parked_copies, self._writing)):
            return None
        return self._free.pop()

    # -- the write-back calls do not apply ------------------------------------------------------------------
    def offload_many(self, block_hashes: Sequence[int]) -> int:
        raise TypeError("a write-through tier is given computed blocks (`computed`), not evicted ones")

    def take(self, block_hashes: Sequence[int]) -> int:
        raise TypeError("a write-through tier loads a request's hits with `load`")
