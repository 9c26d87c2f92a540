"""Multi-turn conversations: later turns extend earlier ones, and say so with prefix hashes.

Turn k+1's prompt is turn k's prompt, turn k's output and a new user message. Each conversation is one
growing token stream cut into hash units of ``unit`` tokens; unit ``u`` of conversation ``c`` gets the same id
in every turn, so a later turn's leading units repeat an earlier turn's ids and `Request.block_hashes` finds
the shared blocks. A shared system prompt of ``sys_len`` tokens takes the first ``sys_len // unit`` unit ids,
the same in every conversation that has it (its last partial unit is conversation-specific, a small
undercount of sharing).

Turns are assigned to arrivals greedily so the arrival process keeps its rate: an arrival continues the
conversation that has waited longest, if one has waited at least ``turn_gap_s`` since its last turn arrived,
and otherwise starts a new conversation. A conversation ends after ``turns`` turns, or earlier if the next
turn would exceed ``max_total`` tokens.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Conversations:
    prompt_tokens: np.ndarray
    conversation: np.ndarray
    has_system: np.ndarray
    hash_offsets: np.ndarray
    hash_values: np.ndarray


def build_conversations(times: np.ndarray, message: np.ndarray, output: np.ndarray, has_sys: np.ndarray, *,
                        sys_len: int, turns: int, turn_gap_s: float, unit: int,
                        max_total: int | None) -> Conversations:
    """Group requests into conversations (module docstring); ``message`` is each turn's new user text."""
    count = len(times)
    prompt = np.zeros(count, np.int64)
    conv = np.zeros(count, np.int64)
    ctx_after: list[int] = []
    turns_done: list[int] = []
    conv_sys: list[bool] = []
    ready: deque[tuple[float, int]] = deque()
    msg, out, sys_flag, t_list = message.tolist(), output.tolist(), has_sys.tolist(), times.tolist()
    for i in range(count):
        c = -1
        if ready and ready[0][0] <= t_list[i]:
            _, c = ready.popleft()
            ctx = ctx_after[c] + msg[i]
            if max_total is not None and ctx + out[i] > max_total:
                c = -1
        if c < 0:
            c = len(ctx_after)
            ctx_after.append(0)
            turns_done.append(0)
            conv_sys.append(sys_flag[i])
            ctx = msg[i] + (sys_len if sys_flag[i] else 0)
        prompt[i], conv[i] = ctx, c
        ctx_after[c] = ctx + out[i]
        turns_done[c] += 1
        if turns_done[c] < turns:
            ready.append((t_list[i] + turn_gap_s, c))
    system = np.array(conv_sys, bool)
    offsets, values = _unit_ids(prompt, conv, system, sys_len // unit, unit)
    return Conversations(prompt, conv, system[conv], offsets, values)


def _unit_ids(prompt: np.ndarray, conv: np.ndarray, system: np.ndarray, sys_units: int,
              unit: int) -> tuple[np.ndarray, np.ndarray]:
    """Hash-unit ids per request, vectorised: shared system units first, then the conversation's own."""
    counts = -(-prompt // unit)
    units_per_conv = np.zeros(len(system), np.int64)
    np.maximum.at(units_per_conv, conv, counts)
    base = sys_units + np.concatenate([[0], np.cumsum(units_per_conv)[:-1]]).astype(np.int64)
    offsets = np.zeros(len(prompt) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    row = np.repeat(np.arange(len(prompt)), counts)
    u = np.arange(offsets[-1], dtype=np.int64) - offsets[:-1][row]
    row_conv = conv[row]
    shared = system[row_conv] & (u < sys_units)
    return offsets, np.where(shared, u, base[row_conv] + u)
