"""`StoreFilter`: which blocks a write-through host tier stores, by how often they have been offered.

Why: a write-through tier (``--offload-write-policy write_through``) stores every block a request computes,
so blocks used once (most of a chat trace's turns end their conversation) take host memory from blocks
used again, and each costs a PCIe write. vLLM's CPU offloading manager (0.33 and 0.34) can store a block only once it
has been offered ``store_threshold`` times (``kv_connector_extra_config={"store_threshold": N}``; below 2:
every block). An offer is one request handing the tier its blocks (`HostTier.offload_many`): the first
request to compute a block offers it once, and each later request that hits it (on the GPU or the host)
offers it again, so with ``N = 2`` a block reaches the host when a second request uses it. A request counts
each block once (vLLM 0.34's ``counted_keys``): its offers again, after a store that failed or after its
preemption, are not another use of the block (0.33 counted them too). SGLang HiCache's
``write_through_selective`` is the same idea counted on radix-tree hits.

The counts live in a bounded table, least recently offered first (vLLM's ``max_tracker_size``, 64,000
entries): every offer moves each tracked hash of its batch to the back and counts those its request has not
counted yet, and a hash not yet tracked enters with count 1, taking the place of the least recently offered
hash that this batch did not offer (none left: it is not tracked). A hash the tier holds already is passed on
(the tier touches it); a hash not held is passed on only once its count reaches the threshold, else skipped
(counted in ``skipped_blocks``, vLLM's ``stores_skipped``, once a request).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container, Sequence

MAX_TRACKED = 64_000
"""vLLM's default ``max_tracker_size``: the most hashes whose offers are counted at once."""


class StoreFilter:
    """Offer counts of block hashes, least recently offered first, and the threshold a store needs."""

    __slots__ = ("threshold", "max_tracked", "_counts", "skipped_blocks")

    def __init__(self, threshold: int, max_tracked: int = MAX_TRACKED) -> None:
        if threshold < 2 or max_tracked < 1:
            raise ValueError(f"store filter: threshold must be >= 2 (below 2 every block is stored: no filter) and "
                             f"max_tracked >= 1, got {threshold}, {max_tracked}")
        self.threshold = int(threshold)
        self.max_tracked = int(max_tracked)
        self._counts: OrderedDict[int, int] = OrderedDict()
        self.skipped_blocks = 0  # offered hashes not held and not stored: their count was below the threshold

    def offer(self, block_hashes: Sequence[int], held: Container[int], counted: set[int] | None = None) -> list[int]:
        """Count one offer of each of ``block_hashes`` and return, in order, those to hand the tier: the ones
        it ``held`` already and the ones offered at least ``threshold`` times by now. ``counted``: the hashes
        the offering request has counted before (not counted again; this offer's are added), None: none."""
        counts = self._counts
        before: Container[int] = () if counted is None else counted  # updated once this offer is counted
        offered_again = set()
        for h in block_hashes:  # tracked hashes first: they are protected from this batch's new entries
            if h in counts:
                if h not in before:
                    counts[h] += 1
                counts.move_to_end(h)
                offered_again.add(h)
        evictable = len(counts) - len(offered_again)  # tracked hashes this batch did not offer, oldest first
        for h in block_hashes:
            if h in counts:
                continue
            if len(counts) >= self.max_tracked:
                if not evictable:
                    continue
                counts.popitem(last=False)
                evictable -= 1
            counts[h] = 1
        threshold = self.threshold
        passed = [h for h in block_hashes if h in held or counts.get(h, 0) >= threshold]
        self.skipped_blocks += sum(1 for h in block_hashes if h not in held and counts.get(h, 0) < threshold
                                   and h not in before)
        if counted is not None:
            counted.update(block_hashes)
        return passed

    def count(self, block_hash: int) -> int:
        """How many times ``block_hash`` has been offered while tracked (0: not tracked)."""
        return self._counts.get(block_hash, 0)

    def check_invariants(self) -> None:
        """The table is within its bound and every tracked hash has been offered at least once."""
        assert len(self._counts) <= self.max_tracked, "store filter: more hashes tracked than its bound"
        assert all(n >= 1 for n in self._counts.values()), "store filter: a tracked hash with no offer"
        assert self.skipped_blocks >= 0, "store filter: negative skipped count"
