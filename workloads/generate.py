"""`generate`: a synthetic workload from a length distribution, an arrival process and sharing options.

Randomness comes from one seed split into independent streams (arrivals, lengths, sharing) with
``numpy.random.SeedSequence.spawn``, so the same seed gives the same requests byte for byte, and turning on a
sharing option does not change the lengths or arrival times drawn. Everything is vectorised except the
assignment of multi-turn conversations (`workloads.conversations`).

Sharing options:

- ``n`` (parallel sampling) or ``beam_width``, the same for every request;
- a shared system prompt of ``system_prompt_len`` tokens, prepended to the prompt of a random
  ``system_prompt_frac`` of requests (``prefix_group`` 0 with ``prefix_len`` = its length); the lengths cap
  ``max_total`` holds for the whole request: a request given the system prompt has its drawn prompt
  shortened (to 1 token at least), then its output, so that system prompt + prompt + output fit the cap;
  without a cap its drawn prompt is shortened so that system prompt + prompt stay within `MAX_TOKENS`, the
  most prompt tokens a trace row may hold (so what ``generate`` writes reads back), which is why
  ``system_prompt_len`` must be below it;
- ``turns`` > 1: multi-turn conversations whose later turns extend earlier ones, as sessions
  (`workloads.conversations`): open loop, a turn at least ``turn_gap_s`` after the previous turn arrived, or,
  with ``think_time_s``, closed loop per session: a turn ``think_time_s`` after the previous turn ends.
"""

from __future__ import annotations

import warnings

import numpy as np

from workloads.arrivals import ArrivalProcess, closed_loop_of
from workloads.conversations import build_conversations, build_sessions
from workloads.errors import TraceError, TraceWarning, check_seed, real_number, show_value, whole_number
from workloads.lengths import Empirical, LengthDistribution
from workloads.validation import BOTH_N_AND_BEAM, MAX_ARRIVAL_S, MAX_SAMPLES, MAX_TOKENS
from workloads.workload import NONE, Workload

MAX_REQUESTS = 10**8
"""Most requests one call generates: about 13 GB of columns and hours of simulation. A count past it (a typo, or
a paper preset's hour at a rate of 1e30) failed inside numpy, or ran the machine out of memory."""
DEFAULT_TURN_GAP_S = 30.0
"""Least time between a conversation's turns, arrival to arrival, when neither a gap nor a think time is given."""


def generate(lengths: LengthDistribution, arrivals: ArrivalProcess, num_requests: int,
             seed: int = 0, *, n: int = 1, beam_width: int = 1, system_prompt_len: int = 0,
             system_prompt_frac: float = 0.0, turns: int = 1, turn_gap_s: float | None = None,
             think_time_s: float | None = None, name: str = "synthetic", source: str | None = None) -> Workload:
    """``num_requests`` synthetic requests (module docstring), from the distribution and process objects
    (`workloads.named.generate` takes their spec strings)."""
    num_requests, n, beam_width, system_prompt_len, turns = (
        whole_number("generate", arg, value, low, high) for arg, value, low, high in (
            ("num_requests", num_requests, 1, MAX_REQUESTS), ("n", n, 1, MAX_SAMPLES),
            ("beam_width", beam_width, 1, MAX_SAMPLES), ("system_prompt_len", system_prompt_len, 0, None),
            ("turns", turns, 1, None)))
    seed = check_seed("generate", seed)
    system_prompt_frac = real_number("generate", "system_prompt_frac", system_prompt_frac)
    turn_gap_s, think_time_s = (None if value is None else real_number("generate", arg, value)
                                for arg, value in (("turn_gap_s", turn_gap_s), ("think_time_s", think_time_s)))
    _check(n, beam_width, system_prompt_len, system_prompt_frac, turns, turn_gap_s, think_time_s)
    dist, process = lengths, arrivals
    closed = closed_loop_of(process)
    if closed is not None and turns > 1:
        raise TraceError("multi-turn conversations need open-loop arrivals (turn gaps are in time)")
    arrival_rng, length_rng, share_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    trace = dist.workload if isinstance(dist, Empirical) else None
    times = process.times(arrival_rng, num_requests, trace)
    prompt, output = dist.sample(length_rng, num_requests)
    has_sys = np.zeros(num_requests, bool)
    if system_prompt_len > 0 and system_prompt_frac > 0:
        has_sys = share_rng.random(num_requests) < system_prompt_frac
        prompt, output = _fit_system_prompt(prompt, output, has_sys, system_prompt_len, dist.max_total)
    columns: dict[str, np.ndarray] = {}
    if turns > 1:
        shape = {"sys_len": system_prompt_len, "turns": turns, "max_total": dist.max_total}
        if think_time_s is None:
            gap = DEFAULT_TURN_GAP_S if turn_gap_s is None else turn_gap_s
            convs = build_conversations(times, prompt, output, has_sys, turn_gap_s=gap, **shape)
            _warn_short_conversations(convs, turns, gap)
        else:
            convs = build_sessions(times, prompt, output, has_sys, **shape)
        prompt, has_sys, times = convs.prompt_tokens, convs.has_system, convs.times
        think = np.where(convs.turn > 0, np.nan if think_time_s is None else think_time_s, np.nan)
        columns = {"session_id": convs.session_id, "turn": convs.turn, "think_time_s": think}
    else:
        prompt = prompt + np.where(has_sys, system_prompt_len, 0)
    if source is None:
        source = f"synthetic: lengths {lengths}, arrivals {arrivals}, seed {seed}"
    return Workload(
        arrival_time_s=times,
        prompt_tokens=prompt,
        output_tokens=output,
        n=np.full(num_requests, n, np.int64),
        beam_width=np.full(num_requests, beam_width, np.int64),
        prefix_group=np.where(has_sys, 0, NONE),
        prefix_len=np.where(has_sys, system_prompt_len, 0),
        name=name,
        source=source,
        closed_loop=closed,
        **columns,
    )


def _warn_short_conversations(convs, turns: int, gap: float) -> None:
    """A warning when open-loop conversations average well under ``turns`` turns because the arrivals ran out:
    a turn waits ``gap`` seconds for a later arrival, so the arrivals of the first ``gap`` seconds all start
    conversations and those still waiting at the end stop short (the help promised fewer turns only where
    max_total cuts them, which is not warned about)."""
    conversations = len(np.unique(convs.session_id))
    mean = len(convs.session_id) / conversations
    if mean < turns / 2 and convs.cut_short > 0.2 * conversations:
        span = float(convs.times[-1] - convs.times[0]) if len(convs.times) else 0.0
        warnings.warn(TraceWarning(
            f"--turns {turns}: the conversations average {mean:.1f} turns, {convs.cut_short} of {conversations} "
            f"still waiting for their next turn (--turn-gap-s {gap:g} s) when the {span:.0f} s of arrivals end "
            "(more requests, a higher rate or a shorter gap give more turns)"), stacklevel=3)


def _fit_system_prompt(prompt: np.ndarray, output: np.ndarray, has_sys: np.ndarray, sys_len: int,
                       max_total: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Shorten the drawn prompt (at least 1 token left), then the output, of requests that get the system
    prompt so that the cap holds for the final request; other requests keep their draws. Without a cap the
    prompt alone is held to `MAX_TOKENS` (system prompt + drawn prompt): a system prompt of 1e9 tokens made
    prompts of 1e9 + 10 tokens, which a trace row may not hold and `Workload` refuses."""
    if not has_sys.any():
        return prompt, output
    if max_total is None:
        return np.where(has_sys, np.minimum(prompt, MAX_TOKENS - sys_len), prompt), output
    room = max_total - sys_len  # for the drawn prompt and the output together
    if room < 2:
        raise TraceError(f"generate: system_prompt_len {sys_len} leaves no room for a prompt and an output "
                         f"token under max_total {max_total}")
    fitted_prompt = np.clip(room - output, 1, prompt)
    fitted_output = np.minimum(output, room - fitted_prompt)
    return np.where(has_sys, fitted_prompt, prompt), np.where(has_sys, fitted_output, output)


def _check(n: int, beam_width: int, sys_len: int, sys_frac: float, turns: int, turn_gap_s: float | None,
           think_time_s: float | None) -> None:
    """The rules between options, once each is a number of its kind (`whole_number`, `real_number`)."""
    if sys_len >= MAX_TOKENS:  # a request's prompt is the system prompt and at least 1 token of its own
        raise TraceError(f"generate: system_prompt_len must be < {MAX_TOKENS:g}, the most prompt tokens a trace "
                         f"row may hold, to leave a token of the request's own (got {show_value(sys_len)})")
    problems = {
        BOTH_N_AND_BEAM: n > 1 and beam_width > 1,
        "system_prompt_frac must be within [0, 1]": not 0 <= sys_frac <= 1,
        # within the clock's range (`MAX_ARRIVAL_S`): an infinite gap gave conversations of one turn each
        f"turn_gap_s must be >= 0 and <= {MAX_ARRIVAL_S:g}":
            turn_gap_s is not None and not 0 <= turn_gap_s <= MAX_ARRIVAL_S,
        f"think_time_s must be >= 0 and <= {MAX_ARRIVAL_S:g}":
            think_time_s is not None and not 0 <= think_time_s <= MAX_ARRIVAL_S,
        "think_time_s applies to multi-turn sessions (turns > 1)": think_time_s is not None and turns < 2,
        # a setting that would change nothing is refused, not ignored: the user meant something by it
        "turn_gap_s applies to open-loop multi-turn conversations (turns > 1, no think_time_s)":
            turn_gap_s is not None and (turns < 2 or think_time_s is not None),
        "system_prompt_len needs system_prompt_frac > 0 (the share of requests that carry it; 1: all)":
            sys_len > 0 and sys_frac == 0,
        "system_prompt_frac needs system_prompt_len > 0 (the tokens of the shared system prompt)":
            sys_frac > 0 and sys_len == 0,
    }
    for message, bad in problems.items():
        if bad:
            raise TraceError(f"generate: {message}")
