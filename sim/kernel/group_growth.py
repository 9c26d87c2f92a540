"""A sequence group's decoders grow whole or not at all, in one step.

A group of several sequences (``n`` samples forked at the first token, or beams) grows every sequence by its
step's token. Grown one at a time, a group whose later sequence finds no room preempts itself after its earlier
ones copied a shared tail (copy-on-write) or took blocks: the step pays copies for a group it then preempts, and
a swap moves the blocks they took. vLLM v0 checks the group first, in ``Scheduler._schedule_running`` (vllm
0.4.1 ``vllm/core/scheduler.py``; 0.3.3's ``_schedule`` alike)::

    while not self._can_append_slots(seq_group):
        ... preempt the lowest-priority group (the group itself when none is left), then break
    else:
        self._append_slots(seq_group, blocks_to_copy)

so a group it preempts has appended, and copied, nothing. ``BlockSpaceManagerV1.can_append_slots`` asks for
as many free blocks as the group has running sequences (each step appends one token to each, which takes at
most one block, a new one or a copy of a shared tail). kvsim asks the allocator for the blocks the group's
growth takes exactly (`Allocator.growth_fits`), as it does for a single sequence (vLLM v1's
``allocate_slots``, which kvsim's scheduler models, allocates exactly what a request needs); vLLM v0's
heuristic also refuses a group that needs fewer blocks than it has sequences, which kvsim does not model.

Every place that grows a group's decoders goes through here: the scheduler's running loop and its
decoders-only loop (`Scheduler.sync_group`, preempting until the group fits: `Preemption.until_grows`), the
beam step, and the decode fast-forward, which ends its run before a step at which a group does not fit whole
(the scheduler then plans that step and preempts, as step by step).
"""

from __future__ import annotations

from collections.abc import Mapping

from sim.kernel.sequence_group import SequenceGroup


def by_group(due: list[int], owner: Mapping[int, SequenceGroup]) -> list[tuple[SequenceGroup, list[int]]]:
    """The due decoders ``due`` (in the order they are synced) gathered by group, each group at the place of
    its first: a group's decoders are then grown together. ``owner``: sequence id -> group."""
    groups: dict[int, tuple[SequenceGroup, list[int]]] = {}
    for seq_id in due:
        group = owner[seq_id]
        entry = groups.get(id(group))
        if entry is None:
            groups[id(group)] = (group, [seq_id])
        else:
            entry[1].append(seq_id)
    return list(groups.values())


def due_together(group: SequenceGroup, deadline: Mapping[int, int], due: int) -> list[int] | None:
    """The decoders of ``group`` that fall due at step ``due`` (``deadline``: sequence id -> its sync step), in
    their order, where there are several (None where only one: its growth alone is all or nothing)."""
    if group.num_seqs == 1:
        return None
    members = [seq_id for seq_id in group.seq_ids if deadline.get(seq_id) == due]
    return members if len(members) > 1 else None
