"""The decode fast-forward: a run of pure decode steps advanced in one move, at the grain of real events.

When no prefill is pending, no beam group runs and nothing can be admitted before the next arrival, every
step appends one token to each decoding sequence and nothing else happens, until one of:

- a sequence runs out of headroom (it needs a new block): the allocator is asked *at that step* and the run
  goes on, unless there is no room: the run then ends before that step, and the scheduler's next step
  preempts;
- a sequence fills a block whose hash a queued request carries (a session turn's output, which the next
  turn's prompt carries; `Allocator.shared_fill`): it may lengthen that request's hit, so the run ends before
  that step, which the scheduler plans, as step by step it would try the request there;
- a group produces its last token: the run ends after that step;
- a request arrives while the queue is empty, or at all under ``priority`` and ``lpm`` while it sorts (at
  most 128 queued: it may go ahead of a refused head, and fit): the run ends before the first step starting
  at or after it;
- a memory snapshot falls due (`sim.kernel.snapshot_schedule`): the run ends before the first step starting
  at or after its moment, which takes it, as step by step;
- a sequence leaves the model's sliding window (its clipped context, which the clock reads, stops growing):
  the run ends before that step;
- a window releases blocks, or growth evicts or caches blocks (a hybrid pool), while requests wait: they
  may now fit (`Allocator.hit_changes` says why), so the run ends at that step and the scheduler plans it,
  as step by step it would try to admit them there;
- growth evicts a cached block the head of the queue hits, or a host-tier block of its host hit (a spill or
  a write-through store makes the host drop one): its hit gets shorter, and the shorter hit's first chunk
  (capped by the token budget) takes fewer blocks, so it may fit; under ``lpm`` while it sorts any cached
  block, or any write-through store, while requests wait, as a hit that changes can also re-sort the queue
  and a new head may fit (before that step where the allocator reports growth, at it otherwise).

The step durations are linear in the step index (on each side of the roofline's crossover), so
`StepCostModel.decode_run` sums them, and their index-weighted sum, which integrates the linearly growing
token states exactly, in O(1); the run's length is fixed before any block is handed out, because growth
does not change the durations.

Memory is integrated exactly without re-reading the breakdown at every sub-event. A sync at step ``m`` of
the run changes the breakdown by constants from then on: ``blocks`` used blocks more (``block_size`` slots
each, taken from the free share), and the sequence's slots move between reservation and internal
fragmentation; token states do not move (the allocator learns the tokens the decode set's lag counted
already); a block past the free queue's empty blocks is evicted from the prefix cache, leaving ``cached``.
So each sync adds ``delta x (T - t_m)`` to the integrals, where ``t_m`` is when step ``m`` starts and ``T``
the run's duration: O(1) per sub-event from sums of ``delta`` and ``delta x t_m``::

    breakdown b(t):  b0 ------------+ b0 + d1 ------------+ b0 + d1 + d2 ------|
    time:            0            t_m1                  t_m2                   T

Allocators that can report those deltas say ``reports_growth`` and offer ``grow_due`` (`PagedAllocator`); for
the others (copy-on-write tails, growing slabs) `_run_by_sub_events` integrates piecewise with a `breakdown`
per sub-event.
"""

from __future__ import annotations

import math
from itertools import chain

from allocators.base import MemoryBreakdown
from sim.kernel.cost_model import StepCostModel
from sim.kernel.group_growth import by_group, due_together
from sim.kernel.metrics import MemoryIntegral
from sim.kernel.step_plan import StepPlan


def run_decode(sched, cost: StepCostModel, integral: MemoryIntegral, waiting: bool, horizon: float,
               b: MemoryBreakdown) -> tuple[int, float]:
    """Advance the decode run starting at step ``sched.step`` (already planned). Returns (steps, seconds).

    ``horizon``: seconds from the run's start to the next arrival that could change the schedule (inf if
    none); ``b``: the allocator's breakdown at the run's start. The scheduler's step counter is advanced by
    `Scheduler.complete`, not here.
    """
    decode, memory = sched.decode, sched.memory
    if not memory.reports_growth:
        return _run_by_sub_events(sched, cost, integral, waiting, horizon, b)
    grow_due, begin_step = _store_steps(memory, memory.grow_due)
    # blocks come off the free queue empty ones first, cached ones after (`allocators.block_pool`)
    spare = b.total_blocks - b.used_blocks - b.cached // memory.block_size if b.cached else 1 << 62
    if sched.waiting and memory.prefix_caching:
        grow_due = _ending_where_a_hit_changes(sched, grow_due, spare)
    n = decode.n
    last = sched.next_completion()
    if last is None:
        raise RuntimeError("decode run with no completion ahead: the scheduler lost track")
    step0 = sched.step
    context = decode.context(step0) + n  # each decoder also attends to the token it feeds
    lag0 = decode.lag(step0)
    k = 1 if _retries_due(memory) else last + 1 - step0
    window, k = _window(decode, step0, k)
    prefix = cost.decode_prefix(n, context, window)  # when step m of the run starts, in seconds from its start
    if horizon != math.inf:
        k = cost.steps_starting_before(n, context, k, horizon, prefix, window)
    end = step0 + k
    together, whole_steps = _together(sched), _whole_steps(sched)
    end, blocks, blocks_t, moved, moved_t, evicted, evicted_t = decode.sync_run(
        step0, end, grow_due, prefix, spare, begin_step, together,
        memory.growth_fits if together or whole_steps else None, whole_steps)
    _end_run_stores(memory, end)
    k = end - step0
    seconds, weighted = cost.decode_run(n, context, k, window)
    integral.add(b, lag0, seconds, n * weighted, len(sched.running))
    if blocks or moved:
        integral.add_blocks(blocks * seconds - blocks_t, moved * seconds - moved_t, memory.block_size, waiting,
                            evicted * seconds - evicted_t)
    return k, seconds


def _groups_run(sched) -> bool:
    """Whether a running group has several sequences, whose decoders due at a step grow whole or not at all
    (`sim.kernel.group_growth`); else each decoder grows alone."""
    return sched.running_seqs > len(sched.running)


def _together(sched):
    """`DecodeSet.sync_run`'s ``together`` where groups of several sequences run (`_groups_run`), else None."""
    if not _groups_run(sched):
        return None
    owner, deadline = sched.memory.owner, sched.decode.deadline
    return lambda seq_id, due: due_together(owner[seq_id], deadline, due)


def _whole_steps(sched) -> bool:
    """Whether a run syncs a step's due decoders only if they all fit (`DecodeSet.sync_run`'s ``whole_steps``):
    where the running loop may stop at a victim it cannot preempt (`InFlight.pins`, async scheduling behind a
    host tier), as the decoder that meets the full pool first, and the decoders it defers, follow running order."""
    return sched.in_flight is not None and sched.in_flight.pins


def _retries_due(memory) -> bool:
    """Whether a write-through tier has a failed store to make again at the next step (`RequestTier.retries_due`),
    which only a planned step does, so the run is that one step."""
    tier = memory.host_tier
    return tier is not None and tier.write_through and tier.retries_due


def _store_steps(memory, grow_due):
    """``(grow_due, begin_step)`` for a run (``grow_due``: `KVMemory.grow_due`, or `KVMemory.grow` where a run
    goes by sub-events): with a write-through tier, ``grow_due`` refusing a sync that stores
    while failed stores wait (`RequestTier.behind`: the run ends before that step, which the scheduler plans,
    making the failed stores again in order with it), and the tier's `RequestTier.run_step`, told each step
    whose syncs the run makes (a step's stores are held back until the step is whole, as the scheduler holds
    them: a step the run stops at is the scheduler's to finish, and it may preempt a sequence the run synced
    there, whose offer vLLM never makes; `_end_run_stores`); else ``grow_due`` itself and None."""
    tier = memory.host_tier
    if tier is None or not tier.write_through:
        return grow_due, None
    stores, behind = memory.stores, tier.behind

    def grow(seq_id: int, num_tokens: int):
        if behind and stores(seq_id, num_tokens):
            return None
        return grow_due(seq_id, num_tokens)
    return grow, tier.run_step


def _end_run_stores(memory, next_step: int) -> None:
    """A run ends before step ``next_step``: a write-through tier makes the held offers of the steps it completed
    (`RequestTier.end_run`); those of ``next_step``, where a sync was refused, wait for the scheduler's planning."""
    tier = memory.host_tier
    if tier is not None and tier.write_through:
        tier.end_run(next_step)


def _ending_where_a_hit_changes(sched, grow_due, spare: int):
    """``grow_due`` that refuses (None: the run ends before that step, as when memory runs out) a sync that
    changes what a queued request would hit, so that it may now fit:

    - one that would index a hash a queued request carries (`Scheduler.queued_hashes`, gathered at the first
      shared fill of the run: session workloads; other runs never look);
    - one that would cut the head of the queue's hit short by more blocks than the run has taken with it:
      evicting a block of its GPU hit cuts the hit there (the blocks after it, and its host part), evicting
      a hash of its host hit cuts that (a write-back tier drops its least recently used for a GPU
      eviction's spill; a write-through store that must evict may cut the whole host part, as the tier's
      policy picks what goes). The head then needs at most that many blocks fewer (its first chunk is
      capped by the token budget, and a held block it no longer hits was not counted), while the free queue
      has the blocks taken fewer: a cut no longer than that (decoders taking the hit's last blocks, tail
      first) cannot let it in. Without chunked prefill any cut counts: the head's whole prefill may then
      exceed the token budget, and a head waiting on the budget is not refused memory (`admit_waiting`'s
      ``memory_blocked``: free slots stop counting as external fragmentation). Nor with ``--offload-loads
      async``: a head with a host hit is placed into blocks for its hits alone, computing nothing while they
      load (`GroupMechanics.place_group`), so a cut that moves part of its hit to the host (a write-back spill) may
      drop its whole first chunk from what it needs. The layout of its hit is
      gathered once a run, when growth first may evict (a write-through tier: at the first sync), and a head
      that hits nothing needs no more.

    Only the head counts, as FCFS and priority admit head of line (and ``lpm`` past 128 queued, where it does
    not sort); under ``lpm`` while it sorts, where a hit that changes can also re-sort the queue, every
    eviction counts, and every write-through store. ``spare``: the free blocks that hold nothing at the run's
    start, handed out before any cached one is evicted."""
    memory, waiting = sched.memory, sched.waiting
    shared_fill, evicted_blocks, block_size = memory.shared_fill, memory.evicted_blocks, memory.block_size
    lpm = waiting.sorts_by_prefix  # the queue's length holds for the run (`WaitingQueue.reorders`)
    # any cut counts: the head's whole prefill may now exceed the token budget, or (loads beside the steps) a
    # host hit may now make it load first, needing no block for its first chunk
    whole = not sched.chunked or sched.loads is not None
    tier = memory.host_tier
    host_evictions = memory.host_evictions if tier is not None else None
    through = tier is not None and tier.write_through  # a store may evict; write-back, only a spill
    stores = memory.stores if lpm and through else None
    queued: set[int] | None = None
    gpu_at: dict[int, int] | None = None  # the head's hit, gathered once a run: GPU block -> position,
    host_at: dict[int, int] = {}  # host hash -> position in the host part,
    length = 0  # and its length in blocks
    taken = 0  # blocks the run's growth took so far: the free queue has that many fewer

    def gather() -> None:
        nonlocal gpu_at, host_at, length
        gpu, host = memory.hit_layout(waiting[0].hashes, waiting[0].prefill_target)
        gpu_at, host_at, length = {b: i for i, b in enumerate(gpu)}, {h: i for i, h in enumerate(host)}, \
            len(gpu) + len(host)

    def grow(seq_id: int, num_tokens: int):
        nonlocal queued, taken
        evicted = ()
        # growth by n tokens takes at most n // block_size + 1 blocks: none evicts before the spare ones are gone
        if taken + num_tokens // block_size >= spare:
            if lpm:
                if evicted_blocks(seq_id, num_tokens):
                    return None
            else:
                if gpu_at is None:
                    gather()
                if length:  # a head that hits nothing loses nothing: its evictions are not worked out
                    evicted = evicted_blocks(seq_id, num_tokens)
        cut = 0
        for b in evicted:
            if b in gpu_at:
                cut = max(cut, length - gpu_at[b])
        if stores is not None:  # lpm (a GPU eviction, and so a spill, has ended the run already)
            if stores(seq_id, num_tokens):
                return None
        elif host_evictions is not None and (evicted or through):
            if gpu_at is None:
                gather()
            if host_at:
                gone = host_evictions(seq_id, num_tokens, evicted)
                if gone is None:
                    cut = max(cut, len(host_at))
                else:
                    for h in gone:
                        if h in host_at:
                            cut = max(cut, len(host_at) - host_at[h])
        if cut and (whole or cut > taken + memory.new_blocks(seq_id, num_tokens)):
            return None
        filled = shared_fill(seq_id, num_tokens)
        if filled:
            if queued is None:
                queued = sched.queued_hashes()
            if not queued.isdisjoint(filled):
                return None
        grown = grow_due(seq_id, num_tokens)
        if grown is not None:
            taken += grown[1]
        return grown
    return grow


def _sync_together(decode, memory, grow, seq_ids: list[int], step: int, synced: StepPlan) -> int:
    """Sync one group's decoders ``seq_ids`` due at ``step`` of a sub-event run, their copies and page maps
    gathered in ``synced``; returns how many were synced: none where there are several whose growth does not
    fit whole (`sim.kernel.group_growth`), else up to the first that ``grow`` refuses (out of memory, or a
    store while failed stores wait)."""
    if len(seq_ids) > 1 and not memory.growth_fits([(s, decode.pending(s, step) + 1) for s in seq_ids]):
        return 0
    for done, seq_id in enumerate(seq_ids):
        added = decode.pending(seq_id, step) + 1
        copies = grow(seq_id, added)
        if copies is None:
            return done
        synced.add_copies(copies)  # a shared tail copied on write, or pages mapped
        decode.resync(seq_id, added, memory.headroom(seq_id), step + 1)
    return len(seq_ids)


def _window(decode, step: int, k: int) -> tuple[tuple[int, int] | None, int]:
    """The run's sliding-window figures for the cost model (`DecodeSet.window_run`; None for a model without
    windows) and its length cut to end before a sequence leaves the window (the clipped context then stops
    being linear in the step)."""
    if decode.windows is None:
        return None, k
    window, exit_step = decode.window_run(step)
    return window, k if exit_step is None else min(k, exit_step - step)


def _run_by_sub_events(sched, cost: StepCostModel, integral: MemoryIntegral, waiting: bool, horizon: float,
                       b: MemoryBreakdown) -> tuple[int, float]:
    """The general run: the breakdown is re-read and integrated piecewise at every sub-event."""
    decode, memory, plan = sched.decode, sched.memory, sched.plan
    n = decode.n
    running = len(sched.running)
    last = sched.next_completion()
    step = sched.step
    total = 0.0
    steps = 0
    # the head's hit, and the blocks used, at the start: a hit cut by more blocks than the run took may let the
    # head in (`_ending_where_a_hit_changes`)
    head = sched.waiting[0] if sched.waiting and memory.prefix_caching else None
    head_hit = memory.cached_tokens(head.hashes, head.prefill_target) if head is not None else 0
    used0 = b.used_blocks
    tier = memory.host_tier  # a host tier's contents change with stores and spills, not seen in the breakdown
    retry = _retries_due(memory)  # then one step only
    together, whole = _groups_run(sched), _whole_steps(sched)
    grow, begin_step = _store_steps(memory, memory.grow)
    while True:
        deadline = decode.next_deadline()
        end = last + 1 if last is not None else math.inf
        if deadline is not None and deadline < end:
            end = deadline
        k = end - step
        if k == math.inf:
            raise RuntimeError("decode run with no deadline and no completion: the scheduler lost track")
        context = decode.context(step) + n
        window, k = _window(decode, step, k)
        stop = False
        seconds, weighted = cost.decode_run(n, context, k, window)
        if total + seconds >= horizon:  # the last steps may start at or after the next arrival
            fits = cost.steps_starting_before(n, context, k, horizon - total, window=window)
            if fits < k:
                k, stop = fits, True
                seconds, weighted = cost.decode_run(n, context, k, window)
        integral.add(b, decode.lag(step), seconds, n * weighted, running)
        total += seconds
        step += k
        steps += k
        if stop or retry or (last is not None and step > last) or total >= horizon:
            _end_run_stores(memory, step)
            return steps, total
        due = decode.pop_due(step)
        synced = StepPlan()  # what the step's syncs copied and mapped
        stopped = False
        openings = memory.growth_openings
        memory.at_step(step)
        if begin_step is not None:
            begin_step(step)
        # a group's due decoders grow together, and only if they fit whole (`sim.kernel.group_growth`); with
        # `_whole_steps`, all of the step's do
        if whole:
            order = [due]
        else:
            order = [seq_ids for _, seq_ids in by_group(due, memory.owner)] if together else [[s] for s in due]
        for i, seq_ids in enumerate(order):
            done = _sync_together(decode, memory, grow, seq_ids, step, synced)
            if done < len(seq_ids):  # the scheduler plans it (and preempts, if memory ran out)
                for rest in (*seq_ids[done:], *chain.from_iterable(order[i + 1:])):
                    decode.requeue(rest)
                stopped = True
                break
        # the step that preempts pays for what its syncs did, as it does step by step; so does a step at which
        # a window released blocks, or a hybrid pool's prefix cache changed, while requests wait: they may now
        # be admitted, so the scheduler plans it; so does one whose evictions (GPU or host) have cut the head's
        # hit by more blocks than the run took (by any, without chunked prefill), and under lpm one that evicted
        # any cached block or may have changed the host tier (`_ending_where_a_hit_changes`)
        if not stopped:
            cached, b = b.cached, memory.breakdown(waiting)
            stopped = bool(sched.waiting) and (memory.growth_openings != openings or (
                head is not None and (b.cached < cached or tier is not None) and (
                    sched.waiting.sorts_by_prefix
                    or head_hit - memory.cached_tokens(head.hashes, head.prefill_target)
                    > (0 if not sched.chunked else (b.used_blocks - used0) * memory.block_size))))
        if stopped:
            sched.carry = synced
            _end_run_stores(memory, step)
            return steps, total
        if synced.copy_slots or synced.page_maps:  # charged before the step, with the memory as the step holds it
            # (as step by step), and shown in the run's row
            extra = cost.transfer_time(synced.copy_slots, page_maps=synced.page_maps)
            integral.add(b, decode.lag(step), extra, 0.0, running)
            total += extra
            plan.copies += synced.copies
            plan.copy_slots += synced.copy_slots
            plan.page_maps += synced.page_maps
