"""A from-scratch audit of a paged allocator's state, for `PagedAllocator.check_invariants`.

Everything the allocator keeps incrementally (reference counts, the free queue, the prefix cache, the
running counters behind the O(1) `breakdown`) is recomputed here from the block tables alone, and any
disagreement raises AssertionError. Hypothesis stateful tests call it after every step. The block pool
checks its own part (`BlockPool.audit`) against the holders recomputed here; copy-on-write passes its own
state (pins, registered prefixes, shared partly filled tails) in. It imports no allocator, so the allocators
import it at the top (no circle).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from allocators.base import cdiv


def audit_paged(a, *, pins: Sequence[int] | None = None, registry: Mapping[int, int] | None = None,
                partial: Mapping[int, list[int]] | None = None, partial_res: Mapping[int, int] | None = None) -> None:
    """Audit a `PagedAllocator` (``a``); ``pins`` .. ``partial_res``: copy-on-write's state, if any."""
    bs, n = a.block_size, a.num_blocks
    pins = pins if pins is not None else [0] * n
    registry, partial, partial_res = registry or {}, partial or {}, partial_res or {}
    assert pins[0] == 0, "the null block was pinned"

    seq_refs = [0] * n
    fill = [0] * n  # token slots written in each referenced block
    want = [0] * n  # the most any referencing sequence will fill into each block
    for seq_id, s in a._seqs.items():
        # past its tokens' blocks a sequence may hold blocks for speculative draft slots (`grow_with_drafts`):
        # empty, its own, never cached
        assert s.tokens > 0 and len(s.table) >= cdiv(s.tokens, bs), f"sequence {seq_id}: table length wrong"
        assert len(set(s.table)) == len(s.table), f"sequence {seq_id}: a block appears twice in its table"
        for i, b in enumerate(s.table):
            assert 0 < b < n, f"sequence {seq_id}: block id {b} out of range"
            f = max(0, min(bs, s.tokens - i * bs))
            assert f or (seq_refs[b] == 0 and pins[b] == 0), f"sequence {seq_id}: draft-slot block {b} shared"
            assert seq_refs[b] == 0 or fill[b] == f, f"block {b}: sharers disagree on its fill"
            seq_refs[b] += 1
            fill[b] = f
            want[b] = max(want[b], min(bs, max(0, s.final - i * bs)))
    for h, b in registry.items():
        assert pins[b] > 0, f"registered prefix hash {h}: block {b} is not pinned"
        assert seq_refs[b] == 0 or fill[b] == bs, f"registered block {b} is not full"
        fill[b] = bs
    registered = set(registry.values())
    for b in range(1, n):
        assert (pins[b] > 0) == (b in registered), f"block {b}: pin count and registry disagree"
    queued = a._pool.audit([seq_refs[b] + pins[b] for b in range(n)])
    for b, h in enumerate(a._pool.cache.block_hash):
        assert h is None or a._pool.ref[b] == 0 or fill[b] == bs, f"block {b}: hashed but not full"
        assert h is None or a.prefix_caching, f"block {b}: hashed with prefix caching off"

    for b, sharers in partial.items():
        assert len(sharers) >= 2 and seq_refs[b] == len(sharers), f"block {b}: shared-partial list is wrong"
        assert 0 < fill[b] < bs, f"block {b}: listed as shared partial but fill is {fill[b]}"
        for seq_id in sharers:
            s = a._seqs[seq_id]
            assert s.table[-1] == b and s.room == 0 and s.res == 0, f"sequence {seq_id}: shared tail not frozen"
    for seq_id, s in a._seqs.items():
        last = s.table[-1]
        if last in partial:
            continue
        assert seq_refs[last] == 1 or fill[last] == bs, f"sequence {seq_id}: shares a partial tail unlisted"
        held = len(s.table) * bs
        assert s.room == held - s.tokens, f"sequence {seq_id}: room {s.room} != {held - s.tokens}"
        assert s.res == max(0, min(s.final, held) - s.tokens), f"sequence {seq_id}: reservation drifted"
    assert set(partial_res) == set(partial), "shared-partial reservations out of step"

    live = [b for b in range(1, n) if a._pool.ref[b] > 0]
    tokens = sum(fill[b] for b in live)
    reserved = sum(max(0, want[b] - fill[b]) for b in live)
    saved = sum(max(0, seq_refs[b] - 1) for b in live) * bs
    assert tokens == a._num_token_slots, f"token slots {a._num_token_slots} != recomputed {tokens}"
    assert reserved == a._reserved, f"reservation {a._reserved} != recomputed {reserved}"
    assert saved == a._shared_saved, f"shared_saved {a._shared_saved} != recomputed {saved}"
    assert len(live) + len(queued) == a.num_usable_blocks, "blocks not conserved"
    if a.host_tier is not None:
        a.host_tier.check_invariants()
    b = a.breakdown()
    total = b.token_states + b.reservation + b.internal_frag + b.external_frag + b.free
    assert total == a.capacity and b.internal_frag >= 0, f"breakdown sums to {total}, not {a.capacity}"
