"""Sequence-group mechanics under the scheduler: placing a group in memory, starting and stopping it.

A group is placed, preempted and freed whole. Placement admits its first sequence with the prompt (plus, for
a single sequence being recomputed, the tokens it had generated); a group that had already forked is
re-placed as its ``n`` sequences (fork, then grow each by its generated tokens). A group that forks at its
first token is placed only if the allocator says all ``n`` sequences would fit (`Allocator.group_fits`):
otherwise it would be prefilled, fail to fork and preempt itself, step after step. When an allocator call
finds no room, `until_fits` preempts the latest admitted group, as vLLM does, until the call succeeds or the
group itself was the victim. Preemption either recomputes (free, requeue at the front, prefill prompt and
generated tokens again) or swaps (free, park the slots in a CPU swap space, copy them back before resuming);
a full swap space falls back to recompute. A group preempted while it was the only one running can never
fit and is rejected, so nothing loops forever.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

import numpy as np

from sim.kernel.beam import BeamSearch
from sim.kernel.decode_set import DecodeSet
from sim.kernel.memory import KVMemory
from sim.kernel.sequence_group import REJECTED, RUNNING, SWAPPED, WAITING, SequenceGroup


class GroupMechanics:
    """State shared by the scheduler's steps: queues, decode set, completion heap, counters."""

    def __init__(self, memory: KVMemory, sink, *, continuous: bool = True, max_num_seqs: int = 256,
                 max_num_batched_tokens: int = 2048, chunked_prefill: bool = True, preemption: str = "recompute",
                 swap_slots: int = 0, max_model_len: int = 2048, lazy: bool = True,
                 rng: np.random.Generator | None = None, beam_keep_prob: float = 0.8,
                 long_prefill_token_threshold: int = 0, scheduler_reserve_full_isl: bool = True,
                 scheduling_policy: str = "fcfs") -> None:
        self.memory = memory
        self.sink = sink  # receives finish(group, t) and reject(group, reason, t)
        self.continuous = continuous
        self.max_num_seqs = max_num_seqs
        self.budget = max_num_batched_tokens if continuous else 1 << 62
        self.chunked = chunked_prefill and continuous
        self.max_num_batched_tokens = max_num_batched_tokens
        self.long_prefill_token_threshold = long_prefill_token_threshold
        self.threshold = 0  # the threshold in force this step (vLLM lifts it when only one request is in)
        self.reserve_full_isl = scheduler_reserve_full_isl
        self.priority = scheduling_policy == "priority"
        self.per_chunk = self.chunked and memory.per_chunk_capable
        self.step_tokens: dict[int, int] = {}  # group index -> tokens it was scheduled this step
        self.returned = 0  # budget given back by groups preempted after being scheduled this step
        self.deferred_seqs = self.deferred_context = 0  # decoders the budget did not reach this step
        self.swap = preemption == "swap"
        self.swap_slots, self.swap_used = swap_slots, 0
        self.max_model_len = max_model_len
        self.lazy = lazy
        self.beams = BeamSearch(rng if rng is not None else np.random.default_rng(0), beam_keep_prob)
        self.waiting: deque[SequenceGroup] = deque()
        self.running: list[SequenceGroup] = []
        self.running_seqs = 0
        self.live: dict[int, SequenceGroup] = {}
        self.decode = DecodeSet(lazy)
        self.completions: list[tuple[int, int, int]] = []  # (last step, group index, epoch)
        self.joiners: list[SequenceGroup] = []
        self.step = 0
        self.now = 0.0
        self.memory_blocked = False
        self.num_preemptions = 0
        self.swap_transfers: dict[int, int] = {}  # swapped group index -> transfers its swap-out took
        self.cached_prompt_tokens = 0  # prompt tokens admissions found cached (prefix cache or shared prefix)
        self.cached_by_index: dict[int, int] = {}  # the same per request (workload position), hits only
        self.plan = None

    # -- admission ---------------------------------------------------------------------------------------
    def never_runs(self, group: SequenceGroup) -> str | None:
        """Why a request can never run under this configuration, or None."""
        if group.total_tokens > self.max_model_len:
            return f"prompt + output = {group.total_tokens} tokens exceeds max_model_len {self.max_model_len}"
        if group.num_seqs > self.max_num_seqs:
            return f"needs {group.num_seqs} sequences but max_num_seqs is {self.max_num_seqs}"
        if not self.chunked and self.continuous and group.prompt > self.max_num_batched_tokens:
            return (f"prompt of {group.prompt} tokens exceeds max_num_batched_tokens {self.max_num_batched_tokens} "
                    "with chunked prefill off")
        return self.memory.never_fits(group)

    def prefill_need(self, group: SequenceGroup) -> int:
        """Prefill tokens the group would compute if admitted now (prefix-cache hits excluded)."""
        if group.state == SWAPPED:
            return group.prefill_remaining
        cached = self.memory.cached_tokens(group.hashes, group.prompt)
        return group.prefill_target - min(cached, group.prefill_target - 1)

    def place_group(self, group: SequenceGroup, budget: int = 1 << 62) -> bool:
        """Put a waiting or swapped group's sequences in memory (`KVMemory.place`); False (nothing changed) if
        they do not fit.

        A single sequence about to be prefilled in chunks by a per-chunk allocator (vLLM's paged KV cache
        manager) gets slots only for its prefix hits and first chunk (``budget`` and the long-prefill
        threshold bound it); with ``scheduler_reserve_full_isl`` it is admitted only if its whole current
        sequence (prompt plus any generated tokens) would fit."""
        plan = self.plan
        if self.per_chunk and group.num_seqs == 1 and group.state != SWAPPED:
            admission = self.memory.place_first_chunk(
                group, lambda remaining: self.chunk(remaining, budget),
                full_tokens=group.prefill_target if self.reserve_full_isl else None,
                apply_watermark=bool(self.running))
            if admission is None:
                return False
            group.prefill_done = admission.cached_tokens
            self._count_cached(group, admission.cached_tokens)
            self._start_running(group)
            return True
        placed = self.memory.place(group)
        if placed is None:
            return False
        admission, copies = placed
        plan.add_copies(copies)
        if group.state == SWAPPED:  # copied back in as it went out
            plan.swap_blocks += self.swap_transfers.pop(group.index)
            plan.swap_slots += group.swapped_slots
            self.swap_used -= group.swapped_slots
            group.swapped_slots = 0
        else:
            group.prefill_done = min(admission.cached_tokens, group.prefill_target - 1)
            self._count_cached(group, group.prefill_done)
        self._start_running(group)
        return True

    def _count_cached(self, group: SequenceGroup, cached: int) -> None:
        if cached:
            self.cached_prompt_tokens += cached
            self.cached_by_index[group.index] = self.cached_by_index.get(group.index, 0) + cached

    def _start_running(self, group: SequenceGroup) -> None:
        if group.admitted_s < 0:
            group.admitted_s = self.now
        group.state = RUNNING
        group.epoch += 1
        self.running.append(group)
        self.running_seqs += group.num_seqs
        self.beams.groups += group.beam

    # -- running -------------------------------------------------------------------------------------------
    def chunk(self, remaining: int, budget: int) -> int:
        """Prefill tokens a group with ``remaining`` to compute gets this step: with chunked prefill, capped by
        the budget left and by the long-prefill threshold in force."""
        if not self.chunked:
            return remaining
        return min(remaining, budget, self.threshold or remaining)

    def schedule_chunk(self, group: SequenceGroup, chunk: int) -> None:
        self.plan.chunks.append((group, chunk))
        if chunk >= group.prefill_remaining:
            self.start_decode(group, from_prefill=True)

    def start_decode(self, group: SequenceGroup, *, from_prefill: bool) -> None:
        """The group produces a token this step: fork its samples or beams if new. As in vLLM v1 the sampled
        token gets no slot now: the next step, which computes it, allocates one. Joins the decode set (or,
        for beams, the eager per-step path)."""
        memory, plan, step = self.memory, self.plan, self.step
        if not group.forked and group.num_seqs > 1:
            first = group.seq_ids[0]
            for _ in range(group.num_seqs - 1):
                made = self.until_fits(group, lambda: memory.fork(group, first))
                if made is None:
                    return
                plan.add_copies(made)
            group.forked = True
        group.base = step - group.generated
        if from_prefill:
            self.joiners.append(group)
        if not group.beam:
            for seq_id in group.seq_ids:
                self.decode.join(seq_id, memory.num_tokens(seq_id), memory.headroom(seq_id), step + 1)
        heapq.heappush(self.completions, (group.base + group.output - 1, group.index, group.epoch))

    def until_fits(self, group: SequenceGroup, action: Callable[[], object]) -> object:
        """Run an allocator call, preempting the latest admitted group while it returns None. Returns the
        call's result, or None if ``group`` itself had to be preempted."""
        while True:
            result = action()
            if result is not None:
                return result
            victim = self.running[-1] if not self.priority else max(
                self.running, key=lambda g: (g.priority, g.arrival_s, g.index))
            self.preempt(victim)
            if victim is group:
                return None

    def stop_running(self, group: SequenceGroup, *, charge: bool = True) -> None:
        """Free every sequence of a running group and take it off the running list (finished or preempted):
        the reverse of the end of `place_group`. ``charge``: the step being planned pays the slots a last
        sync copies (a preemption; a group finishing after its step has run pays nothing)."""
        decode, lags = self.decode, {}
        for seq_id in group.seq_ids:
            if seq_id in decode:
                lags[seq_id] = decode.pending(seq_id, self.step)
                decode.leave(seq_id)
        copies = self.memory.free_group(group, lags)
        if charge and copies:
            self.plan.copy_slots += sum(c.slots for c in copies)
        self.running.remove(group)
        self.running_seqs -= group.num_seqs
        self.beams.groups -= group.beam

    def preempt(self, victim: SequenceGroup) -> None:
        decoding = victim.base >= 0  # only a decoding group is swapped; a prefill is recomputed
        if decoding:
            victim.generated = self.step - victim.base
            victim.base = -1
        moved = transfers = 0
        if self.swap:  # what a swap would move: the true tokens, including those a lazy decoder has not told
            decode, step = self.decode, self.step
            for seq_id in victim.seq_ids:
                lag = decode.pending(seq_id, step) if seq_id in decode else 0
                seq_slots, seq_transfers = self.memory.swap_extent(seq_id, lag)
                moved += seq_slots
                transfers += seq_transfers
        self.stop_running(victim)
        self.returned += self.step_tokens.pop(victim.index, 0)
        victim.epoch += 1
        victim.preemptions += 1
        self.num_preemptions += 1
        self.plan.preempted += 1
        if not self.running:
            self.reject(victim, "needs more KV memory than the whole pool while running alone", self.now)
            return
        if self.swap and decoding and self.swap_used + moved <= self.swap_slots:
            victim.state = SWAPPED
            victim.swapped_slots = moved
            self.swap_used += moved
            self.swap_transfers[victim.index] = transfers
            self.plan.swap_blocks += transfers
            self.plan.swap_slots += moved
        else:
            victim.state = WAITING
            g = victim.generated
            victim.prefill_target = victim.prompt + (g * victim.num_seqs if victim.forked else g)
            victim.prefill_done = 0
            if not self.chunked and self.continuous and victim.prefill_target > self.max_num_batched_tokens:
                self.reject(victim, f"recompute needs {victim.prefill_target} prefill tokens, more than "
                                    f"max_num_batched_tokens with chunked prefill off", self.now)
                return
        self.requeue(victim)

    def requeue(self, group: SequenceGroup) -> None:
        """A preempted group goes back in front of the queue (FCFS), or in priority order (priority)."""
        if not self.priority:
            self.waiting.appendleft(group)
            return
        self.enqueue(group)

    def enqueue(self, group: SequenceGroup) -> None:
        """Queue a group: at the back (FCFS), or before the first of lower priority (lower value first, then
        earlier arrival, as vLLM's priority queue orders requests)."""
        if not self.priority:
            self.waiting.append(group)
            return
        key = (group.priority, group.arrival_s, group.index)
        for i, other in enumerate(self.waiting):
            if (other.priority, other.arrival_s, other.index) > key:
                self.waiting.insert(i, group)
                return
        self.waiting.append(group)

    def reject(self, group: SequenceGroup, reason: str, now: float) -> None:
        group.state = REJECTED
        self.live.pop(group.index, None)
        self.sink.reject(group, reason, now)

