"""The scheduler driven directly: vLLM's own scenarios (docs/paper-facts.md section 5, scenarios 7 and 8), and a
lookup counting as use under `radix` (SGLang's) but not `paged` (vLLM's)."""

from allocators.paged import PagedAllocator
from sim.kernel.memory import KVMemory
from sim.kernel.scheduler import Scheduler
from sim.kernel.sequence_group import RUNNING, WAITING, SequenceGroup


class Sink:
    def __init__(self):
        self.finished, self.rejected = [], []

    def finish(self, group, t):
        self.finished.append((group.request_id, t))

    def reject(self, group, reason, t):
        self.rejected.append((group.request_id, reason))


def make(alloc, **kwargs):
    sink = Sink()
    return Scheduler(KVMemory(alloc), sink, **kwargs), sink


def test_preemption_takes_the_last_admitted():
    # 10 usable blocks of 16 (block 0 is null). Two requests of 80 prompt tokens fill 5 blocks each; the first
    # decode step computes token 81, which needs a 6th block: the second (admitted last) is preempted.
    alloc = PagedAllocator(11 * 16, block_size=16, max_model_len=2048)
    sched, sink = make(alloc, max_num_batched_tokens=4096)
    a = SequenceGroup(0, 0, 0.0, 80, 10)
    b = SequenceGroup(1, 1, 0.0, 80, 10)
    sched.add(a, 0.0)
    sched.add(b, 0.0)
    plan = sched.plan_step(0.0)
    assert [g for g, _ in plan.chunks] == [a, b] and plan.preempted == 0
    assert alloc.num_free_blocks == 0
    sched.complete(1, 1.0)
    plan = sched.plan_step(1.0)
    assert plan.preempted == 1
    assert b.state == WAITING and sched.waiting[0] is b and b.preemptions == 1
    assert a.state == RUNNING and len(alloc.block_table(a.seq_ids[0])) == 6
    assert plan.decode_seqs == 1
    alloc.check_invariants()


def test_chunked_prefill_admits_two_unchunked_one():
    # max_num_batched_tokens 1024, max_num_seqs 3; prompts 800, 800, 10, 10.
    for chunked, expected in ((True, [800, 224]), (False, [800])):
        alloc = PagedAllocator(100_000, block_size=16, max_model_len=2048)
        sched, _ = make(alloc, max_num_seqs=3, max_num_batched_tokens=1024, chunked_prefill=chunked)
        for i, prompt in enumerate((800, 800, 10, 10)):
            sched.add(SequenceGroup(i, i, 0.0, prompt, 5), 0.0)
        plan = sched.plan_step(0.0)
        assert [c for _, c in plan.chunks] == expected, chunked
        assert len(sched.running) == len(expected)
        assert plan.prefill_tokens == sum(expected)


def test_no_admission_in_a_step_with_preemption():
    alloc = PagedAllocator(11 * 16, block_size=16, max_model_len=2048)
    sched, _ = make(alloc, max_num_batched_tokens=4096)
    a, b, c = (SequenceGroup(i, i, 0.0, 80, 10) for i in range(3))
    for g in (a, b):
        sched.add(g, 0.0)
    sched.plan_step(0.0)
    sched.complete(1, 1.0)
    sched.add(c, 1.0)
    plan = sched.plan_step(1.0)
    assert plan.preempted == 1
    assert list(sched.waiting) == [b, c]  # the victim goes back in front of the queue; nothing admitted
    assert plan.prefill_tokens == 0


def test_request_that_can_never_fit_is_rejected():
    alloc = PagedAllocator(11 * 16, block_size=16, max_model_len=2048)
    sched, sink = make(alloc, max_num_batched_tokens=4096)
    sched.add(SequenceGroup(0, 7, 0.0, 100, 200), 0.0)  # 300 tokens > 160 usable slots
    sched.add(SequenceGroup(1, 8, 0.0, 1000, 2000), 0.0)  # over max_model_len
    assert [r for r, _ in sink.rejected] == [7, 8]
    assert "max_model_len" in sink.rejected[1][1]
    assert sched.idle


def test_group_that_outgrows_the_pool_alone_is_rejected_not_retried():
    # 4 samples of 40 + 40 tokens fit one at a time but not together in 15 usable blocks of a non-sharing pool
    # (a fork copies the table: 20 blocks at the end), though a sharing one would hold them (14: the prompt's 2
    # full blocks once, 3 each after them), so they are admitted and refused only once they outgrow it
    alloc = PagedAllocator(16 * 16, block_size=16, max_model_len=2048)
    sched, sink = make(alloc, max_num_batched_tokens=4096)
    sched.add(SequenceGroup(0, 0, 0.0, 40, 40, n=4), 0.0)
    for step in range(100):
        if sched.idle:
            break
        sched.plan_step(float(step))
        sched.complete(1, float(step + 1))
    assert sched.idle
    assert sink.rejected and "whole pool" in sink.rejected[0][1]
    alloc.check_invariants()


def test_decoders_the_budget_does_not_reach_skip_the_step():
    """Guards `Scheduler.defer`: as in vLLM's running loop, a decoding group behind prefill chunks that used up
    the token budget computes nothing that step, and its completion moves a step later each time. (With one
    sequence per request this cannot happen when max_num_batched_tokens >= max_num_seqs; an n=8 group can.)"""
    for lazy in (True, False):
        alloc = PagedAllocator(100_000, block_size=16, max_model_len=2048)
        sched, sink = make(alloc, max_num_seqs=16, max_num_batched_tokens=16, long_prefill_token_threshold=4,
                           lazy=lazy)
        groups = [SequenceGroup(0, 0, 0.0, 40, 3), SequenceGroup(1, 1, 0.0, 40, 3), SequenceGroup(2, 2, 0.0, 1, 20),
                  SequenceGroup(3, 3, 0.0, 1, 5, n=8)]
        for g in groups:
            sched.add(g, 0.0)
        step = 0
        while not sched.idle:
            plan = sched.plan_step(float(step))
            if step == 1:  # 4 + 4 prefill tokens and one decode leave 7 of 16: the n=8 group is not reached
                assert [c for _, c in plan.chunks] == [4, 4] and plan.decode_seqs == 1
            sched.complete(1, float(step + 1))
            step += 1
        alloc.check_invariants()
        finished = dict(sink.finished)
        # the prefills take steps 0-9 (4 tokens a step); the group's first token comes at step 0, its other four
        # at steps 10-13 once nothing is ahead of it; without the budget it would have finished after step 4
        assert finished[3] == 14.0 and finished[0] == finished[1] == 12.0, (lazy, finished)


def test_a_request_tried_and_refused_keeps_its_cached_prefix_in_radix_only():
    """SGLang looks a waiting request up whenever it tries to admit it, and its radix cache counts the lookup
    as use; vLLM's does not. A's next turn D finds A's three pages cached and is tried, but waits (C took all
    but 10 tokens of the step's budget, D needs 17); C's next token needs a page and one cached page must go:
    `radix` evicts B's leaf (used before D's lookup), so D still finds 48 tokens; `paged` evicts A's leaf
    (released before B's), and D finds 32."""
    from allocators import make_allocator

    for name, found in (("radix", 48), ("paged", 32)):
        alloc = make_allocator(name, 11 * 16, block_size=16, max_model_len=2048, prefix_caching=True)
        for seq, (prompt, hashes) in enumerate(((49, [10, 11, 12]), (33, [20, 21])), 1000):  # A, then B, ended
            alloc.admit(seq, prompt, final_tokens=prompt, block_hashes=hashes)
            alloc.free(seq)
        sched, _ = make(alloc, max_num_batched_tokens=90, chunked_prefill=False)
        c = SequenceGroup(0, 0, 0.0, 80, 10)
        d = SequenceGroup(1, 1, 0.0, 65, 10, hashes=(10, 11, 12, 13))
        sched.add(c, 0.0)
        sched.add(d, 0.0)
        sched.plan_step(0.0)
        assert c.state == RUNNING and d.state == WAITING, name
        sched.complete(1, 1.0)
        sched.plan_step(1.0)  # C's 81st token takes a page: a cached one is evicted
        assert alloc.num_cached_tokens([10, 11, 12, 13], 65) == found, name
        alloc.check_invariants()
