"""`ArcTier`: vLLM's CPU offloading with its ARC policy (``kv_connector_extra_config={"eviction_policy": "arc"}``,
``--offload-eviction-policy arc``).

Why: ARC (Megiddo and Modha, FAST'03) keeps two lists, T1 (blocks used once) and T2 (used again), and ghost
lists of what each recently evicted (B1, B2); a store missing a block that B1 remembers says recency was
undervalued and grows T1's target size, one B2 remembers shrinks it. A scan of blocks used once (one-off
prompts) then churns T1 and leaves T2's reused blocks alone, where LRU would flush them. vLLM 0.33's
``ARCCachePolicy`` does this by request, and so does this class:

- a request's stores enter T1 (most recent last) and leave the ghost lists; before that, its store misses
  (each block once a request, newest first) adapt the target: a B1 hit adds ``max(1, |B2| / |B1|)`` (at most
  the capacity), a B2 hit subtracts ``max(1, |B1| / |B2|)`` (at least 0);
- eviction takes T1's oldest while T1 holds at least the target (as an int) and T2's oldest otherwise (else
  whichever has one), never a block of the offer being stored, and remembers each in B1 or B2; the ghost
  lists keep the capacity's worth of the latest;
- when the request finishes, its blocks, tail first: one it only inserted moves to the most recent end of its
  list, one it reused moves from T1 to T2 (or to T2's most recent end).

What is offered and stored when is `request_tier.RequestTier`'s.
"""

from __future__ import annotations

from collections import OrderedDict
from operator import itemgetter

from allocators.request_tier import Access, RequestTier

_position = itemgetter(1)


class ArcTier(RequestTier):
    """`RequestTier` ordered by ARC as vLLM's ARC policy does (the module doc): ``_t1``, ``_t2`` (cached
    hashes, oldest first) and ``_b1``, ``_b2`` (ghost hashes, oldest first), and T1's target size."""

    __slots__ = ("_t1", "_t2", "_b1", "_b2", "target_t1_size")

    def __init__(self, num_blocks: int, block_bytes: int, *, store_threshold: int = 0,
                 prompt_only: bool = False) -> None:
        super().__init__(num_blocks, block_bytes, store_threshold=store_threshold, prompt_only=prompt_only)
        self._t1: OrderedDict[int, None] = OrderedDict()
        self._t2: OrderedDict[int, None] = OrderedDict()
        self._b1: OrderedDict[int, None] = OrderedDict()
        self._b2: OrderedDict[int, None] = OrderedDict()
        self.target_t1_size = 0.0

    # -- the policy's ------------------------------------------------------------------------------------
    def _missed(self, a: Access, new: dict[int, int]) -> None:
        """Each store miss the request has not reported yet, newest first, adapts T1's target on a ghost hit."""
        misses = [h for h in new if h not in a.misses]
        a.misses.update(misses)
        b1, b2 = self._b1, self._b2
        for h in reversed(misses):
            if h in b1:
                self.target_t1_size = min(self.target_t1_size + max(1, len(b2) / len(b1)), self.num_blocks)
                b1.move_to_end(h)
            elif h in b2:
                self.target_t1_size = max(self.target_t1_size - max(1, len(b1) / len(b2)), 0)
                b2.move_to_end(h)

    def _store(self, new: dict[int, int], a: Access) -> None:
        t1, b1, b2 = self._t1, self._b1, self._b2
        for h in new:
            t1[h] = None
            b1.pop(h, None)
            b2.pop(h, None)

    def _finish(self, a: Access) -> None:
        t1, t2 = self._t1, self._t2
        for h, _ in sorted(a.seen.items(), key=_position, reverse=True):  # tail first
            if h in a.inserted and h not in a.reused:
                if h in t1:
                    t1.move_to_end(h)
                elif h in t2:
                    t2.move_to_end(h)
            elif h in a.reused:
                if h in t1:
                    del t1[h]
                    t2[h] = None
                elif h in t2:
                    t2.move_to_end(h)

    def _evict(self, count: int, protected: set[int]) -> bool:
        """Choose all ``count`` first (T1 while it holds at least the target, counting those chosen), then
        evict them into the ghost lists; False, changing nothing, if there are too few outside
        ``protected``."""
        t1_size = len(self._t1)
        target = int(self.target_t1_size)
        from_t1 = (h for h in self._t1 if h not in protected)
        from_t2 = (h for h in self._t2 if h not in protected)
        chosen: list[tuple[int, bool]] = []
        for _ in range(count):
            h = next(from_t1, None) if t1_size >= target else None
            if h is not None:
                chosen.append((h, True))
                t1_size -= 1
                continue
            h = next(from_t2, None)
            if h is not None:
                chosen.append((h, False))
                continue
            h = next(from_t1, None)
            if h is None:
                return False
            chosen.append((h, True))
            t1_size -= 1
        lru, free = self._lru, self._free
        for h, in_t1 in chosen:
            if in_t1:
                del self._t1[h]
                self._b1[h] = None
            else:
                del self._t2[h]
                self._b2[h] = None
            free.append(lru.pop(h))
        for ghost in (self._b1, self._b2):
            for _ in range(len(ghost) - self.num_blocks):
                ghost.popitem(last=False)
        self.evicted_blocks += count
        return True

    def _check_order(self) -> None:
        """T1 and T2 split the cached hashes; the ghost lists hold no cached hash and at most the capacity
        each; the target lies in [0, capacity]."""
        assert self._t1.keys().isdisjoint(self._t2), "ARC tier: a hash in T1 and T2"
        assert len(self._t1) + len(self._t2) == len(self._lru) and all(
            h in self._t1 or h in self._t2 for h in self._lru), "ARC tier: T1 and T2 do not hold the cached hashes"
        for ghost in (self._b1, self._b2):
            assert len(ghost) <= self.num_blocks and ghost.keys().isdisjoint(self._lru), "ARC tier: ghost list"
        assert 0 <= self.target_t1_size <= self.num_blocks, "ARC tier: target out of range"
