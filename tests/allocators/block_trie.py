"""The sharing of a group's block tables, up to renaming blocks: what a swap must give back as it was."""

from __future__ import annotations


def block_trie(tables, depth=0):
    """At each depth, how many tables end there and the tries of the groups of tables that hold the same block
    there."""
    ends, kids = 0, {}
    for table in tables:
        if len(table) == depth:
            ends += 1
        else:
            kids.setdefault(table[depth], []).append(table)
    return ends, sorted(block_trie(group, depth + 1) for group in kids.values())
