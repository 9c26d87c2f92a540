"""The completion heap: groups come out by the step of their last token, and those of one step in their order in
the running list (as vLLM frees the requests a step finishes), else by index."""

from sim.kernel.completions import Completions
from sim.kernel.sequence_group import RUNNING, SequenceGroup


def running(index: int, last_step: int) -> SequenceGroup:
    group = SequenceGroup(index, index, 0.0, 10, last_step + 1)
    group.state, group.base = RUNNING, 0  # decoding since step 0: its last token comes at step output - 1
    return group


def test_groups_of_one_step_come_in_running_order_and_steps_in_order():
    groups = {g.index: g for g in (running(3, 5), running(7, 5), running(9, 4), running(1, 8))}
    for ranked in (False, True):
        done = Completions()
        for g in groups.values():
            done.push(g)
        order_of_running = [groups[7], groups[9], groups[3], groups[1]] if ranked else None
        order = [g.index for g in done.pop_before(6, groups, order_of_running)]
        assert order == ([9, 7, 3] if ranked else [9, 3, 7])
        assert done.next_due(groups) == 8


def test_a_stale_entry_is_skipped():
    groups = {3: running(3, 5), 7: running(7, 5)}
    done = Completions()
    for g in groups.values():
        done.push(g)
    groups[7].epoch += 1  # stopped and restarted: its entry is stale
    assert [g.index for g in done.pop_before(6, groups, [groups[7], groups[3]])] == [3]
