"""Collecting results while the simulation runs: per-request times, step rows and time-weighted memory.

Nothing here touches pandas until the run is over: per-request facts go into numpy arrays indexed by the
request's position, step rows into typed `array.array` columns (8 bytes a value, no Python objects), and the
memory shares into running integrals over simulated time. `Recorder.frames` builds the DataFrames of
``docs/architecture.md`` at the end.
"""

from __future__ import annotations

from array import array

import numpy as np

from allocators.base import MemoryBreakdown

STEP_FLOAT = ("time_s", "duration_s")
STEP_INT = ("num_steps", "running", "waiting", "prefill_tokens", "decode_seqs", "context_tokens", "copies",
            "swap_blocks", "preempted", "token_states", "reservation", "internal_frag", "external_frag", "free",
            "used_blocks", "shared_saved")
STEP_COLUMNS = (*STEP_FLOAT, *STEP_INT[:-1], "total_blocks", "shared_saved", "capacity")
MEMORY_KEYS = ("token_states", "reservation", "internal_frag", "external_frag", "free", "used_blocks",
               "shared_saved")


class MemoryIntegral:
    """Integrals over simulated time of the memory breakdown, the running count, and time itself.

    ``lag`` moves slots from reservation to token states (lazily grown decoders, `sim.decode_set`);
    ``growth`` is ``n x sum_j j * d_j`` for a run whose decoders append ``n`` tokens a step.
    """

    __slots__ = ("time", "running", *MEMORY_KEYS)

    def __init__(self) -> None:
        for key in self.__slots__:
            setattr(self, key, 0.0)

    def add(self, b: MemoryBreakdown, lag: int, duration: float, growth: float, running: int) -> None:
        self.time += duration
        self.running += running * duration
        self.token_states += (b.token_states + lag) * duration + growth
        self.reservation += (b.reservation - lag) * duration - growth
        self.internal_frag += b.internal_frag * duration
        self.external_frag += b.external_frag * duration
        self.free += b.free * duration
        self.used_blocks += b.used_blocks * duration
        self.shared_saved += b.shared_saved * duration


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
        self.cols = {name: array("d") for name in STEP_FLOAT} | {name: array("q") for name in STEP_INT}
        self.memory = MemoryIntegral()
        self.max_running = 0
        self.snapshots: list[tuple[float, np.ndarray, dict[int, int]]] = []
        self.on_done = None  # closed-loop arrivals hook: called with the time a request left

    def finish(self, group, t: float) -> None:
        i = group.index
        self.admitted_s[i] = group.admitted_s
        self.first_token_s[i] = group.first_token_s
        self.finished_s[i] = t
        self.preemptions[i] = group.preemptions
        if self.on_done is not None:
            self.on_done(t)

    def reject(self, group, reason: str, t: float) -> None:
        i = group.index
        self.rejected[i] = True
        self.reasons[i] = reason
        self.preemptions[i] = group.preemptions
        if group.admitted_s >= 0:
            self.admitted_s[i] = group.admitted_s
        if self.on_done is not None:
            self.on_done(t)

    def row(self, time_s: float, duration: float, num_steps: int, running: int, waiting: int, plan,
            b: MemoryBreakdown, lag: int) -> None:
        """One step row; memory columns as at the start of the row (``lag`` applied)."""
        c = self.cols
        c["time_s"].append(time_s)
        c["duration_s"].append(duration)
        c["num_steps"].append(num_steps)
        c["running"].append(running)
        c["waiting"].append(waiting)
        if running > self.max_running:
            self.max_running = running
        if plan is None:
            for name in ("prefill_tokens", "decode_seqs", "context_tokens", "copies", "swap_blocks", "preempted"):
                c[name].append(0)
        else:
            c["prefill_tokens"].append(plan.prefill_tokens)
            c["decode_seqs"].append(plan.decode_seqs)
            c["context_tokens"].append(plan.context_tokens)
            c["copies"].append(plan.copies)
            c["swap_blocks"].append(plan.swap_blocks)
            c["preempted"].append(plan.preempted)
        c["token_states"].append(b.token_states + lag)
        c["reservation"].append(b.reservation - lag)
        c["internal_frag"].append(b.internal_frag)
        c["external_frag"].append(b.external_frag)
        c["free"].append(b.free)
        c["used_blocks"].append(b.used_blocks)
        c["shared_saved"].append(b.shared_saved)

    def snapshot(self, time_s: float, owners: np.ndarray, request_of_seq: dict[int, int]) -> None:
        self.snapshots.append((time_s, owners, request_of_seq))

    def steps_frame(self, capacity: int, total_blocks: int):
        import pandas as pd

        data = {name: np.frombuffer(self.cols[name], dtype=np.float64 if name in STEP_FLOAT else np.int64)
                for name in (*STEP_FLOAT, *STEP_INT)}
        rows = len(data["time_s"])
        data["total_blocks"] = np.full(rows, total_blocks, np.int64)
        data["capacity"] = np.full(rows, capacity, np.int64)
        return pd.DataFrame({name: data[name] for name in STEP_COLUMNS})

    def memory_frame(self):
        """One row per slot per snapshot: ``time_s, slot, owner`` (seq id, or -1 free, -2 overhead, -3
        shared) and ``request_id`` (the owning request, -1 when the slot has no single owner)."""
        import pandas as pd

        frames = []
        for time_s, owners, request_of_seq in self.snapshots:
            uniq, inverse = np.unique(owners, return_inverse=True)
            requests = np.array([request_of_seq.get(int(o), -1) for o in uniq], np.int64)
            frames.append(pd.DataFrame({
                "time_s": np.full(len(owners), time_s),
                "slot": np.arange(len(owners), dtype=np.int64),
                "owner": owners.astype(np.int64),
                "request_id": requests[inverse] if len(owners) else np.zeros(0, np.int64),
            }))
        if not frames:
            return pd.DataFrame({"time_s": [], "slot": [], "owner": [], "request_id": []})
        return pd.concat(frames, ignore_index=True)
