"""Beam search as a memory process: every step each beam picks a parent, children fork, losers are freed.

Which beams survive depends on token probabilities kvsim does not have, so the choice is a documented, seeded
stochastic model: at each decode step beam ``i`` keeps its own lineage with probability ``beam_keep_prob``
(``SimConfig.beam_keep_prob``, default 0.8), and otherwise continues a uniformly random beam among the ``k``
(possibly itself). A beam that continues another is forked from it (sharing its blocks under copy-on-write)
and its old sequence is freed; every beam then appends its token, which copies a shared last block on write.
This reproduces the block sharing of the paper's Fig. 9: long shared prefixes, short divergent tails.

Because the block tables change every step, beam groups are stepped token by token: while one runs, the
engine takes no multi-step decode fast-forward.
"""

from __future__ import annotations

import numpy as np

from sim.kernel.memory import KVMemory
from sim.kernel.preemption import Preemption
from sim.kernel.sequence_group import SequenceGroup
from sim.kernel.window_context import attended


def choose_parents(rng: np.random.Generator, k: int, keep_prob: float) -> np.ndarray:
    """Parent index of each of ``k`` beams for the next token (``i`` itself means no change)."""
    keep = rng.random(k) < keep_prob
    other = rng.integers(0, k, size=k)
    return np.where(keep, np.arange(k), other)


class BeamSearch:
    """The beam groups' bookkeeping, owned by the scheduler: the seeded parent choice, how many beam groups
    run (the per-step beam work is skipped while there are none), and their per-step memory work."""

    __slots__ = ("rng", "keep_prob", "groups")

    def __init__(self, rng: np.random.Generator, keep_prob: float) -> None:
        self.rng = rng
        self.keep_prob = keep_prob
        self.groups = 0  # running beam groups

    def decoders(self, running: list[SequenceGroup], joiners: list[SequenceGroup], step: int) -> tuple[int, int]:
        """(sequences, context tokens) of the decoding beam groups that joined before ``step``: they decode
        outside the `DecodeSet`, so the step's token budget and plan count them here."""
        seqs = context = 0
        if not self.groups:
            return seqs, context
        for g in running:
            if g.beam and g.decoding and g not in joiners:
                seqs += g.num_seqs
                context += g.num_seqs * (g.prompt + step - g.base)
        return seqs, context

    def window_context(self, running: list[SequenceGroup], joiners: list[SequenceGroup], step: int,
                       window: int, chunked: bool = False) -> int:
        """`decoders`' context with each sequence's clipped to a sliding window of ``window`` tokens (or to its
        own chunk of ``window`` tokens: ``chunked``, `sim.kernel.window_context.attended`)."""
        if not self.groups:
            return 0
        return sum(g.num_seqs * attended(g.prompt + step - g.base, window, chunked) for g in running
                   if g.beam and g.decoding and g not in joiners)

    def step(self, group: SequenceGroup, memory: KVMemory, plan, groups: Preemption) -> None:
        """Re-pick parents, fork and free, then give every beam a slot for this step's token. On a failed
        allocator call ``groups`` (the scheduler's `GroupMechanics`) preempts the latest admitted group; if that
        is ``group``, stop. The beams' slots are checked whole before any beam grows (`Preemption.until_grows`,
        `sim.kernel.group_growth`), so a group preempted for want of them copies no shared tail first.

        A beam's old sequence is freed as soon as no other beam still has to fork from it, and forks that let an
        old sequence go come first, so the step needs no more memory than its ``k`` beams (plus one sequence for
        each cycle of beams continuing each other): forking every child before freeing any made a group that
        fits exactly preempt itself at each step it re-picked a beam.
        """
        parents = choose_parents(self.rng, group.num_seqs, self.keep_prob).tolist()
        old = list(group.seq_ids)
        chosen = list(old)
        losers = [j for j, parent in enumerate(parents) if parent != j]
        pending = [0] * len(parents)  # forks still to be made from each old beam
        for j in losers:
            pending[parents[j]] += 1
        freed: set[int] = set()

        def free_done() -> None:
            for j in losers:
                if j not in freed and not pending[j]:
                    freed.add(j)
                    memory.free(old[j])
                    group.seq_ids.remove(old[j])

        free_done()
        to_fork = list(losers)
        while to_fork:
            # a fork that lets its parent's old sequence go first (it then costs no memory), else in beam order
            j = next((j for j in to_fork if parents[parents[j]] != parents[j] and pending[parents[j]] == 1),
                     to_fork[0])
            to_fork.remove(j)
            made = groups.until_fits(group, lambda p=old[parents[j]]: memory.fork(group, p))
            if made is None:
                return
            plan.add_copies(made)
            chosen[j] = group.seq_ids[-1]
            pending[parents[j]] -= 1
            free_done()
        group.seq_ids = chosen
        if not groups.until_grows(group, [(seq_id, 1) for seq_id in chosen]):
            return
        for seq_id in chosen:
            made = groups.until_fits(group, lambda s=seq_id: memory.grow(s, 1))
            if made is None:
                return
            plan.add_copies(made)
