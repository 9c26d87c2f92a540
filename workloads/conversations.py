"""Multi-turn conversations for the generator: later turns extend earlier ones, as sessions.

Turn k+1's prompt is turn k's prompt, turn k's output and a new user message. Each conversation is a session
(`workloads.sessions`: ``session_id`` and ``turn`` columns), so every turn, generated tokens included, is a
prefix of the conversation's one token stream and the next turn finds it in a prefix cache. A shared system
prompt of ``sys_len`` tokens (``prefix_group`` 0) opens every conversation that has it.

Two ways to place turns in time:

- open loop (`build_conversations`, ``turn_gap_s``): turns are assigned to the arrival process's times
  greedily so it keeps its rate: an arrival continues the conversation that has waited longest, if one has
  waited at least ``turn_gap_s`` since its last turn arrived, and otherwise starts a new conversation;
- closed loop per session (`build_sessions`, ``think_time_s``): the arrival process's times start sessions,
  and each later turn arrives ``think_time_s`` after the previous turn ends (the simulator releases it).

A conversation ends after ``turns`` turns, or earlier if the next turn would exceed ``max_total`` tokens, or its
prompt `MAX_TOKENS` (what a trace row may hold: without a cap, turns of 6e8-token messages made prompts of 1.2e9
tokens, which `Workload` and the readers refuse).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass

import numpy as np

from workloads.validation import MAX_TOKENS


@dataclass(frozen=True)
class Conversations:
    """Per request: its prompt (context so far plus its message), session, turn, and whether its session
    opens with the system prompt; ``times`` are the arrival times (a closed-loop turn: its session's start)."""

    prompt_tokens: np.ndarray
    session_id: np.ndarray
    turn: np.ndarray
    has_system: np.ndarray
    times: np.ndarray
    cut_short: int = 0
    """Open loop: conversations still waiting for their next turn when the arrivals ran out."""


def build_conversations(times: np.ndarray, message: np.ndarray, output: np.ndarray, has_sys: np.ndarray, *,
                        sys_len: int, turns: int, turn_gap_s: float, max_total: int | None) -> Conversations:
    """Group open-loop requests into conversations (module docstring); ``message`` is each turn's new text."""
    count = len(times)
    conv = np.zeros(count, np.int64)
    ready: deque[tuple[float, int]] = deque()
    state = _Growth(message, output, has_sys, sys_len, max_total)
    t_list = times.tolist()
    for i in range(count):
        c = -1
        if ready and ready[0][0] <= t_list[i]:
            _, c = ready.popleft()
        conv[i] = c = state.add(i, c)
        if state.turns_done[c] < turns:
            ready.append((t_list[i] + turn_gap_s, c))
    return dataclasses.replace(state.result(conv, times), cut_short=len(ready))


def build_sessions(times: np.ndarray, message: np.ndarray, output: np.ndarray, has_sys: np.ndarray, *,
                   sys_len: int, turns: int, max_total: int | None) -> Conversations:
    """Closed-loop sessions (module docstring): consecutive requests are a session's turns; session ``s``
    starts at ``times[s]``."""
    count = len(times)
    conv = np.zeros(count, np.int64)
    state = _Growth(message, output, has_sys, sys_len, max_total)
    c = -1
    for i in range(count):
        keep = c >= 0 and state.turns_done[c] < turns
        conv[i] = c = state.add(i, c if keep else -1)
    return state.result(conv, np.asarray(times)[conv])


class _Growth:
    """Each conversation's context as turns are added to it."""

    def __init__(self, message: np.ndarray, output: np.ndarray, has_sys: np.ndarray, sys_len: int,
                 max_total: int | None) -> None:
        self.msg, self.out, self.sys = message.tolist(), output.tolist(), has_sys.tolist()
        self.sys_len, self.max_total = sys_len, max_total
        self.prompt = np.zeros(len(message), np.int64)
        self.turn = np.zeros(len(message), np.int64)
        self.ctx_after: list[int] = []
        self.turns_done: list[int] = []
        self.conv_sys: list[bool] = []

    def add(self, i: int, c: int) -> int:
        """Request ``i`` as the next turn of conversation ``c`` (-1, or a turn past the cap: a new one)."""
        if c >= 0:
            ctx = self.ctx_after[c] + self.msg[i]
            if ctx > MAX_TOKENS or (self.max_total is not None and ctx + self.out[i] > self.max_total):
                c = -1
        if c < 0:
            c = len(self.ctx_after)
            self.ctx_after.append(0)
            self.turns_done.append(0)
            self.conv_sys.append(self.sys[i])
            ctx = self.msg[i] + (self.sys_len if self.sys[i] else 0)
        self.prompt[i], self.turn[i] = ctx, self.turns_done[c]
        self.ctx_after[c] = ctx + self.out[i]
        self.turns_done[c] += 1
        return c

    def result(self, conv: np.ndarray, times: np.ndarray) -> Conversations:
        return Conversations(self.prompt, conv, self.turn, np.array(self.conv_sys, bool)[conv], times)
