"""Hypothesis drives every allocator (and every placement) with random admit/grow/fork/free sequences.

After every step `check_invariants()` recomputes the allocator's state from scratch; the machine also keeps
its own model of each sequence's tokens and checks that the breakdown sums to capacity, that a refused call
changes nothing (a hybrid pool's windows still free what they left behind, as vLLM's do), that growing by
the headroom needs no allocator work, that freeing returns exactly what the sequence held, and (where the
allocator has it) that ``grow_due`` does what ``grow`` does. `paged-cow` also swaps sequences out and back in
(its pinned shared-prefix blocks stay on the GPU and are taken back, not moved).
vAttention's pages are built ``BLOCK`` tokens long, so its mapped-page list reads as a block table here.

`RingSlabMachine` drives the contiguous slabs on models with sliding windows (ring-buffer window layers).

`HostTierMachine` puts a small host tier behind the paged allocators' prefix cache (and `HybridHostTierMachine`
behind a hybrid pool's) and a small GPU pool in front of it, so that evictions spill to the host, host hits are
loaded back and swapped KV is parked there: after every step the tiers' blocks are conserved (GPU: used + free
= usable; host: cached + swapped + free = capacity, every host block held once). The paged allocators run it
with a write-back tier and with a write-through one (every computed block is on the host after admission).
"""

import copy

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from allocators import ALLOCATORS, make_allocator
from allocators.arc_tier import ArcTier
from allocators.base import (
    FREE_OWNER,
    OVERHEAD_OWNER,
    SLOT_INTERNAL,
    SLOT_RESERVED,
    SLOT_STATES,
    SLOT_TOKEN,
)
from allocators.contiguous import ContiguousAllocator
from allocators.host_tier import HostTier
from allocators.hybrid import HybridPagedAllocator
from allocators.kv_cache_groups import skipped_blocks
from allocators.lru_tier import LruTier
from allocators.paged_cow import PagedCowAllocator
from allocators.placement import PLACEMENTS
from tests.allocators.kv_group_fixture import KVGroupFixture
from tests.soak import examples, steps

SETTINGS = settings(max_examples=examples(12), stateful_step_count=steps(30), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
BLOCK = 4


def chained_hashes(group: int, num_blocks: int) -> tuple[int, ...]:
    """Chained hashes of a prompt whose first blocks are shared within ``group`` (distinct across groups); a
    tuple, as a request's (`radix` remembers its matches of tuples while its tree stands still)."""
    return tuple(group * 1000 + i for i in range(num_blocks))


class AllocatorMachine(RuleBasedStateMachine):
    allocator_name = "paged"
    options: dict = {}

    @initialize(capacity=st.integers(min_value=3 * BLOCK, max_value=40 * BLOCK + 3))
    def build(self, capacity):
        self.alloc = make_allocator(self.allocator_name, capacity, block_size=BLOCK, max_model_len=64,
                                    **self.options)
        self.tokens: dict[int, int] = {}
        self.hashes: dict[int, tuple[int, ...]] = {}  # each sequence's block hashes (a fork: its parent's)
        self.prefixes: list[list[int]] = []
        self.next_id = 0

    def snapshot(self):
        return self.alloc.breakdown(), self.alloc.memory_map().tobytes()

    def held(self, seq):
        if isinstance(self.alloc, ContiguousAllocator):
            return self.alloc._seqs[seq].physical
        return len(self.alloc.block_table(seq)) * BLOCK

    @rule(num=st.integers(1, 40), extra=st.integers(0, 40), group=st.sampled_from([None, 1, 2]),
          with_max=st.booleans())
    def admit(self, num, extra, group, with_max):
        # hashes past the prompt too (the simulator gives generated blocks identity): blocks are cached as they
        # fill, and two sequences of a group filling the same block at once exercise duplicates
        hashes = chained_hashes(group, (num + extra) // BLOCK) if group is not None else ()
        max_total = num + extra + 8 if with_max else None
        before = self.snapshot()
        seq, self.next_id = self.next_id, self.next_id + 1
        if self.alloc.never_fits(num, final_tokens=num + extra, max_total_tokens=max_total):
            return
        cached = self.alloc.num_cached_tokens(hashes, num)
        adm = self.alloc.admit(seq, num, final_tokens=num + extra, max_total_tokens=max_total, block_hashes=hashes)
        if adm is None:
            assert self.snapshot() == before
            return
        self.hashes[seq] = hashes
        assert adm.cached_tokens == cached and cached < num
        self.tokens[seq] = num

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), n=st.integers(1, 20))
    def grow(self, data, n):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        before = self.snapshot()
        copies = self.alloc.grow(seq, n)
        if copies is None:
            assert self.snapshot() == before
        else:
            self.tokens[seq] += n

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def grow_by_headroom(self, data):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        room = self.alloc.headroom(seq)
        if room:
            used_before = self.alloc.breakdown().used_blocks
            assert self.alloc.grow(seq, room) == ()
            assert self.alloc.breakdown().used_blocks == used_before
            self.tokens[seq] += room

    @precondition(lambda self: self.tokens and self.alloc.reports_growth)
    @rule(data=st.data(), past=st.integers(1, 12))
    def grow_due(self, data, past):
        """The decode fast-forward's call: ``past`` tokens beyond the headroom. Same outcome as `grow` on a
        copy (blocks, free-queue order, breakdown), and the changes it reports are the ones that happened."""
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        num = self.alloc.headroom(seq) + past
        twin = copy.deepcopy(self.alloc)
        before = self.snapshot()
        table = self.alloc.block_table(seq)
        grown = self.alloc.grow_due(seq, num)
        expected = twin.grow(seq, num)
        assert self.snapshot() == (twin.breakdown(), twin.memory_map().tobytes())
        assert self.alloc.free_block_ids() == twin.free_block_ids()
        assert self.alloc.block_table(seq) == twin.block_table(seq)
        if grown is None:
            assert expected is None and self.snapshot() == before
            return
        headroom, new_blocks, reserved = grown
        assert headroom == self.alloc.headroom(seq)
        assert new_blocks == len(self.alloc.block_table(seq)) - len(table) == (
            self.alloc.breakdown().used_blocks - before[0].used_blocks)
        assert reserved == self.alloc.breakdown().reservation - before[0].reservation
        self.tokens[seq] += num

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), extra=st.integers(0, 20))
    def fork(self, data, extra):
        parent = data.draw(st.sampled_from(sorted(self.tokens)))
        child, self.next_id = self.next_id, self.next_id + 1
        before = self.snapshot()
        copies = self.alloc.fork(parent, child, final_tokens=self.tokens[parent] + extra)
        if copies is None:
            assert self.snapshot() == before
        else:
            self.tokens[child] = self.tokens[parent]
            self.hashes[child] = self.hashes.get(parent, ())

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        held = self.held(seq)
        assert self.alloc.free(seq) == held
        del self.tokens[seq]

    @precondition(lambda self: self.tokens and isinstance(self.alloc, PagedCowAllocator))
    @rule(data=st.data())
    def swap_out_and_in(self, data):
        """A sequence swapped out and placed again (paged-cow, as vLLM v0.3 swapped a group with a prefix): its
        pinned blocks (a registered prefix's) are not moved, stay allocated while it is out, and are its first
        blocks again once the admission that brings it back has looked its hashes up; it then takes at most
        the blocks the swap moved from the free queue (fewer where a prefix cache or a prefix registered
        since gives it more)."""
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        table = self.alloc.block_table(seq)
        pinned = tuple(b for b in table if self.alloc._pins[b])
        assert table[:len(pinned)] == pinned, "pinned blocks not leading the table"
        swap = self.alloc.swap_group([seq], [0])
        assert (swap.transfers, swap.slots, swap.resident_slots) == (
            len(table) - len(pinned), (len(table) - len(pinned)) * BLOCK, len(pinned) * BLOCK)
        self.alloc.free(seq)
        num = self.tokens.pop(seq)
        assert all(self.alloc.ref_count(b) > 0 for b in pinned), "a pinned block left the GPU"
        if self.alloc.never_fits(num, final_tokens=num):
            return
        used = self.alloc.breakdown().used_blocks
        if self.alloc.admit(seq, num, final_tokens=num, block_hashes=self.hashes.get(seq, ()),
                            apply_watermark=False) is None:
            return
        self.tokens[seq] = num
        assert self.alloc.block_table(seq)[:len(pinned)] == pinned
        assert self.alloc.breakdown().used_blocks - used <= swap.transfers

    @rule(lookups=st.lists(st.tuples(st.integers(2, 40), st.sampled_from([1, 2])), min_size=1, max_size=3))
    def touch_prefixes(self, lookups):
        """Waiting requests looked up (radix: their cached paths become the most recently used, a page on two
        paths where the last put it): what they would hit, and every held sequence, stay as they were."""
        asked = [(chained_hashes(group, num // BLOCK), num) for num, group in lookups]
        cached = [self.alloc.num_cached_tokens(h, n) for h, n in asked]
        held = {seq: self.held(seq) for seq in self.tokens}
        self.alloc.touch_prefixes(asked)
        assert [self.alloc.num_cached_tokens(h, n) for h, n in asked] == cached
        assert {seq: self.held(seq) for seq in self.tokens} == held

    @precondition(lambda self: hasattr(self.alloc, "register_prefix"))
    @rule(group=st.sampled_from([1, 2]), blocks=st.integers(1, 3))
    def register_prefix(self, group, blocks):
        hashes = chained_hashes(group, blocks)
        if self.alloc.register_prefix(hashes) is not None:
            self.prefixes.append(hashes)

    @precondition(lambda self: getattr(self, "prefixes", None))
    @rule(data=st.data())
    def release_prefix(self, data):
        hashes = self.prefixes.pop(data.draw(st.integers(0, len(self.prefixes) - 1)))
        assert self.alloc.release_prefix(hashes) == len(hashes) * BLOCK

    @invariant()
    def consistent(self):
        if not hasattr(self, "alloc"):
            return
        self.alloc.check_invariants()
        matched = getattr(self.alloc, "_matched", None)  # radix's remembered matches: only while they hold
        if matched and self.alloc._matched_at == self.alloc._cache.version:
            for hashes, limit, hits in matched.values():
                assert self.alloc._cache.match(hashes, limit) == hits, "radix: a remembered match is stale"
        for waiting in (False, True):
            b = self.alloc.breakdown(waiting)
            parts = (b.token_states, b.reservation, b.internal_frag, b.external_frag, b.free)
            assert sum(parts) == b.capacity == self.alloc.capacity and min(parts) >= 0
        for seq, n in self.tokens.items():
            assert self.alloc.num_tokens(seq) == n and self.alloc.headroom(seq) >= 0

    def teardown(self):
        if not hasattr(self, "alloc"):
            return
        for seq in list(self.tokens):
            self.alloc.free(seq)
        while self.prefixes:
            self.alloc.release_prefix(self.prefixes.pop())
        self.alloc.check_invariants()
        b = self.alloc.breakdown()
        assert b.token_states == b.reservation == b.internal_frag == b.used_blocks == b.shared_saved == 0


CONFIGS = [(name, {"placement": p}) for name in ALLOCATORS if name.startswith("contiguous") for p in PLACEMENTS]
CONFIGS += [(name, {"prefix_caching": pc}) for name in ALLOCATORS
            if name.startswith("paged") or name == "radix" for pc in (False, True)]
CONFIGS += [("paged", {"prefix_caching": True, "watermark": 0.1})]
CONFIGS += [("vattention", {"prefix_caching": pc}) for pc in (False, True)]  # no prefix cache: True is ignored

for _name, _options in CONFIGS:
    _label = "_".join([_name, *map(str, _options.values())]).replace("-", "_").replace(".", "")
    _machine = type(f"Machine_{_label}", (AllocatorMachine,), {"allocator_name": _name, "options": _options})
    globals()[f"Test_{_label}"] = SETTINGS(_machine).TestCase


def test_every_allocator_is_exercised():
    covered = {name for name, _ in CONFIGS}
    assert covered == set(ALLOCATORS)


class HybridMachine(AllocatorMachine):
    """The hybrid paged allocator (one pool, a block table per KV cache group, sliding windows freeing what
    fell out of them) under the same rules, plus prefill chunks (`grow_chunk`), whose windows free later."""

    kv_groups: tuple = ()

    @initialize(capacity=st.integers(min_value=3 * BLOCK, max_value=40 * BLOCK + 3),
                budget=st.sampled_from([None, 4, 16]))
    def build(self, capacity, budget):
        self.alloc = HybridPagedAllocator(capacity, block_size=BLOCK, max_model_len=64, kv_groups=self.kv_groups,
                                          max_num_batched_tokens=budget, **self.options)
        self.tokens: dict[int, int] = {}
        self.hashes: dict[int, tuple[int, ...]] = {}
        self.prefixes: list[list[int]] = []
        self.next_id = 0

    def held(self, seq):
        return sum(self.alloc.live_blocks(seq)) * BLOCK

    @rule(num=st.integers(1, 60), chunk=st.integers(1, 20))
    def admit_first_chunk(self, num, chunk):
        """A prompt admitted for its first chunk only, if its whole length would fit (vLLM's
        ``scheduler_reserve_full_isl``, a window group's share capped at its admission cap)."""
        chunk = min(chunk, num)
        if self.alloc.never_fits(num, final_tokens=num):
            return
        seq, self.next_id = self.next_id, self.next_id + 1
        before = self.snapshot()
        if self.alloc.admit(seq, chunk, final_tokens=num, full_tokens=num) is None:
            assert self.snapshot() == before
        else:
            self.tokens[seq] = chunk

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), n=st.integers(1, 20))
    def grow(self, data, n):
        """A decode sync: the window groups free what its last token no longer needs."""
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        self._extend(seq, n, self.tokens[seq] + n - 1, self.alloc.grow)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), n=st.integers(1, 20))
    def grow_chunk(self, data, n):
        """A prefill chunk: the window groups free what its first token no longer needs."""
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        self._extend(seq, n, self.tokens[seq], self.alloc.grow_chunk)

    def _extend(self, seq, n, computed, call):
        """A refused call still frees what ``computed`` tokens (at most the slots it holds) left out of each
        window, as vLLM removes the skipped blocks before it checks for room, and changes nothing else; tried
        again, it changes nothing at all."""
        tables = self.alloc.block_tables(seq)
        if call(seq, n) is not None:
            self.tokens[seq] += n
            return
        assert self.alloc.num_tokens(seq) == self.tokens[seq]
        computed = min(computed, len(tables[0]) * BLOCK)
        for table, was, w, c in zip(self.alloc.block_tables(seq), tables, self.alloc.windows, self.alloc.chunked,
                                    strict=True):
            skipped = 0 if w is None else skipped_blocks(computed, w, BLOCK, c)
            assert table == (0,) * skipped + was[skipped:]
        before = self.snapshot()
        assert call(seq, n) is None and self.snapshot() == before


HYBRID_LAYOUTS = {  # KVGroup-like fixtures: window 8 and 6 (a multiple of the block and not), pure sliding, and
    # Llama 4's chunked-local attention (chunks of 8 tokens, two KV cache groups of them beside the full one)
    "gemma_like": (KVGroupFixture("local", "sliding_window", 2, 8, 200),
                   KVGroupFixture("global", "full", 1, None, 100)),
    "odd_window": (KVGroupFixture("sw", "sliding_window", 1, 6, 100), KVGroupFixture("full", "full", 1, None, 100)),
    "mistral_like": (KVGroupFixture("sliding", "sliding_window", 2, 8, 200),),
    "llama4_like": (KVGroupFixture("chunked", "chunked_local", 2, 8, 200),
                    KVGroupFixture("global", "full", 1, None, 100)),
}
for _layout, _groups in HYBRID_LAYOUTS.items():
    for _pc in (False, True):
        _machine = type(f"Machine_hybrid_{_layout}_{_pc}", (HybridMachine,),
                        {"kv_groups": _groups, "options": {"prefix_caching": _pc}})
        globals()[f"Test_hybrid_{_layout}_{_pc}"] = SETTINGS(_machine).TestCase


class RingSlabMachine(AllocatorMachine):
    """A contiguous allocator on a model with sliding windows (`allocators.slab_layout`): slabs whose window
    layers are ring buffers, windows far shorter than ``max_model_len`` so that most sequences pass them. Beyond
    the common rules: the token states are the machine's own count, a window layer's token counted at most
    ``window`` tokens back, and the slot map agrees with the breakdown share by share. A request holds a slab per
    unit of layers (the full layers' and each ring's, placed apart), and a call that fails leaves the placement's
    free extents as they were too (a request places all its slabs or none)."""

    kv_groups: tuple = ()
    full = 0  # the expected layout: slots a token takes in the full layers, and (window, slots) per ring
    rings: tuple = ()

    @initialize(capacity=st.integers(min_value=3 * BLOCK, max_value=60 * BLOCK + 3))
    def build(self, capacity):
        self.alloc = make_allocator(self.allocator_name, capacity, block_size=BLOCK, max_model_len=64,
                                    kv_groups=self.kv_groups, **self.options)
        assert self.alloc.capacity == capacity * (self.full + sum(s for _, s in self.rings))
        self.tokens: dict[int, int] = {}
        self.hashes: dict[int, tuple[int, ...]] = {}
        self.prefixes: list[list[int]] = []
        self.next_id = 0

    def snapshot(self):
        return (*super().snapshot(), self.alloc.placement.free_extents())

    @invariant()
    def rings_hold_the_window(self):
        if not hasattr(self, "alloc"):
            return
        b = self.alloc.breakdown()
        owners = self.alloc.memory_map()
        assert ((owners == OVERHEAD_OWNER).sum(), (owners == FREE_OWNER).sum()) == (b.external_frag, b.free)
        for seq in self.tokens:
            slabs = self.alloc._seqs[seq].pieces
            assert len(slabs) == self.full + sum(s for _, s in self.rings)  # a slab a unit of layers
            assert (owners == seq).sum() == sum(size for _, size, _ in slabs)
        assert b.token_states == sum(self.full * t + sum(s * min(t, w) for w, s in self.rings)
                                     for t in self.tokens.values())
        counts = np.bincount(self.alloc.slot_states(), minlength=len(SLOT_STATES))
        assert (counts[SLOT_TOKEN], counts[SLOT_RESERVED], counts[SLOT_INTERNAL]) == (
            b.token_states, b.reservation, b.internal_frag)
        for seq, t in self.tokens.items():  # told every token while a ring fills (the lazy decode's slope)
            assert self.alloc.headroom(seq) == 0 or t >= max(w for w, _ in self.rings)


RING_LAYOUTS = {  # (groups, full slots, rings): HYBRID_LAYOUTS' and two windows, one past max_model_len
    "gemma_like": (HYBRID_LAYOUTS["gemma_like"], 1, ((8, 2),)),
    "odd_window": (HYBRID_LAYOUTS["odd_window"], 1, ((6, 1),)),
    "mistral_like": (HYBRID_LAYOUTS["mistral_like"], 0, ((8, 1),)),
    "two_windows": ((KVGroupFixture("near", "sliding_window", 1, 5, 100),
                     KVGroupFixture("far", "sliding_window", 3, 100, 300),
                     KVGroupFixture("full", "full", 2, None, 200)), 2, ((5, 1), (100, 3))),
}
for _name in (n for n in ALLOCATORS if n.startswith("contiguous")):
    for _layout, (_groups, _full, _rings) in RING_LAYOUTS.items():
        for _placement in PLACEMENTS:
            _label = f"{_name}_{_layout}_{_placement}".replace("-", "_")
            _machine = type(f"Machine_ring_{_label}", (RingSlabMachine,),
                            {"allocator_name": _name, "options": {"placement": _placement}, "kv_groups": _groups,
                             "full": _full, "rings": _rings})
            globals()[f"Test_ring_{_label}"] = SETTINGS(_machine).TestCase


class HostTierMachine(AllocatorMachine):
    """A paged allocator with prefix caching and a host tier, both small, prompts sharing long prefixes; the
    tier write-back (evicted blocks spill to it) or, with ``write_through``, given every block as computed
    (with ``store_threshold``, stored once offered that often)."""

    options = {"prefix_caching": True}
    write_through = False
    store_threshold = 0
    eviction_policy = LruTier  # or ArcTier (write-through only)
    admit = grow_by_headroom = grow_due = swap_out_and_in = None  # `admit_shared` admits; the fewer rules, the
    # more spills and hits

    @initialize(capacity=st.integers(min_value=3 * BLOCK, max_value=8 * BLOCK + 3), host=st.integers(0, 10))
    def build(self, capacity, host):
        super().build(capacity)
        self.tier = (self.eviction_policy(host, block_bytes=BLOCK * 10, store_threshold=self.store_threshold)
                     if self.write_through else HostTier(host, block_bytes=BLOCK * 10))
        assert self.alloc.attach_host_tier(self.tier) and self.alloc.host_tier is self.tier
        self.parked: list[int] = []

    @rule(num=st.integers(5, 33), group=st.sampled_from([1, 2]))
    def admit_shared(self, num, group):
        """An admission whose hits split into GPU hits, then host hits loaded into new blocks."""
        hashes = chained_hashes(group, num // BLOCK)
        seq, self.next_id = self.next_id, self.next_id + 1
        if self.alloc.never_fits(num, final_tokens=num):
            return
        gpu = len(self.alloc._lookup(hashes, num))
        host = self.tier.lookup(hashes, gpu, (num - 1) // BLOCK)
        assert self.alloc.num_cached_tokens(hashes, num) == (gpu + host) * BLOCK
        reloaded, before = self.tier.reloaded_blocks, self.snapshot()
        adm = self.alloc.admit(seq, num, final_tokens=num, block_hashes=hashes)
        if adm is None:
            assert self.snapshot() == before and self.tier.reloaded_blocks == reloaded
            return
        assert (adm.cached_tokens, adm.host_tokens) == ((gpu + host) * BLOCK, host * BLOCK)
        assert self.tier.reloaded_blocks == reloaded + host
        for i in range(gpu, gpu + host):  # loaded blocks are cached again, under their hashes
            assert self.alloc.block_hash(self.alloc.block_table(seq)[i]) == hashes[i]
        if self.write_through and not host and \
                2 * len(hashes) <= self.tier.num_blocks - self.tier.swapped_blocks - len(self.tier._parked_copies):
            offered = self.tier.store_filter.count if self.tier.store_filter else None
            assert all(h in self.tier or offered and offered(h) < self.store_threshold for h in hashes), \
                "write-through: a computed block offered often enough is not on the host"
        self.tokens[seq] = num

    @rule(num=st.integers(5, 33), group=st.sampled_from([1, 2]))
    def admit_then_free(self, num, group):
        """A request that comes and goes: its cached blocks stay behind to be evicted to the host and hit."""
        seq = self.next_id
        self.admit_shared(num, group)
        if seq in self.tokens:
            held = self.held(seq)
            assert self.alloc.free(seq) == held
            del self.tokens[seq]
            if self.write_through:
                self.tier.release(seq, finished=True)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), finished=st.booleans())
    def free(self, data, finished):
        """A sequence freed for good (a write-through tier ranks its blocks anew) or preempted."""
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        held = self.held(seq)
        assert self.alloc.free(seq) == held
        del self.tokens[seq]
        if self.write_through:
            self.tier.release(seq, finished)


    @precondition(lambda self: len(getattr(self, "parked", ())) < 2)
    @rule(blocks=st.integers(1, 2))
    def park(self, blocks):
        key = self.next_id
        self.next_id += 1
        t = self.tier
        free, cached = t.num_free, t.cached_blocks
        kept = len(t._lru.keys() & t._parked_copies.keys()) if self.write_through else 0  # parked copies stay
        if t.swap_out(key, blocks):
            self.parked.append(key)
        else:
            assert blocks > free + cached - kept and (t.num_free, t.cached_blocks) == (free, cached)

    @precondition(lambda self: len(getattr(self, "parked", ())) < 2)
    @rule(data=st.data(), more=st.integers(0, 1))
    def park_cached(self, data, more):
        """A swap-out whose hashed blocks the host caches in part: their cached blocks are its parked copies,
        nothing copied (a write-back tier takes them out of its cache, a write-through one keeps them cached
        and evicts none while parked), and the others come from free or evicted blocks."""
        t = self.tier
        cached = sorted(t._lru)
        hashes = frozenset(data.draw(st.lists(st.sampled_from(cached), max_size=2))) if cached else frozenset()
        key, blocks = self.next_id, len(hashes) + more
        self.next_id += 1
        kept = hashes.union(t._parked_copies, t.pinned) if self.write_through else hashes
        if not blocks or more > t.num_free + len(cached) - len(kept & t._lru.keys()):
            return
        free, shared, evicted = t.num_free, t.shared_blocks, t.evicted_blocks
        assert t.swap_out(key, blocks, hashes)
        self.parked.append(key)
        assert t.shared_blocks == shared + len(hashes)
        assert all(h in t for h in hashes) if self.write_through else not any(h in t for h in hashes)
        assert t.evicted_blocks == evicted + max(0, more - free)  # only the block not on the host

    @precondition(lambda self: 0 < len(getattr(self, "parked", ())) < 3)
    @rule(data=st.data(), more=st.integers(0, 1))
    def park_parked(self, data, more):
        """A swap-out whose hashed blocks another swapped request parks already: it shares their host blocks
        (vLLM v0's prefix-caching CPU allocator: one block a hash), nothing copied, no block taken."""
        t = self.tier
        parked = sorted(h for h in t._parked_block if h not in t._lru)
        hashes = frozenset(data.draw(st.lists(st.sampled_from(parked), max_size=2))) if parked else frozenset()
        key, blocks = self.next_id, len(hashes) + more
        self.next_id += 1
        if not hashes:
            return
        free, joined, swapped = t.num_free, t.joined_blocks, t.swapped_blocks
        if not t.swap_out(key, blocks, hashes):
            assert more and (t.num_free, t.joined_blocks, t.swapped_blocks) == (free, joined, swapped)
            return
        self.parked.append(key)
        assert t.joined_blocks == joined + len(hashes) and t.swapped_blocks == swapped + more

    @precondition(lambda self: getattr(self, "parked", None))
    @rule(data=st.data())
    def unpark(self, data):
        key = self.parked.pop(data.draw(st.integers(0, len(self.parked) - 1)))
        self.tier.swap_in(key)

    @invariant()
    def host_counters(self):
        if hasattr(self, "tier"):
            t = self.tier
            t.check_invariants()
            assert t.offload_bytes == t.offloaded_blocks * t.block_bytes
            assert t.cached_blocks + t.swapped_blocks + t.num_free == t.num_blocks
            taken = 0 if t.write_through else t.shared_blocks  # a write-through tier's parked copies stay cached
            assert t.cached_blocks == t.offloaded_blocks + t.kept_blocks - t.evicted_blocks - taken


for _name in ("paged", "paged-cow", "radix"):
    for _through, _threshold, _policy in ((False, 0, None), (True, 0, LruTier), (True, 2, LruTier),
                                          (True, 0, ArcTier)):
        _machine = type(f"HostTierMachine_{_name}_{_through}_{_threshold}_{_policy}", (HostTierMachine,),
                        {"allocator_name": _name, "write_through": _through, "store_threshold": _threshold,
                         "eviction_policy": _policy})
        _test = (f"Test_host_tier_{_name.replace('-', '_')}" + ("_write_through" if _through else "")
                 + (f"_store_threshold_{_threshold}" if _threshold else "") + ("_arc" if _policy is ArcTier else ""))
        globals()[_test] = settings(SETTINGS, max_examples=examples(25),
                                    stateful_step_count=steps(40))(_machine).TestCase


class HybridHostTierMachine(HostTierMachine, HybridMachine):
    """A hybrid pool (sliding windows) with prefix caching and a host tier: a hit's blocks may be on the GPU or
    on the host in any mix (a window group needs only the last blocks before the hit's end), so an admission
    checks its hit against the GPU's alone and the loads against the tier's counters."""

    @initialize(capacity=st.integers(min_value=3 * BLOCK, max_value=10 * BLOCK + 3), host=st.integers(0, 12),
                budget=st.sampled_from([None, 4, 16]))
    def build(self, capacity, host, budget):
        HybridMachine.build(self, capacity, budget)
        self.tier = HostTier(host, block_bytes=BLOCK * 10)
        assert self.alloc.attach_host_tier(self.tier) and self.alloc.host_tier is self.tier
        self.parked = []

    def held(self, seq):
        return HybridMachine.held(self, seq)

    @rule(num=st.integers(5, 33), group=st.sampled_from([1, 2]))
    def admit_shared(self, num, group):
        """The hit with the tier is at least the GPU's alone; the tokens it adds are the host's, loaded in
        ``host_blocks`` blocks the tier counts, and every block of the hit is cached under its group key."""
        alloc, hashes = self.alloc, chained_hashes(group, num // BLOCK)
        seq, self.next_id = self.next_id, self.next_id + 1
        if alloc.never_fits(num, final_tokens=num):
            return
        total = alloc.num_cached_tokens(hashes, num)
        gpu = alloc._hit_blocks(hashes, num, alloc._cache.getter) * BLOCK
        assert gpu <= total
        reloaded, before = self.tier.reloaded_blocks, self.snapshot()
        adm = alloc.admit(seq, num, final_tokens=num, block_hashes=hashes)
        if adm is None:
            assert self.snapshot() == before and self.tier.reloaded_blocks == reloaded
            return
        assert (adm.cached_tokens, adm.host_tokens) == (total, total - gpu)
        assert (adm.host_blocks > 0) == (total > gpu) and self.tier.reloaded_blocks == reloaded + adm.host_blocks
        n = len(alloc.groups)
        for g, table in enumerate(alloc.block_tables(seq)):
            for i in range(total // BLOCK):
                if table[i]:
                    assert alloc._cache.block_hash[table[i]] == hashes[i] * n + g
        self.tokens[seq] = num


for _layout, _groups in HYBRID_LAYOUTS.items():
    _machine = type(f"HybridHostTierMachine_{_layout}", (HybridHostTierMachine,),
                    {"kv_groups": _groups, "options": {"prefix_caching": True}})
    globals()[f"Test_host_tier_hybrid_{_layout}"] = settings(SETTINGS, max_examples=examples(25),
                                                             stateful_step_count=steps(40))(_machine).TestCase


def test_the_host_tier_machine_spills_and_hits():
    """What the host-tier machine drives, by hand: with 5 usable GPU blocks, a 5-block prompt of another prefix
    evicts the first prompt's 4 cached blocks to the host, and the first prompt's return loads all 4 back."""
    alloc = make_allocator("paged", 6 * BLOCK, block_size=BLOCK, max_model_len=64, prefix_caching=True)
    tier = HostTier(8, block_bytes=BLOCK * 10)
    alloc.attach_host_tier(tier)
    hashes = chained_hashes(1, 4)
    assert alloc.admit(0, 17, final_tokens=17, block_hashes=hashes).cached_tokens == 0
    alloc.free(0)
    assert alloc.admit(1, 17, final_tokens=17, block_hashes=chained_hashes(2, 4)) is not None  # evicts all 4
    assert tier.offloaded_blocks == 4 and tier.cached_blocks == 4
    alloc.free(1)
    adm = alloc.admit(2, 17, final_tokens=17, block_hashes=hashes)
    assert (adm.cached_tokens, adm.host_tokens) == (16, 16) and tier.reload_bytes == 4 * BLOCK * 10
    alloc.check_invariants()
