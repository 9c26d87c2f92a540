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
``cache`` (the same interface as `PrefixCache`: ``block_hash``, `evict`, `check`, ``len``, ``spill``), so the
pool's free queue orders eviction, and an evicted page's hash goes to a host tier when one is attached
(``--cpu-offload-gib``: SGLang's HiCache keeps evicted radix nodes in host memory the same way). `RadixAllocator` keeps that queue's order such that its cached head is always an
unreferenced leaf (``radix.py``), and `evict` asserts it.
"""

from __future__ import annotations

from collections.abc import Sequence

ROOT = 0
"""The root's node id: the null page, which is never handed out, so no cached page has it."""


class RadixTree:
    """Nodes are page ids: ``block_hash[p]`` (None when ``p`` is not in the tree), ``parent[p]`` and
    ``children[p]`` (hash -> page; None for a leaf, so a page costs no dict until it has a child)."""

    __slots__ = ("block_hash", "parent", "children", "spill")

    def __init__(self, num_blocks: int) -> None:
        self.block_hash: list[int | None] = [None] * num_blocks
        self.parent: list[int] = [-1] * num_blocks
        self.children: list[dict[int, int] | None] = [None] * num_blocks
        self.children[ROOT] = {}
        self.spill = None  # called with the hashes of the evicted pages (a host tier's `offload_many`), if set

    def child(self, node: int, block_hash: int) -> int | None:
        """The page under ``node`` keyed ``block_hash``, or None."""
        kids = self.children[node]
        return None if kids is None else kids.get(block_hash)

    def match(self, block_hashes: Sequence[int], limit: int) -> list[int]:
        """Pages of the longest cached path from the root along ``block_hashes``, at most ``limit`` pages."""
        hits: list[int] = []
        children, node = self.children, ROOT
        for i in range(min(limit, len(block_hashes))):
            kids = children[node]
            if kids is None:
                break
            node = kids.get(block_hashes[i])
            if node is None:
                break
            hits.append(node)
        return hits

    def insert(self, page: int, parent: int, block_hash: int) -> None:
        """Hang ``page`` under ``parent`` (a node, or `ROOT`) as the child keyed ``block_hash``."""
        assert self.block_hash[page] is None, f"page {page} is already in the tree"
        kids = self.children[parent]
        if kids is None:
            kids = self.children[parent] = {}
        assert block_hash not in kids, f"page {parent} already has a child keyed {block_hash}"
        kids[block_hash] = page
        self.block_hash[page] = block_hash
        self.parent[page] = parent

    def evict(self, page: int) -> None:
        """Take a leaf out of the tree because its page is being reused (a no-op for a page not in it)."""
        self.evict_many((page,))

    def evict_many(self, pages: Sequence[int]) -> int:
        """Take each of ``pages`` (just popped for reuse, in order; each a leaf by then) out of the tree, and
        spill their hashes in that order in one call; returns how many were cached. One pass per allocation:
        a long prompt evicts hundreds of pages."""
        hashed, parents, children = self.block_hash, self.parent, self.children
        evicted: list[int] = []
        for page in pages:
            h = hashed[page]
            if h is None:
                continue
            if children[page]:
                raise AssertionError(f"page {page} evicted while it has children (not a leaf)")
            parent = parents[page]
            kids = children[parent]
            del kids[h]
            if not kids and parent != ROOT:
                children[parent] = None
            hashed[page] = None
            parents[page] = -1
            children[page] = None
            evicted.append(h)
        if evicted and self.spill is not None:
            self.spill(evicted)
        return len(evicted)

    def __len__(self) -> int:
        return sum(h is not None for h in self.block_hash)

    def check(self) -> None:
        """Parent and child links agree, every node hangs from the root (a walk down from it reaches every
        node once), leaves carry no dict."""
        for page, h in enumerate(self.block_hash):
            if page == ROOT:
                assert h is None and self.parent[ROOT] == -1, "radix tree: the root was cached"
                continue
            if h is None:
                assert self.parent[page] == -1 and self.children[page] is None, f"page {page}: stale links"
                continue
            parent = self.parent[page]
            assert parent == ROOT or self.block_hash[parent] is not None, f"page {page}: parent not in the tree"
            assert self.child(parent, h) == page, f"page {page}: its parent does not list it under {h}"
        for page, kids in enumerate(self.children):
            if kids is None:
                continue
            assert page == ROOT or kids, f"page {page}: an empty child dict"
            for h, kid in kids.items():
                assert self.block_hash[kid] == h and self.parent[kid] == page, f"page {page}: stale child {kid}"
        reached, stack = 0, [ROOT]
        while stack:
            kids = self.children[stack.pop()]
            if kids:
                reached += len(kids)
                stack.extend(kids.values())
        assert reached == len(self), f"radix tree: {reached} nodes reachable from the root, {len(self)} cached"
