"""Taking memory back from running groups: which group to preempt when an allocator call finds no room, and
how (recompute, or swap into the swap space or the host tier).

`Preemption` is the half of `sim.kernel.admission.GroupMechanics` that frees memory; it is a base class of it
only to keep each file to one concept, and uses the state ``GroupMechanics.__init__`` sets (``s``, ``swap``,
``swap_slots``, ``swap_used``, ``swapped``, ``num_preemptions``) and its `stop_running` and `reject`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sim.kernel.sequence_group import NOT_DECODING, SWAPPED, WAITING, SequenceGroup


class Preemption:
    """Preempts the latest admitted group (or the lowest-priority one) until an allocator call fits."""

    def until_fits(self, group: SequenceGroup, action: Callable[[], object]) -> object:
        """Run an allocator call, preempting the latest admitted group while it returns None. Returns the
        call's result, or None if ``group`` itself had to be preempted."""
        s = self.s
        while True:
            result = action()
            if result is not None:
                return result
            # vLLM's: the lowest priority, then the latest arrival; the first of those running (a fanned-out
            # request's children tie)
            victim = s.running[-1] if not s.priority else max(
                s.running, key=lambda g: (g.priority, g.arrival_s, g.row))
            if s.in_flight is not None and s.in_flight.pinned(victim):
                return None  # vLLM's running loop stops here (`InFlight.pinned`)
            self.preempt(victim)
            if victim is group:
                return None

    def until_grows(self, group: SequenceGroup, growth: Sequence[tuple[int, int]]) -> bool:
        """Preempt as `until_fits` does until the growth of ``group``'s decoders (``(seq_id, tokens)`` each) fits
        whole (`KVMemory.growth_fits`), before any of them grows (`sim.kernel.group_growth`: vLLM v0's
        ``can_append_slots(seq_group)``). False if ``group`` itself was preempted: it then grew, and copied,
        nothing. Growth of one sequence is all or nothing by itself, so it is not asked."""
        if len(growth) < 2:
            return True
        fits = self.s.memory.growth_fits
        return self.until_fits(group, lambda: True if fits(growth) else None) is not None

    def preempt(self, victim: SequenceGroup) -> None:
        s = self.s
        if s.in_flight is not None and s.in_flight.preempt_finished(victim):
            s.returned += s.step_tokens.pop(victim.index, 0)  # a finished request scheduled again (drafts)
            return
        decoding = victim.decoding  # only a decoding group is swapped; a prefill is recomputed
        if decoding:
            victim.generated = s.step - victim.base
            victim.base = NOT_DECODING
        swap = None
        if self.swap and decoding:  # what a swap moves: the true tokens, those a lazy decoder has not told too
            decode, step = s.decode, s.step
            swap = s.memory.swap_group(victim, [decode.pending(seq_id, step) if seq_id in decode else 0
                                                for seq_id in victim.seq_ids])
        stepped = [seq_id for seq_id in victim.seq_ids if s.walked(victim, seq_id)] if decoding else ()
        parked = set() if swap is not None and s.memory.parks_hashes else None  # what the swap parks, hashed
        unknown_tail = s.in_flight.tail_unknown(victim, bool(stepped)) if decoding and s.in_flight is not None else 0
        if stepped and s.in_flight is None and s.spec is not None:  # its block ending at its tokens: no hash yet
            unknown_tail = s.spec.hash_lookahead()  # (`SpecDecode.unhashed_tails`)
        self.stop_running(victim, stepped=stepped, parked=parked, unknown_tail=unknown_tail)
        s.returned += s.step_tokens.pop(victim.index, 0)
        victim.epoch += 1
        victim.preemptions += 1
        self.num_preemptions += 1
        s.plan.preempted += 1
        if not (s.in_flight and s.in_flight.comes_back(victim)) and not s.stepping and not self.held_off_running():
            self.reject(victim, "needs more KV memory than the whole pool while running alone", s.now)
            return
        # whether or not it comes back with more cached, a victim of a loop that produces no token is the loop's: a
        # Mamba-1 prefill hits none of the blocks it cached (no state inside a prefill), so it may come back to cycle
        livelock = s.stall.stuck(s.live.values())
        if livelock is not None:  # vLLM would preempt and readmit it without end (`sim.kernel.livelock`)
            self.reject(victim, livelock, s.now)
            return
        on_host = None if swap is None else \
            self._swap_room(victim, swap.slots, frozenset(parked or ()), swap.resident_slots)
        if on_host is not None:  # blocks the host tier held already are not copied out (swapped in, they are)
            victim.state = SWAPPED
            self.swapped[victim.index] = swap
            s.plan.swap_blocks += swap.transfers - on_host
            s.plan.swap_slots += swap.slots - on_host * s.memory.block_size
        else:
            victim.state = WAITING
            g = victim.generated
            victim.prefill_target = victim.prompt + (g * victim.num_seqs if victim.forked else g)
            victim.prefill_done = 0
            if not s.chunked and s.continuous and victim.prefill_target > s.max_num_batched_tokens:
                self.reject(victim, f"recompute needs {victim.prefill_target} prefill tokens, more than "
                                    f"max_num_batched_tokens with chunked prefill off", s.now)
                return
        s.waiting.requeue(victim)

    def held_off_running(self) -> bool:
        """Whether groups that are not running hold blocks (``--offload-loads async``: loading their host hits,
        or loaded and queued): memory frees once they run, so a group that fits in no less is not refused."""
        s = self.s
        return s.loads is not None and (bool(s.loads) or s.waiting.held > 0)

    def _swap_room(self, victim: SequenceGroup, moved: int, block_hashes: frozenset[int],
                   resident: int = 0) -> int | None:
        """Take host memory for ``moved`` slots of a victim's KV: blocks of the host tier when there is one
        (its cached blocks evicted as needed; ``block_hashes``, those of its hashed blocks, then count as on the
        host; those it caches already are taken as they are), else the ``--swap-space-gib`` swap space. Returns
        the blocks the host held already, which the swap-out need not copy (`KVMemory.park`; 0 for the swap
        space), or None if full. ``resident``: slots it holds that stay on
        the GPU (`GroupSwap.resident_slots`): the swap space must have room for them too, as vLLM v0.3's
        ``can_swap_out`` counts every block of the group, though they take none of it."""
        memory = self.s.memory
        if memory.host_tier is not None:
            return memory.park(victim.index, moved, block_hashes)
        if self.swap_used + moved + resident > self.swap_slots:
            return None
        self.swap_used += moved
        return 0

    def _release_swap(self, group: SequenceGroup) -> None:
        """Give back the host memory a swapped group's KV took (it is back on the GPU, or rejected)."""
        swap = self.swapped.pop(group.index)
        if self.s.memory.host_tier is not None:
            self.s.memory.unpark(group.index)
        else:
            self.swap_used -= swap.slots
