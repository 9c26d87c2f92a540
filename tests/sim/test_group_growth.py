"""A sequence group's decoders grow whole or not at all (`sim.kernel.group_growth`).

Before the fix kvsim grew a group's sequences one at a time, charging each copy-on-write copy of a shared tail as
it was made; when a later sequence found no room the group preempted itself, the earlier copies stayed charged
to the step and a swap moved the blocks they took. On 80 requests in 6,000 KV tokens with ``--preemption swap``
(`paged-cow`), 3 groups sampled 4 times made 4 copies that the same step then swapped out (swap blocks 10,130;
10,024 now), and 2 beam groups (width 4) made 3 (5,898; 5,854 now). vLLM v0 checks ``can_append_slots`` for the
whole group before ``_append_slots`` copies anything.
"""

from types import SimpleNamespace

import numpy as np
import pytest

from sim.kernel import preemption, step_plan
from sim.kernel.config import SimConfig
from sim.kernel.decode_set import DecodeSet
from sim.kernel.runner import run_simulation
from sim.kernel.scheduler import Scheduler
from sim.kernel.sequence_group import SWAPPED, SequenceGroup
from tests.sim.summaries import assert_fast_forward_equals_stepping
from workloads import Workload


def groups_workload(kind: str, count: int = 80, seed: int = 1) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(arrival_time_s=np.cumsum(rng.exponential(1 / 8, count)), prompt_tokens=rng.integers(20, 400, count),
                    output_tokens=rng.integers(100, 400, count), name="groups", **{kind: np.full(count, 4)})


def swap_config(**options) -> SimConfig:
    return SimConfig(**{"allocator": "paged-cow", "kv_tokens": 6000, "preemption": "swap", "swap_space_gib": 4.0,
                        **options})


def copies_of_preempted_groups(monkeypatch, config: SimConfig, workload: Workload) -> tuple[int, int, int]:
    """Run ``config`` and count the copies a step charged whose destination block a group preempted in the same
    step held (and how many of those a swap then moved), and the run's preemptions."""
    seen = {"plan": None, "dsts": set(), "charged": 0, "swapped": 0}
    add_copies, preempt = step_plan.StepPlan.add_copies, preemption.Preemption.preempt

    def spy_add(plan, copies):
        if seen["plan"] is not plan:
            seen["plan"], seen["dsts"] = plan, set()
        seen["dsts"].update(c.dst for c in copies if hasattr(c, "dst"))
        return add_copies(plan, copies)

    def spy_preempt(mechanics, victim):
        s = mechanics.s
        held = {b for seq in victim.seq_ids for b in s.memory._alloc.block_table(seq)}
        charged = len(held & seen["dsts"]) if seen["plan"] is s.plan else 0
        preempt(mechanics, victim)
        seen["charged"] += charged
        seen["swapped"] += charged if victim.state == SWAPPED else 0

    monkeypatch.setattr(step_plan.StepPlan, "add_copies", spy_add)
    monkeypatch.setattr(preemption.Preemption, "preempt", spy_preempt)
    result = run_simulation(config, workload)
    return seen["charged"], seen["swapped"], result.summary["preemptions"]


@pytest.mark.parametrize("kind", ["n", "beam_width"])
@pytest.mark.parametrize("step_by_step", [False, True])
def test_a_group_preempted_in_a_step_charged_no_copies_in_it(monkeypatch, kind, step_by_step):
    charged, swapped, preemptions = copies_of_preempted_groups(
        monkeypatch, swap_config(step_by_step=step_by_step), groups_workload(kind))
    assert preemptions > 100  # memory is short: groups are preempted (and swapped) all along
    assert charged == 0
    assert swapped == 0  # so no swap moves a tail block copied for it


@pytest.mark.parametrize("options", [dict(allocator="paged-cow"),
                                     dict(allocator="paged-cow", preemption="recompute"),
                                     dict(allocator="paged", parallel_sampling="fork"),
                                     dict(allocator="radix", preemption="recompute"),
                                     dict(allocator="paged", parallel_sampling="fork", cpu_offload_gib=0.05,
                                          offload_write_policy="write_through"),
                                     dict(allocator="vattention", kv_tokens=6000, page_size_kib=64)])
def test_fast_forward_equals_stepping_with_groups_grown_whole(options):
    # the fast-forward ends its run before a step at which a group does not fit whole, and the scheduler's
    # decoders-only step grows a group's due decoders together, as step by step
    assert_fast_forward_equals_stepping(swap_config(**options), groups_workload("n", count=60, seed=4))


def test_a_group_a_stopped_decode_run_synced_part_of_grows_first():
    # a run synced group a's decoder 10 for step 5 and stopped at 12 (a store refused, say): step by step a's
    # decoders grow before b's 11, so the step the scheduler plans grows a's others first too
    a, b = SequenceGroup(0, 0, 0.0, 20, 20, n=4), SequenceGroup(1, 1, 0.0, 20, 20)
    a.seq_ids, b.seq_ids = [10, 12, 13, 14], [11]
    decode = DecodeSet()
    for seq_id in (11, 12, 13, 14):
        decode.join(seq_id, 20, 0, 5)
    decode.join(10, 21, 15, 6)  # synced for step 5's token
    owner = {10: a, 11: b, 12: a, 13: a, 14: a}
    sched = SimpleNamespace(memory=SimpleNamespace(owner=owner), decode=decode, step=5)
    assert Scheduler.due_groups(sched, [11, 12, 13, 14]) == [(a, [12, 13, 14]), (b, [11])]
    decode.leave(10)
    decode.join(10, 20, 0, 5)  # not synced: the due decoders' order
    assert Scheduler.due_groups(sched, [10, 11, 12, 13, 14]) == [(a, [10, 12, 13, 14]), (b, [11])]
