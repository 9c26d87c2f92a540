"""The radix tree of the `radix` allocator (SGLang's RadixAttention cache), over pages of a KV pool.

Each cached page is a node; its key is the chained hash of its page (``Request.block_hashes``: equal hashes
mean equal prefixes), its parent the page holding the page before it, the root the null page 0 (never a
real page). A lookup walks from the root one page at a time, so a hit is always a whole path from the root,
and a prompt sharing only part of a cached path hits that part (at page granularity; ``--block-size 1`` makes
it token-granular, SGLang's default page size)::

    root ─ p7 (h0) ─ p3 (h1) ─ p9 (h2)          request A: h0 h1 h2 ...
                   └ p4 (h1') ─ p2 (h2')        request B: h0 h1' h2' ...   (shares p7 with A)

Unlike SGLang's tree, an edge here is always one page (no path compression): compression saves Python
objects, not behaviour, except that SGLang evicts a whole leaf node at a time where this evicts a leaf page.

The tree knows no reference counts or free list: those are the `BlockPool`'s, which holds this tree as its
``cache`` (the same interface as `PrefixCache`: ``block_hash``, `evict`, `check`, ``len``, ``spill``,
``vacancy``), so the pool's free queue orders eviction, and an evicted page's hash goes to a host tier when one
is attached (``--cpu-offload-gib``: SGLang's HiCache keeps evicted radix nodes in host memory the same way).
`RadixAllocator` keeps that queue's order such that its cached head is always an unreferenced leaf
(``radix.py``), and `evict` asserts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter as getter

ROOT = 0
"""The root's node id: the null page, which is never handed out, so no cached page has it."""


class RadixTree:
    """Nodes are page ids: ``block_hash[p]`` (None when ``p`` is not in the tree), ``parent[p]`` and
    ``children[p]``: None for a leaf, the page id of a lone child (keyed by its own ``block_hash``), or a dict
    hash -> page once a node has two children or more. Why not a dict always: nearly every cached page is
    a link of one request's chain, and a dict per page is what inserting and evicting chains of hundreds of
    pages cost most. The root's children are always a dict."""

    __slots__ = ("block_hash", "parent", "children", "spill", "vacancy", "version")

    def __init__(self, num_blocks: int) -> None:
        self.block_hash: list[int | None] = [None] * num_blocks
        self.parent: list[int] = [-1] * num_blocks
        self.children: list[int | dict[int, int] | None] = [None] * num_blocks
        self.children[ROOT] = {}
        self.spill = None  # called with the hashes of the evicted pages (a host tier's `offload_many`), if set
        # A list and the entry it has for a page not cached (`BlockPool.drop`): the parent links, -1 exactly
        # when the hash is None (`check`), are page ids read warm where a freed request's hashes are cold.
        self.vacancy = (self.parent, -1)
        self.version = 0  # counts the calls that may change the tree: a match stays valid while it stands still

    def child(self, node: int, block_hash: int) -> int | None:
        """The page under ``node`` keyed ``block_hash``, or None."""
        kids = self.children[node]
        if kids is None:
            return None
        if kids.__class__ is dict:
            return kids.get(block_hash)
        return kids if self.block_hash[kids] == block_hash else None

    def kids(self, node: int) -> list[int]:
        """The pages directly under ``node``."""
        kids = self.children[node]
        return [] if kids is None else list(kids.values()) if kids.__class__ is dict else [kids]

    def match(self, block_hashes: Sequence[int], limit: int) -> list[int]:
        """Pages of the longest cached path from the root along ``block_hashes``, at most ``limit`` pages."""
        hits: list[int] = []
        children, hashed, node = self.children, self.block_hash, ROOT
        for i in range(min(limit, len(block_hashes))):
            kids = children[node]
            if kids is None:
                break
            if kids.__class__ is dict:
                node = kids.get(block_hashes[i])
                if node is None:
                    break
            elif hashed[kids] == block_hashes[i]:
                node = kids
            else:
                break
            hits.append(node)
        return hits

    def insert(self, page: int, parent: int, block_hash: int) -> None:
        """Hang ``page`` under ``parent`` (a node, or `ROOT`) as the child keyed ``block_hash``."""
        assert self.block_hash[page] is None, f"page {page} is already in the tree"
        if not self.insert_chain(parent, (page,), (block_hash,)):
            raise AssertionError(f"page {parent} already has a child keyed {block_hash}")

    def insert_chain(self, parent: int, pages: Sequence[int], block_hashes: Sequence[int]) -> int:
        """Hang ``pages`` (none in the tree) as a chain under ``parent``: the first keyed ``block_hashes[0]``
        under ``parent``, each next one under the one before. Returns how many were hung: all, or none when
        ``parent`` has a child keyed ``block_hashes[0]`` already. One call per run of pages a sequence fills:
        a long prompt fills hundreds at once."""
        if not pages:
            return 0
        self.version += 1
        children, hashed = self.children, self.block_hash
        first, h = pages[0], block_hashes[0]
        kids = children[parent]
        if kids is None:
            children[parent] = first
        elif kids.__class__ is dict:
            if h in kids:
                return 0
            kids[h] = first
        else:
            lone = hashed[kids]
            if lone == h:
                return 0
            children[parent] = {lone: kids, h: first}
        parents = self.parent
        if len(pages) == 1:
            hashed[first] = h
            parents[first] = parent
            return 1
        ups = [parent]
        ups += pages[:-1]
        downs = list(pages[1:])
        downs.append(None)
        for page, h, up, down in zip(pages, block_hashes, ups, downs, strict=True):
            hashed[page] = h
            parents[page] = up
            children[page] = down
        return len(pages)

    def evict(self, page: int) -> None:
        """Take a leaf out of the tree because its page is being reused (a no-op for a page not in it)."""
        self.evict_many((page,))

    def evict_many(self, pages: Sequence[int]) -> int:
        """Take each of ``pages`` (just popped for reuse, in order; each a leaf by then) out of the tree, and
        spill their hashes in that order in one call; returns how many were cached. One pass per allocation:
        a long prompt evicts hundreds of pages, which the free queue's order (radix.py) gives tail first, a
        chain at a time: so the pages are cut into runs, each page in a run the lone parent of the page before
        it, and a run costs a check of its first page and an unlink of its last from its parent."""
        hashed, children = self.block_hash, self.children
        self.version += 1
        if len(pages) < 2:  # a decoding sequence crossing into a new page: a leaf or nothing
            if not pages or (block_hash := hashed[pages[0]]) is None:
                return 0
            self._evict_run(pages, (block_hash,), 0, 1)
            hashed[pages[0]] = None
            self.parent[pages[0]] = -1  # its children are None: a leaf (`_evict_run` checks)
            if self.spill is not None:
                self.spill([block_hash])
            return 1
        pages = tuple(pages)
        gather = getter(*pages)  # C-level gathers: a list comprehension costs three times as much a page
        hashes, kids = list(gather(hashed)), gather(children)
        empty = hashes.count(None)
        if empty and hashes[:empty].count(None) == empty:  # the free queue's empty head, as a rule: cut off
            if empty == len(pages):
                return 0
            pages, hashes, kids = pages[empty:], hashes[empty:], kids[empty:]
        if hashes[0] is not None and kids[1:] == pages[:-1]:  # one chain, tail first (all cached)
            self._evict_run(pages, hashes, 0, len(pages))
        else:
            pages, hashes = self._evict_runs(list(pages), hashes, list(kids))
        parents = self.parent
        for page in pages:
            hashed[page] = None
            parents[page] = -1
            children[page] = None
        if hashes and self.spill is not None:
            self.spill(hashes)
        return len(hashes)

    def _evict_runs(self, pages: list[int], hashes: list[int | None],
                    kids: list) -> tuple[list[int], list[int]]:
        """`evict_many`'s general case: drop the pages not in the tree, cut the rest into runs, unlink each;
        returns the pages and hashes evicted."""
        uncached = hashes.count(None)
        if uncached:
            if uncached == len(hashes):
                return [], []
            kids = [k for k, h in zip(kids, hashes, strict=True) if h is not None]
            pages = [p for p, h in zip(pages, hashes, strict=True) if h is not None]
            hashes = [h for h in hashes if h is not None]
        kids.append(None)  # a sentinel: every run ends at a leaf at the latest
        start, n = 0, len(pages)
        while start < n:  # a run: pages[start:stop], each after the first the lone parent of the one before
            stop = kids.index(None, start + 1)  # usually where the next chain's tail leaf is
            if kids[start + 1:stop] != pages[start:stop - 1]:
                stop = start + 1
                while kids[stop] == pages[stop - 1]:
                    stop += 1
            self._evict_run(pages, hashes, start, stop)
            start = stop
        return pages, hashes

    def _evict_run(self, pages: Sequence[int], hashes: Sequence[int], start: int, stop: int) -> None:
        """Unlink the chain ``pages[start:stop]`` (each page the lone parent of the one before it) from the
        tree: its first page must be a leaf by now, its last is taken from its parent's children."""
        children = self.children
        if children[pages[start]] is not None:
            raise AssertionError(f"page {pages[start]} evicted while it has children (not a leaf)")
        top = pages[stop - 1]
        up = self.parent[top]
        kids = children[up]
        if kids.__class__ is dict:
            del kids[hashes[stop - 1]]
            if len(kids) == 1 and up != ROOT:
                children[up] = next(iter(kids.values()))
        else:
            assert kids == top, f"page {top}: its parent {up} does not list it"
            children[up] = None

    def __len__(self) -> int:
        return sum(h is not None for h in self.block_hash)

    def check(self) -> None:
        """Parent and child links agree, every node hangs from the root (a walk down from it reaches every
        node once), a leaf carries None, a node with one child that child, only a fuller one a dict."""
        for page, h in enumerate(self.block_hash):
            if page == ROOT:
                assert h is None and self.parent[ROOT] == -1, "radix tree: the root was cached"
                assert self.children[ROOT].__class__ is dict, "radix tree: the root's children are not a dict"
                continue
            kids = self.children[page]
            if h is None:
                assert self.parent[page] == -1 and kids is None, f"page {page}: stale links"
                continue
            parent = self.parent[page]
            assert parent == ROOT or self.block_hash[parent] is not None, f"page {page}: parent not in the tree"
            assert self.child(parent, h) == page, f"page {page}: its parent does not list it under {h}"
            assert kids.__class__ is not dict or len(kids) > 1, f"page {page}: a dict of {len(kids)} children"
        for page in range(len(self.children)):
            for kid in self.kids(page):
                assert self.block_hash[kid] is not None and self.parent[kid] == page, \
                    f"page {page}: stale child {kid}"
            kids = self.children[page]
            if kids.__class__ is dict:
                for h, kid in kids.items():
                    assert self.block_hash[kid] == h, f"page {page}: child {kid} listed under {h}"
        reached, stack = 0, [ROOT]
        while stack:
            kids = self.kids(stack.pop())
            reached += len(kids)
            stack.extend(kids)
        assert reached == len(self), f"radix tree: {reached} nodes reachable from the root, {len(self)} cached"
