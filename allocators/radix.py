"""The radix allocator: SGLang's RadixAttention cache over a paged KV pool.

Pages (``--block-size`` slots; 1 is token-granular, SGLang's default page size) are handed out from the same
`BlockPool` as `paged`: page ids, per-sequence page tables, reference counts, a free queue. What differs is the
cache: a `RadixTree` (``radix_tree.py``) of the pages of every computed prefix, keyed by chained page hashes,
with reference counts on the nodes running sequences hold. A new sequence walks the tree from the root and
shares the longest cached path (a partial-prefix hit, at page granularity, never covering its last prompt
token); every page a sequence fills is hung under its parent as it fills (prompt and, where the workload gives
them identity, generated tokens); an unreferenced leaf is evicted, least recently used first, only when a page
is needed and no page is free; looking a waiting request up counts as use (SGLang stamps the nodes a lookup
walks: `touch_prefixes`).

Why the free queue is the LRU order of leaves: a page becomes evictable when its last holder frees it, and a
sequence releases its pages deepest first, so every unreferenced page sits behind all its unreferenced
descendants (a holder of a page holds its whole path from the root). Pages that carry nothing go to the head,
cached ones to the tail, so the queue reads ``[empty pages][cached pages, least recently used first]`` and its
cached head is always a leaf::

    free queue:  p5 p8 | p9 (leaf, used at t1)  p2 (leaf, t2)  p3 (t2, parent of p2)  p7 (t3, root child)
                 empty   <------------------ evicted in this order ------------------>

A page whose prefix another page already caches (two sequences filled the same prefix at once) is not hung
twice: the sequence stops inserting there, and when it is freed its page gives way to the cached one and
the rest of its pages are inserted below that (SGLang frees the duplicate when a request finishes). Growth
therefore never changes the memory breakdown beyond the pages it takes (``reports_growth``).

`fork` (parallel samples, beams) shares the parent's full pages (reference counts) and copies its partly
filled last page, as copy-on-write would on the first write.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter as getter

from allocators.base import NO_COPIES, Copy
from allocators.paged import PagedAllocator
from allocators.paged_audit import audit_paged
from allocators.paged_seq import SeqBlocks
from allocators.radix_tree import ROOT, RadixTree


class RadixAllocator(PagedAllocator):
    """`PagedAllocator`'s pool and bookkeeping with a radix-tree cache and sharing forks."""

    name = "radix"
    parks_own_blocks = False  # every filled page is hung in the tree at once (SGLang's tree holds them all)
    follows_vllm_block_size = False  # SGLang's page size is the one given

    def __init__(self, capacity_slots: int, **options: object) -> None:
        """Same options as `PagedAllocator`; ``prefix_caching=False`` turns the tree off (SGLang's
        ``--disable-radix-cache``)."""
        super().__init__(capacity_slots, **options)
        self._cache = self._pool.cache = RadixTree(self.num_blocks)
        # The last matches, by the hashes' identity, while the tree stands still (its ``version``): the
        # scheduler looks a waiting request up several times a step (an ``lpm`` sort, its touches, the
        # admission's fit test and the admission), each a walk of up to hundreds of pages.
        self._matched: dict[int, tuple[tuple[int, ...], int, list[int]]] = {}
        self._matched_at = -1

    def reload_transfers(self, host_blocks: int) -> int:
        """One transfer per load, whatever its pages: SGLang's HiCache moves a load with one transfer kernel
        per layer (``--hicache-io-backend kernel``, its recommended backend), not one copy per page, which at
        page size 1 would charge a copy latency per token."""
        return 1 if host_blocks else 0

    def _lookup(self, block_hashes: Sequence[int], num_tokens: int) -> list[int]:
        """The longest cached path from the root, never covering the last of ``num_tokens``."""
        limit = (num_tokens - 1) // self.block_size
        if not self.prefix_caching or limit <= 0:
            return []
        tree = self._cache
        if block_hashes.__class__ is not tuple:  # a list may change under the same identity: not remembered
            return tree.match(block_hashes, limit)
        if self._matched_at != tree.version:
            self._matched.clear()
            self._matched_at = tree.version
        key = id(block_hashes)
        entry = self._matched.get(key)
        if entry is not None and entry[0] is block_hashes and entry[1] == limit:
            return entry[2][:]
        hits = tree.match(block_hashes, limit)
        self._matched[key] = (block_hashes, limit, hits)
        return hits[:]

    def touch_prefixes(self, lookups: Sequence[tuple[Sequence[int], int]]) -> None:
        """SGLang's ``match_prefix`` stamps every node it walks as just accessed (``last_access_time``) and
        evicts the least recently accessed leaf first, so a request the scheduler keeps looking up (a head
        waiting for memory; under ``lpm`` every request it sorts) keeps its cached prefix away from eviction.
        Here each path's unreferenced pages move to the free queue's tail, deepest first, as if released now,
        path after path: the queue's cached head stays a leaf (module doc), and a page on several paths ends
        where the last of them put it. Moved in one go (the pages of every path, each where it was touched
        last), so a step that repeats the last step's lookups finds them in place and moves nothing."""
        if not self.prefix_caching:
            return
        ref, pages = self._ref, []
        for block_hashes, num_tokens in lookups:
            pages += [page for page in reversed(self._lookup(block_hashes, num_tokens)) if not ref[page]]
        if len(lookups) > 1:
            pages = list(dict.fromkeys(reversed(pages)))[::-1]  # each page where it was touched last
        self._free.move_to_tail(pages)

    def _cache_full_blocks(self, s: SeqBlocks) -> None:
        """Hang the pages the sequence has filled under its cached path, until a page whose prefix is cached
        already (settled when the sequence is freed) or one a fork shares."""
        full = s.tokens // self.block_size
        if full > len(s.hashes):
            full = len(s.hashes)
        i = s.num_hashed
        if i >= full:
            return
        ref, table = self._ref, s.table
        run = table[i:full]
        if len(run) > 1:
            refs = getter(*run)(ref)
            if refs.count(1) != len(refs):  # a page a fork shares: its holders settle it
                del run[next(k for k, r in enumerate(refs) if r != 1):]
        elif ref[run[0]] != 1:
            return
        if run:
            parent = table[i - 1] if i else ROOT
            s.num_hashed = i + self._cache.insert_chain(parent, run, s.hashes[i:i + len(run)])

    def free(self, seq_id: int, *, finished: bool = False) -> int:
        s = self._seqs[seq_id]
        if s.num_hashed < len(s.hashes):
            self._settle(s)
        return super().free(seq_id, finished=finished)

    def _settle(self, s: SeqBlocks) -> None:
        """Before a sequence is freed, insert its remaining full pages; where the tree caches a page's prefix
        already, the sequence takes the cached page and its own is released empty."""
        full = min(s.tokens // self.block_size, len(s.hashes))
        tree, ref, table, pool, bs = self._cache, self._ref, s.table, self._pool, self.block_size
        i = s.num_hashed
        parent = table[i - 1] if i else ROOT
        while i < full:
            page, h = table[i], s.hashes[i]
            if ref[page] != 1:  # shared by a fork that has not inserted it: its holders settle it
                break
            node = tree.child(parent, h)
            if node is None:
                tree.insert(page, parent, h)
            else:
                if pool.take(node):
                    self._num_token_slots += bs
                else:
                    self._shared_saved += bs
                table[i] = node
                ref[page] = 0
                pool.release([page], True)
                self._num_token_slots -= bs
            parent = table[i]
            i += 1
        s.num_hashed = i

    def fork(self, parent_id: int, child_id: int, *, final_tokens: int) -> tuple[Copy, ...] | None:
        """Share the parent's full pages; copy its partly filled last page (None if no page is free for it)."""
        if child_id in self._seqs:
            raise ValueError(f"sequence {child_id} is already allocated")
        parent = self._seqs[parent_id]
        bs, ref = self.block_size, self._ref
        full, tail = divmod(parent.tokens, bs)
        if tail and not self._free.num_free:
            return None
        shared = parent.table[:full]
        for b in shared:
            ref[b] += 1
        table = shared + [self._pool.pop()] if tail else shared
        child = SeqBlocks(table, parent.tokens, final_tokens, parent.hashes[:full])
        child.num_hashed = min(parent.num_hashed, full)
        self._seqs[child_id] = child
        self._shared_saved += full * bs
        self._num_token_slots += tail
        self._settle_last_block(child)
        return (Copy(parent.table[-1], table[-1], bs),) if tail else NO_COPIES

    def _fork_shares(self, tokens: int, total_tokens: int) -> int:
        """A fork shares the full pages and copies a partly filled tail."""
        return tokens // self.block_size

    def check_invariants(self) -> None:
        """The paged audit (pages, reference counts, free queue, accounting), then the tree's own facts:
        every sequence's hashed pages are its cached path, a node is held at least as often as any child,
        and the free queue is empty pages, then cached pages with every one behind its cached descendants."""
        audit_paged(self)
        tree, ref = self._cache, self._ref
        for seq_id, s in self._seqs.items():
            assert s.num_hashed <= min(len(s.table), len(s.hashes)), f"sequence {seq_id}: num_hashed too far"
            path = tree.match(s.hashes, s.num_hashed)
            assert path == s.table[:s.num_hashed], f"sequence {seq_id}: hashed pages are not its cached path"
        for page, h in enumerate(tree.block_hash):
            parent = tree.parent[page]
            if h is not None and parent != ROOT:
                assert ref[parent] >= ref[page], f"page {page}: held more often than its parent {parent}"
        queue = list(self._free)
        cached = [tree.block_hash[b] is not None for b in queue]
        assert cached == sorted(cached), "free queue: an empty page behind a cached one"
        position = {b: i for i, b in enumerate(queue)}
        for b in queue:
            for kid in tree.kids(b):
                assert position.get(kid, len(queue)) < position[b], f"page {b}: evictable before its child {kid}"
