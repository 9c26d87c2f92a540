"""The derivative of every request's TTFT and decode time with respect to the step-cost coefficients, with the
simulated schedule held fixed (the Jacobian `sim.trace_fit` searches with).

A simulation's schedule (which steps run, with which sequences) depends on the clock only through where
arrivals fall between step boundaries; for a small change of coefficients it stays the same, and every time
in it is a sum of step durations. So `RecordingStepCost` remembers every step, decode run and transfer the
engine priced, and `schedule_jacobian` re-prices them under perturbed coefficients and sums the changes along
the timeline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.kernel.cost_model import StepCostModel


class RecordingStepCost(StepCostModel):
    """A `StepCostModel` that remembers every priced step, decode run and transfer, in order, so that the
    run can be re-priced under other coefficients with its schedule held fixed (`schedule_jacobian`).

    Only what a row lasts is remembered, once: not the transfers a step prices inside itself (`step_time` adds
    `transfer_time`; remembered apart, a row's copies were re-priced twice and its calls outlasted it), nor a
    host-tier load beside the steps (`load_time`, ``--offload-loads async``), which no row lasts. Remembered, a
    load as long as the step it started with took that row's place in the walk over the rows, and every later
    row took the call before its own until one outlasted two."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.calls: list[tuple[str, tuple, dict, float]] = []
        self._pricing = 0  # calls in progress: one made inside another is part of it

    def _priced(self, kind: str | None, price, args: tuple, kwargs: dict):
        """``price(*args, **kwargs)``, remembered as a ``kind`` call unless made inside another (or ``kind`` is
        None: a load beside the steps)."""
        self._pricing += 1
        try:
            value = price(*args, **kwargs)
        finally:
            self._pricing -= 1
        if kind is not None and not self._pricing:
            self.calls.append((kind, args, kwargs, value[0] if kind == "run" else value))
        return value

    def step_time(self, *args, **kwargs) -> float:
        return self._priced("step", super().step_time, args, kwargs)

    def decode_run(self, n: int, c0: int, k: int, window: tuple[int, int] | None = None) -> tuple[float, float]:
        last = self.calls[-1] if self.calls else None
        if last is not None and last[0] == "run" and last[1][:2] == (n, c0):
            self.calls.pop()  # a trial run cut short at the next arrival (`fast_forward`): the later call stands
        return self._priced("run", super().decode_run, (n, c0, k), {"window": window})

    def transfer_time(self, *args, **kwargs) -> float:
        return self._priced("transfer", super().transfer_time, args, kwargs)

    def load_time(self, swap_slots: int, swap_transfers: int) -> float:
        return self._priced(None, super().load_time, (swap_slots, swap_transfers), {})


def _price(cost: StepCostModel, call: tuple[str, tuple, dict, float]) -> float:
    kind, args, kwargs, _ = call
    if kind == "run":
        return cost.decode_run(*args, **kwargs)[0]
    return cost.step_time(*args, **kwargs) if kind == "step" else cost.transfer_time(*args, **kwargs)


MOVED = ("swap_slots", "swap_blocks", "copy_slots", "page_maps", "reload_slots")
"""Step columns of what a row of no steps that still moved blocks priced: one transfer call
(`engine.transfer_time_of`, a step that swapped everything running out), which such a row lasts at least."""


def row_calls(steps: pd.DataFrame, calls: list) -> list[list]:
    """The calls each row of ``steps`` priced (`RecordingStepCost.calls`, in order): a busy row the calls that add
    up to its duration, a row of no steps that still moved blocks (`MOVED`) its one transfer, any other row none.
    The calls carry no row, so they are dealt out by duration: which is why a call no row lasts must not be
    remembered."""
    busy = steps["num_steps"].to_numpy() > 0
    moved = ~busy & (steps[list(MOVED)].to_numpy() > 0).any(axis=1)
    duration = steps["duration_s"].to_numpy()
    rows: list[list] = [[] for _ in range(len(steps))]
    i = 0
    for r in np.flatnonzero(busy | moved):
        total = 0.0
        while i < len(calls) and total < duration[r] * (1 - 1e-9):
            total += calls[i][3]
            rows[r].append(calls[i])
            i += 1
            if not busy[r]:
                break
    return rows


def schedule_jacobian(steps: pd.DataFrame, calls: list, perturbed: list[StepCostModel], h: float,
                      requests: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """d(TTFT)/dx and d(decode time)/dx of every request (rows) for each perturbed coefficient (columns;
    forward differences of step ``h`` in x), with the simulated schedule held fixed.

    Every first token and finish lands at the end of a busy row. A request's decode time is the sum of the
    rows from its first token to its finish, so it moves by their moves. Its TTFT is the rest of the row it
    arrived in plus the rows up to its first token; the rest of the arrival row moves in proportion to the
    part of that row left (where in a step a request arrives is chance: earlier rows only shift the step
    boundaries, not the expected wait). A row moves by its priced calls re-priced under the perturbed
    coefficients."""
    duration = steps["duration_s"].to_numpy()
    row_grad = np.zeros((len(steps), len(perturbed)))
    for r, priced in enumerate(row_calls(steps, calls)):
        for call in priced:
            row_grad[r] += [(_price(c, call) - call[3]) / h for c in perturbed]
    cumulative = np.cumsum(row_grad, axis=0)
    ends = steps["time_s"].to_numpy() + duration
    last = len(ends) - 1

    def row_of(times: np.ndarray) -> np.ndarray:
        """The row ending at each time (first token, finish)."""
        return np.clip(np.searchsorted(ends, times - 1e-9 * max(1.0, abs(ends[-1]))), 0, last)

    first = requests["first_token_s"].to_numpy(float)
    finish = requests["finished_s"].to_numpy(float)
    arrival = requests["arrival_s"].to_numpy(float)
    done = np.isfinite(first) & np.isfinite(finish)
    f_row = row_of(np.where(done, first, 0.0))
    e_row = row_of(np.where(done, finish, 0.0))
    a_row = np.clip(np.searchsorted(ends, arrival, side="right"), 0, last)
    left = np.clip((ends[a_row] - arrival) / np.maximum(duration[a_row], 1e-300), 0.0, 1.0)
    d_ttft = cumulative[f_row] - cumulative[a_row] + left[:, None] * row_grad[a_row]
    d_decode = cumulative[e_row] - cumulative[f_row]
    return np.where(done[:, None], d_ttft, 0.0), np.where(done[:, None], d_decode, 0.0)
