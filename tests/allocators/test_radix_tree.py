"""The radix tree against a plain one written here (a dict of children on every node, pages inserted and
evicted one at a time): random chains hung under random nodes and random batches of leaves evicted, in the
order a free queue gives them (chains tail first, with empty pages and several chains in one batch), must
leave the same nodes, links, lookups and spilled hashes. The tree keeps a lone child without a dict and
evicts a batch a chain at a time; this guards that both are exact."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocators.radix_tree import ROOT, RadixTree
from tests.soak import examples


class ReferenceTree:
    """Page -> hash, page -> parent, page -> {hash: child}, one page at a time."""

    def __init__(self) -> None:
        self.hash: dict[int, int] = {}
        self.parent: dict[int, int] = {}
        self.kids: dict[int, dict[int, int]] = {ROOT: {}}

    def insert_chain(self, parent: int, pages: list[int], hashes: list[int]) -> int:
        for i, (page, h) in enumerate(zip(pages, hashes, strict=True)):
            if h in self.kids[parent]:
                return i
            self.kids[parent][h] = page
            self.hash[page], self.parent[page], self.kids[page] = h, parent, {}
            parent = page
        return len(pages)

    def evict_many(self, pages: list[int]) -> list[int]:
        spilled = []
        for page in pages:
            if page in self.hash:
                assert not self.kids[page]
                h = self.hash.pop(page)
                del self.kids[self.parent.pop(page)][h], self.kids[page]
                spilled.append(h)
        return spilled

    def match(self, hashes: list[int]) -> list[int]:
        hits, node = [], ROOT
        for h in hashes:
            node = self.kids[node].get(h)
            if node is None:
                break
            hits.append(node)
        return hits

    def leaves(self) -> list[int]:
        return sorted(p for p in self.hash if not self.kids[p])


def assert_same(tree: RadixTree, ref: ReferenceTree) -> None:
    tree.check()
    assert {p: h for p, h in enumerate(tree.block_hash) if h is not None} == ref.hash
    assert len(tree) == len(ref.hash)
    for page in [ROOT, *ref.hash]:
        assert page == ROOT or tree.parent[page] == ref.parent[page]
        assert sorted(tree.kids(page)) == sorted(ref.kids[page].values())
        for h, kid in ref.kids[page].items():
            assert tree.child(page, h) == kid
        assert tree.child(page, -1) is None


def leaf_order_batch(ref: ReferenceTree, rng: random.Random, size: int, num_pages: int) -> list[int]:
    """Pages a free queue could hand out in one go: each cached one a leaf once those before it are gone,
    mostly chains tail first, with some empty pages among them."""
    kids = {p: dict(k) for p, k in ref.kids.items()}
    batch: list[int] = []
    while len(batch) < size:
        leaves = [p for p in ref.hash if p not in batch and not kids[p]]
        if not leaves or rng.random() < 0.1:
            empty = [p for p in range(1, num_pages) if p not in ref.hash and p not in batch]
            if empty:
                batch.append(rng.choice(empty))
            if not leaves:
                break
            continue
        page = rng.choice(sorted(leaves))
        while True:  # climb the chain: the parent goes next once it is a leaf
            batch.append(page)
            up = ref.parent[page]
            del kids[up][ref.hash[page]]
            if up == ROOT or kids[up] or len(batch) >= size or rng.random() < 0.05:
                break
            page = up
    return batch


@settings(max_examples=examples(200), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 40))
def test_the_radix_tree_matches_a_plain_one(seed, steps):
    rng = random.Random(seed)
    num_pages = 40
    tree, ref = RadixTree(num_pages), ReferenceTree()
    spilled: list[list[int]] = []
    tree.spill = spilled.append
    for _ in range(steps):
        if rng.random() < 0.6:  # hang a chain of free pages under a random node, keys from a small set
            free = [p for p in range(1, num_pages) if p not in ref.hash]
            pages = rng.sample(free, min(len(free), rng.randint(1, 8)))
            hashes = [rng.randint(0, 5) for _ in pages]
            parent = rng.choice([ROOT, *sorted(ref.hash)])
            assert tree.insert_chain(parent, pages, hashes) == ref.insert_chain(parent, pages, hashes) in (
                0, len(pages))  # only the first page can find its key taken
        else:
            batch = leaf_order_batch(ref, rng, rng.randint(1, 12), num_pages)
            expected = ref.evict_many(batch)
            assert tree.evict_many(batch) == len(expected)
            assert spilled.pop() == expected if expected else not spilled
        assert_same(tree, ref)
        probe = [rng.randint(0, 5) for _ in range(6)]
        assert tree.match(probe, 6) == ref.match(probe)
        path = ref.match(probe)
        if path:  # a cached path is matched whole, and cut at the limit
            hashes = [ref.hash[p] for p in path]
            assert tree.match(hashes, len(path)) == path and tree.match(hashes, 1) == path[:1]


def test_a_chain_is_matched_and_evicted_tail_first():
    tree = RadixTree(10)
    assert tree.insert_chain(ROOT, [3, 5, 7], [30, 50, 70]) == 3
    assert tree.insert_chain(5, [2], [20]) == 1  # a branch: 5 now has two children
    assert tree.insert_chain(ROOT, [4], [30]) == 0  # key 30 is taken under the root
    assert tree.match([30, 50, 70], 3) == [3, 5, 7] and tree.match([30, 50, 20, 1], 4) == [3, 5, 2]
    spilled = []
    tree.spill = spilled.append
    assert tree.evict_many([7, 8, 2, 5, 3]) == 4  # 8 is not in the tree; 5 is a leaf once 7 and 2 are gone
    assert spilled == [[70, 20, 50, 30]] and len(tree) == 0 and tree.kids(ROOT) == []
    tree.check()


def test_evicting_a_page_with_children_is_an_error():
    tree = RadixTree(10)
    tree.insert_chain(ROOT, [3, 5, 7], [30, 50, 70])
    with pytest.raises(AssertionError, match="page 5 evicted while it has children"):
        tree.evict_many([5, 7])
    tree = RadixTree(10)
    tree.insert_chain(ROOT, [3, 5, 7], [30, 50, 70])
    tree.insert_chain(5, [2], [20])
    with pytest.raises(AssertionError, match="page 5 evicted while it has children"):
        tree.evict_many([7, 5])
