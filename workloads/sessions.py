"""Multi-turn sessions: the canonical columns, their rules, and the links from one turn to the next.

A session is a conversation: turn ``k + 1``'s prompt is turn ``k``'s prompt, turn ``k``'s output and a new user
message. Three canonical columns describe it:

- ``session_id``: the conversation (blank: the row is no session's turn);
- ``turn``: 0 for the first turn, then 1, 2, ... in file order;
- ``think_time_s``: the user's think time between turn ``k - 1``'s end and turn ``k``'s arrival (closed loop:
  the simulator releases the turn only when the previous one has finished). Blank: the turn arrives at its own
  ``arrival_time_s`` (an open-loop, recorded conversation). A first turn always arrives at ``arrival_time_s``.

Prefix identity follows the conversation: every turn is a prefix of the session's one token stream, so block
``j`` of any turn (prompt *and* generated tokens) is identified by its session and its end token
(`workloads.request.Request.block_hashes`), and the next turn hits everything the previous one computed.
"""

from __future__ import annotations

import numpy as np

from workloads.validation import MAX_ARRIVAL_S, PAST_CLOCK

NONE = -1
"""No session (as `workloads.workload.NONE`, which imports this module)."""
SESSION_RULES: tuple[tuple[str, str], ...] = (
    ("session_id", "must be >= 0"),
    ("turn", "must be >= 0"),
    ("turn", "given without session_id"),
    ("think_time_s", "given without session_id"),
    ("think_time_s", "must be finite and >= 0"),
    ("think_time_s", PAST_CLOCK),
    ("think_time_s", "given on a session's first turn (turn 0 arrives at arrival_time_s)"),
    ("prefix_hashes", "given on a session turn, whose identity is its session (a shared system prompt is "
                      "prefix_group and prefix_len)"),
    ("turn", "refers to a missing earlier turn (no turn - 1 of its session_id in an earlier row)"),
    ("turn", "repeats an earlier row's session_id and turn"),
    ("prompt_tokens", "shorter than the previous turn's prompt_tokens + output_tokens"),
    ("prefix_group", "differs from the previous turn's prefix_group or prefix_len (a session's turns extend one "
                     "token stream, which starts with the same system prompt in every turn)"),
)
"""``(field, problem)`` of each session rule, in the order a row's first failing rule is reported."""
_MISSING, _REPEAT, _SHORT, _PREFIX = 8, 9, 10, 11
PREFIX_CHANGED = SESSION_RULES[_PREFIX][1]
"""A turn's system prompt unlike its previous turn's (its own value may be blank, so the reader does not show it)."""


def session_reasons(session: np.ndarray, turn: np.ndarray, think: np.ndarray, prompt: np.ndarray,
                    output: np.ndarray, hash_counts: np.ndarray | int = 0,
                    candidates: np.ndarray | None = None,
                    prefix: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the index into `SESSION_RULES` of its first broken rule (-1: none), and the row of its previous
    turn (-1: none). ``session`` holds `NONE` for no session, ``think`` NaN for none; ``hash_counts``: prefix
    hashes per row; ``prefix``: each row's ``prefix_group`` (`NONE`: none) and ``prefix_len``, checked equal to
    its previous turn's when given (a turn naming its system prompt only on turn 0 would share no block with
    it). Only ``candidates`` rows (default all) are checked; the others count as absent, so a turn after a
    dropped turn is itself bad."""
    rows = len(session)
    reason = np.full(rows, -1, np.int64)
    previous = np.full(rows, -1, np.int64)
    if candidates is None:
        candidates = np.ones(rows, bool)
    lone, given = session <= NONE, ~np.isnan(think)
    with np.errstate(invalid="ignore"):
        masks = [session < NONE, turn < 0, lone & (turn != 0), lone & given, given & ~((think >= 0) & (think < np.inf)),
                 think > MAX_ARRIVAL_S, given & (turn == 0), ~lone & (hash_counts > 0)]
    for k, mask in enumerate(masks):
        reason[candidates & (reason < 0) & mask] = k
    seen: dict[tuple[int, int], int] = {}
    rows_to_link = np.flatnonzero(candidates & (reason < 0) & ~lone)
    for i, s, k in zip(rows_to_link.tolist(), session[rows_to_link].tolist(), turn[rows_to_link].tolist(),
                       strict=True):
        if (s, k) in seen:
            reason[i] = _REPEAT
            continue
        if k > 0:
            p = seen.get((s, k - 1))
            if p is None:
                reason[i] = _MISSING
                continue
            if prompt[i] < prompt[p] + output[p]:
                reason[i] = _SHORT
                continue
            if prefix is not None and (prefix[0][i] != prefix[0][p] or prefix[1][i] != prefix[1][p]):
                reason[i] = _PREFIX
                continue
            previous[i] = p
        seen[(s, k)] = i
    return reason, previous


def closed_loop_turns(workload) -> tuple[np.ndarray, np.ndarray]:
    """``(next_turn, released)``: per row, the row of its next turn when that turn waits for it (a think time
    is given; -1 otherwise), and whether the row itself is released by its previous turn's end."""
    size = len(workload)
    next_turn = np.full(size, -1, np.int64)
    released = np.zeros(size, bool)
    if not workload.has_sessions:
        return next_turn, released
    _, previous = session_reasons(workload.session_id, workload.turn, workload.think_time_s,
                                  workload.prompt_tokens, workload.output_tokens)
    waits = (previous >= 0) & ~np.isnan(workload.think_time_s)
    next_turn[previous[waits]] = np.flatnonzero(waits)
    released[waits] = True
    return next_turn, released


def session_reuse(workload) -> int:
    """Prompt tokens a turn repeats from its session's previous turn (its prompt and output), summed: the
    reuse an unbounded cache could reach across turns."""
    _, previous = session_reasons(workload.session_id, workload.turn, workload.think_time_s,
                                  workload.prompt_tokens, workload.output_tokens)
    linked = previous[previous >= 0]
    return int((workload.prompt_tokens[linked] + workload.output_tokens[linked]).sum())
