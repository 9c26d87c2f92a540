"""Collecting results while the simulation runs: per-request times, step rows and time-weighted memory.

Nothing here touches pandas until the run is over: per-request facts go into numpy arrays indexed by the
request's position, step rows into two typed, row-major `array.array`s (8 bytes a value, no Python objects), and the
memory shares into running integrals over simulated time. `Recorder.frames` builds the DataFrames of
``docs/architecture.md`` at the end.
"""

from __future__ import annotations

from array import array

import numpy as np

from allocators.base import SHARE_NAMES, SLOT_STATES, MemoryBreakdown
from sim.kernel.huge_pages import without_huge_page_hint

STEP_FLOAT = ("time_s", "duration_s")
STEP_WORK = ("prefill_tokens", "decode_seqs", "context_tokens", "copies", "copy_slots", "page_maps", "swap_blocks",
             "swap_slots", "preempted", "gpu_hit_tokens", "host_hit_tokens", "reload_blocks", "reload_slots",
             "reload_transfers")
"""What a row's steps did: the `StepPlan` fields of these names, the work and transfers the step clock charged
(a fast-forwarded run's: the copies and page maps of its syncs) and the hits its admissions found."""
STEP_INT = ("num_steps", "running", "waiting", *STEP_WORK, "token_states", "reservation", "internal_frag",
            "external_frag", "free", "used_blocks", "shared_saved", "cached")
STEP_COLUMNS = (*STEP_FLOAT, *STEP_INT[:-2], "total_blocks", "shared_saved", "cached", "capacity")
_IDLE = (0,) * len(STEP_WORK)  # an idle row's
MEMORY_KEYS = (*SHARE_NAMES, "used_blocks", "shared_saved", "cached")
GROUP_KEYS = ("token_states", "reservation", "internal_frag", "used_blocks")
"""A hybrid pool's per-group memory columns (``<group>_<key>`` in the step table) and integrals."""


class MemoryIntegral:
    """Integrals over simulated time of the memory breakdown, the running count, and time itself.

    ``lag`` moves slots from reservation to token states (lazily grown decoders, `sim.kernel.decode_set`);
    ``growth`` is ``n x sum_j j * d_j`` for a run whose decoders append ``n`` tokens a step. Both count tokens,
    which fill ``slots_per_token`` slots each (a hybrid pool: one per KV cache group); ``groups`` holds a
    hybrid pool's per-group integrals (`GROUP_KEYS`), by group name. ``cached`` (slots held only by a prefix
    cache, part of the free or external share) is integrated beside the shares.
    """

    __slots__ = ("time", "running", *MEMORY_KEYS, "slots_per_token", "groups")

    def __init__(self) -> None:
        for key in ("time", "running", *MEMORY_KEYS):
            setattr(self, key, 0.0)
        self.slots_per_token = 1
        self.groups: dict[str, list[float]] = {}

    def add(self, b: MemoryBreakdown, lag: int, duration: float, growth: float, running: int) -> None:
        self.time += duration
        self.running += running * duration
        if b.groups:
            self._add_groups(b, lag, duration, growth)
        lag *= self.slots_per_token  # 1 but in a hybrid pool or ring-buffer slabs (`Allocator.slots_per_token`)
        growth *= self.slots_per_token
        self.token_states += (b.token_states + lag) * duration + growth
        self.reservation += (b.reservation - lag) * duration - growth
        self.internal_frag += b.internal_frag * duration
        self.external_frag += b.external_frag * duration
        self.free += b.free * duration
        self.used_blocks += b.used_blocks * duration
        self.shared_saved += b.shared_saved * duration
        self.cached += b.cached * duration

    def _add_groups(self, b: MemoryBreakdown, lag: int, duration: float, growth: float) -> None:
        for part in b.groups:
            k = part.slots_per_token
            acc = self.groups.setdefault(part.name, [0.0] * len(GROUP_KEYS))
            acc[0] += (part.token_states + lag * k) * duration + growth * k
            acc[1] += (part.reservation - lag * k) * duration - growth * k
            acc[2] += part.internal_frag * duration
            acc[3] += part.used_blocks * duration

    def add_blocks(self, blocks: float, moved: float, block_size: int, waiting: bool, evicted: float = 0.0) -> None:
        """Blocks handed out during a run, pre-integrated by the caller: ``blocks`` is block-seconds gained
        by the used share (taken from the free share, or from external fragmentation while requests wait on
        memory); ``moved`` is slot-seconds of those blocks that sequences will fill (reservation), the rest of
        each block being internal fragmentation; ``evicted`` is block-seconds of them that were cached blocks
        (evicted from the prefix cache)."""
        self.cached -= evicted * block_size
        slots = blocks * block_size
        self.used_blocks += blocks
        self.reservation += moved
        self.internal_frag += slots - moved
        if waiting:
            self.external_frag -= slots
        else:
            self.free -= slots


class Recorder:
    """The run's sink: the scheduler reports finished and rejected groups, the engine appends step rows."""

    def __init__(self, num_requests: int) -> None:
        nan = np.full(num_requests, np.nan)
        self.arrival_s = nan.copy()
        self.admitted_s = nan.copy()
        self.first_token_s = nan.copy()
        self.finished_s = nan.copy()
        self.preemptions = np.zeros(num_requests, np.int64)
        self.rejected = np.zeros(num_requests, bool)
        self.reasons: dict[int, str] = {}
        self.floats = array("d")  # step rows, row-major: STEP_FLOAT of each row, then the next row's
        self.ints = array("q")  # the same for STEP_INT (one extend a row instead of a call per column)
        self.memory = MemoryIntegral()
        self.max_running = 0
        self.snapshots: list[tuple[float, np.ndarray, dict[int, int], np.ndarray, np.ndarray | None]] = []
        self.on_done = None  # closed-loop arrivals hook: called with the time a request left and its index
        self.group_names: tuple[str, ...] = ()
        self.group_ints = array("q")  # a hybrid pool's per-group step columns, row-major like ``ints``

    def describe_pool(self, slots_per_token: int, group_names: tuple[str, ...]) -> None:
        """Say how the pool counts (`Allocator.slots_per_token`, ``group_names``): a hybrid pool's step rows
        and integrals scale the lag by it and get per-group columns (registered now, so that a run that ends
        at time 0, every request rejected, still reports its groups)."""
        self.memory.slots_per_token = slots_per_token
        self.group_names = group_names
        for name in group_names:
            self.memory.groups.setdefault(name, [0.0] * len(GROUP_KEYS))

    def finish(self, group, t: float, notify: bool = True) -> None:
        """``group`` finished at ``t``. ``notify``: call `on_done` now (False: the caller does once the client
        hears of it, async scheduling's `InFlight.tell_clients`)."""
        i = group.index
        self.admitted_s[i] = group.admitted_s
        self.first_token_s[i] = group.first_token_s
        self.finished_s[i] = t
        self.preemptions[i] = group.preemptions
        if notify and self.on_done is not None:
            self.on_done(t, i)

    def reject(self, group, reason: str, t: float) -> None:
        i = group.index
        self.rejected[i] = True
        self.reasons[i] = reason
        self.preemptions[i] = group.preemptions
        if group.admitted_s >= 0:
            self.admitted_s[i] = group.admitted_s
        if self.on_done is not None:
            self.on_done(t, i)

    def row(self, time_s: float, duration: float, num_steps: int, running: int, waiting: int, plan,
            b: MemoryBreakdown, lag: int) -> None:
        """One step row; memory columns as the row runs (``b`` after its step's allocations, ``lag`` applied).
        ``plan``: the step's `StepPlan`, or None for an idle row."""
        self.floats.extend((time_s, duration))
        if running > self.max_running:
            self.max_running = running
        # STEP_WORK, spelled out: attribute loads beat operator.attrgetter's call here (the per-row hot path)
        work = _IDLE if plan is None else (plan.prefill_tokens, plan.decode_seqs, plan.context_tokens, plan.copies,
                                           plan.copy_slots, plan.page_maps, plan.swap_blocks, plan.swap_slots,
                                           plan.preempted, plan.gpu_hit_tokens, plan.host_hit_tokens,
                                           plan.reload_blocks, plan.reload_slots, plan.reload_transfers)
        if b.groups:
            for part in b.groups:
                moved = lag * part.slots_per_token
                self.group_ints.extend((part.token_states + moved, part.reservation - moved, part.internal_frag,
                                        part.used_blocks))
        lag *= self.memory.slots_per_token
        self.ints.extend((num_steps, running, waiting, *work, b.token_states + lag, b.reservation - lag,
                          b.internal_frag, b.external_frag, b.free, b.used_blocks, b.shared_saved, b.cached))

    def snapshot(self, time_s: float, owners: np.ndarray, request_of_seq: dict[int, int],
                 states: np.ndarray, groups: np.ndarray | None = None) -> None:
        self.snapshots.append((time_s, owners, request_of_seq, states, groups))

    def steps_frame(self, capacity: int, total_blocks: int):
        import pandas as pd

        floats = np.frombuffer(self.floats, dtype=np.float64).reshape(-1, len(STEP_FLOAT))
        ints = np.frombuffer(self.ints, dtype=np.int64).reshape(-1, len(STEP_INT))
        data = {name: floats[:, i] for i, name in enumerate(STEP_FLOAT)}  # strided views: pandas copies once
        data |= {name: ints[:, i] for i, name in enumerate(STEP_INT)}
        rows = len(floats)
        data["total_blocks"] = np.full(rows, total_blocks, np.int64)
        data["capacity"] = np.full(rows, capacity, np.int64)
        columns = {name: data[name] for name in STEP_COLUMNS}
        if self.group_names:
            per_group = np.frombuffer(self.group_ints, dtype=np.int64).reshape(rows, len(self.group_names) *
                                                                                len(GROUP_KEYS))
            for i, (group, key) in enumerate((g, k) for g in self.group_names for k in GROUP_KEYS):
                columns[f"{group}_{key}"] = per_group[:, i]
        return pd.DataFrame(columns)

    def memory_frame(self):
        """One row per slot per snapshot: ``time_s, slot, owner`` (seq id, or -1 free, -2 overhead, -3
        shared), ``request_id`` (the owning request, -1 when the slot has no single owner) and ``state``
        (`SLOT_STATES`: token, reserved, internal_frag, overhead, external_frag or free, counted as the step row
        starting at ``time_s`` counts its shares); a hybrid pool adds ``group``, the attention group whose block
        holds the slot (empty for free and overhead slots).

        Built as whole columns filled snapshot by snapshot, the three int64 ones as the rows of one 2-D
        array that pandas takes as its int block without copying: a frame per snapshot joined by
        ``pd.concat`` copied every row twice (the frame's block, then the join), about 0.5 s and twice the
        table's memory for the ~800K slots of each of a dozen snapshots of an H200. Built without numpy's
        huge-page hint, which made it ten times slower on a VM (`sim.kernel.huge_pages`)."""
        with without_huge_page_hint():
            return self._memory_frame()

    def _memory_frame(self):
        import pandas as pd

        if not self.snapshots:
            return pd.DataFrame({"time_s": [], "slot": [], "owner": [], "request_id": [],
                                 "state": pd.Categorical([], SLOT_STATES)})
        sizes = [len(owners) for _, owners, _, _, _ in self.snapshots]
        total = sum(sizes)
        ints = np.empty((3, total), np.int64)  # slot, owner, request_id
        times = np.repeat(np.array([time_s for time_s, *_ in self.snapshots]), sizes)
        states = np.empty(total, np.int8)
        grouped = any(groups is not None for *_, groups in self.snapshots)
        group_codes = np.empty(total, np.int8) if grouped else None
        at = 0
        for (_, owners, request_of_seq, slot_states, groups), n in zip(self.snapshots, sizes, strict=True):
            rows = slice(at, at + n)
            inverse, uniq = pd.factorize(owners)  # hashing, not np.unique's sort: ~800K slots a snapshot
            ints[0, rows] = np.arange(n)
            ints[1, rows] = owners
            ints[2, rows] = np.array([request_of_seq.get(int(o), -1) for o in uniq], np.int64)[inverse]
            states[rows] = slot_states
            if grouped:
                assert groups is not None, "memory snapshots: some with attention groups, some without"
                group_codes[rows] = groups
            at += n
        frame = pd.DataFrame(ints.T, columns=["slot", "owner", "request_id"], copy=False)
        frame.insert(0, "time_s", times)
        frame["state"] = pd.Categorical.from_codes(states, SLOT_STATES)
        if grouped:
            frame["group"] = pd.Categorical.from_codes(group_codes, self.group_names)
        return frame
