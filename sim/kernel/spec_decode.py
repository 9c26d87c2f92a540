"""vLLM v1's speculative decoding with the ``ngram`` drafter: what it does to the schedule and the KV cache.

Read from vLLM 0.33 (``vllm/v1/core/sched/scheduler.py``, ``vllm/v1/core/kv_cache_manager.py``,
``vllm/config/speculative.py``, ``vllm/config/vllm.py``):

- After every step that samples a token for a request (its prefill's last chunk, or a decode), the drafter
  proposes ``num_speculative_tokens`` draft tokens for it (``update_draft_token_ids``; ngram caps them at
  ``max_model_len`` less the request's tokens). The request's next decode step feeds its last sampled token
  and the drafts: ``1 + drafts`` tokens of the step's token budget, capped by what is left of the budget and by
  ``max_model_len - num_computed_tokens - 1``; drafts cut by the budget are dropped.
- ``allocate_slots`` gives that step slots for all ``1 + drafts`` tokens (``num_lookahead_tokens`` is 0 for
  ngram: no drafter KV); only tokens up to ``request.num_tokens`` (no draft) are cached (hashed).
- The verification accepts a prefix of the drafts: ``num_computed_tokens`` goes back by the rejected ones, the
  blocks stay with the request (the next steps fill them), and the request gains ``accepted + 1`` tokens
  (trimmed at ``max_tokens``: a finishing request computed ``prompt + output - 1`` tokens, whatever it accepted).
  With drafts on, the blocks full up to ``num_computed_tokens`` are cached right after the step
  (``update_from_output``'s ``cache_blocks``), which kvsim's preemption and finish paths do too (a request tells
  the allocator its tokens before it frees them; the allocator's fast path never crosses a held draft block
  without caching it, `PagedAllocator.grow`).
- A waiting request with one token left to compute (a prefix hit of all but its last token) is padded to
  ``1 + num_speculative_tokens`` tokens when no running prefill is scheduled in the step and either a running
  request is or it has hits (``pad_spec_decode``), with placeholder drafts that are never accepted; if the
  budget left is smaller, admission stops.
- ``max_num_scheduled_tokens`` stays ``max_num_batched_tokens`` and no draft slots are set aside for ngram
  (``max_num_new_slots_for_drafting`` 0).

kvsim's own model, not vLLM's: the drafter always proposes (a real ngram drafter proposes only where the
context repeats a n-gram) and every draft is accepted with probability ``spec_acceptance_rate``, the drafts of
a verification as a prefix up to the first rejection. The draws come from one numpy Generator per request,
seeded from ``(seed, 0x5EC, request index)``, which draws ``num_speculative_tokens`` uniforms at every
verification of real drafts whatever number it verifies, so that they do not depend on the scheduling order
(``tools/vllm_oracle/driver.py`` draws the same ones). No drafter time: ngram runs on the CPU between steps.
"""

from __future__ import annotations

import json

import numpy as np

from sim.kernel.sequence_group import RUNNING, SequenceGroup

METHODS = ("ngram",)
"""Drafting methods modelled: ngram has no drafter model (no drafter KV, no drafter GPU time). EAGLE, MTP and
draft models add KV per token and lookahead slots (``VllmConfig.num_lookahead_tokens``), not modelled."""
KEYS = ("method", "num_speculative_tokens", "model", "prompt_lookup_min", "prompt_lookup_max")
STREAM = 0x5EC  # the acceptance Generators' stream key, apart from every other draw kvsim makes


def parse_speculative_config(text: str) -> int:
    """``--speculative-config``'s JSON (vLLM's engine argument) -> ``num_speculative_tokens``; refuses what is
    not modelled with the reason."""
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--speculative-config must be a JSON object, got {text!r}: {exc}") from None
    if not isinstance(spec, dict):
        raise ValueError(f"--speculative-config must be a JSON object, got {text!r}")
    unknown = sorted(set(spec) - set(KEYS))
    if unknown:
        raise ValueError(f"--speculative-config: {', '.join(unknown)} not modelled (kvsim reads "
                         f"{', '.join(KEYS)})")
    method = spec.get("method") or ("ngram" if spec.get("model") in ("ngram", "[ngram]") else None)
    if method not in METHODS:
        raise ValueError(f"--speculative-config: method {method!r} is not modelled; only 'ngram' (no drafter "
                         "model, so no drafter KV or GPU time): EAGLE, MTP and draft models add KV and lookahead "
                         "slots kvsim does not model")
    k = spec.get("num_speculative_tokens")
    if type(k) is not int or k <= 0:
        raise ValueError(f"--speculative-config: num_speculative_tokens must be a positive integer, got {k!r}")
    for key in ("prompt_lookup_min", "prompt_lookup_max"):
        if key in spec and (type(spec[key]) is not int or spec[key] <= 0):
            raise ValueError(f"--speculative-config: {key} must be a positive integer, got {spec[key]!r}")
    return k


class SpecDecode:
    """The drafts each running request holds, the acceptance draws and vLLM's spec decoding counters."""

    def __init__(self, num_speculative_tokens: int, acceptance_rate: float, seed: int, max_model_len: int) -> None:
        self.k = num_speculative_tokens
        self.p = acceptance_rate
        self.seed = seed
        self.max_model_len = max_model_len
        self.drafts: dict[int, int] = {}  # group index -> drafts its next decode step feeds
        self.rngs: dict[int, np.random.Generator] = {}
        self.scheduled: list[tuple[SequenceGroup, int, bool]] = []  # this step's decoders (group, drafts, padded)
        self.tokens = self.pairs = 0  # this step's drafts, and the attention pairs of their queries
        self.num_drafts = self.num_draft_tokens = self.num_accepted_tokens = 0

    def drafts_for(self, group: SequenceGroup, step: int, room: int) -> int:
        """Drafts ``group`` feeds this step: those proposed after its last step, capped by ``room`` (the budget
        left after its sampled token) and by ``max_model_len - num_computed_tokens - 1``."""
        tokens = group.prompt + step - group.base  # vLLM's request.num_tokens
        return max(0, min(self.drafts.get(group.index, 0), room, self.max_model_len - tokens - 1))

    def pads(self, computed: int) -> bool:
        """Whether a waiting request with one token left to compute after ``computed`` may be padded to a
        verification of ``num_speculative_tokens`` placeholder drafts within ``max_model_len``."""
        return computed + 1 + self.k + 1 <= self.max_model_len

    def schedule(self, group: SequenceGroup, drafts: int, tokens: int, *, padded: bool) -> None:
        """``group``, holding ``tokens`` tokens, feeds its sampled token and ``drafts`` drafts this step
        (``padded``: placeholders, never accepted)."""
        self.scheduled.append((group, drafts, padded))
        self.tokens += drafts
        self.pairs += drafts * tokens + drafts * (drafts + 1) // 2

    def step_figures(self) -> tuple[int, int]:
        """The step's draft tokens and their attention pairs, for the cost model; reset for the next step."""
        figures = self.tokens, self.pairs
        self.tokens = self.pairs = 0
        return figures

    def accept(self, group: SequenceGroup, drafts: int) -> int:
        """Drafts accepted of the ``drafts`` a verification of ``group`` feeds: ``k`` uniforms, a prefix of
        those below the acceptance rate."""
        rng = self.rngs.get(group.index)
        if rng is None:
            rng = self.rngs[group.index] = np.random.default_rng([self.seed, STREAM, group.index])
        below = rng.random(self.k)[:drafts] < self.p
        return int(drafts if below.all() else below.argmin())

    def step_done(self, sched, joiners: list[SequenceGroup]) -> None:
        """The step has run: each verification accepts its drafts (the group gains them: its decode clock moves
        ahead, and it may now finish earlier), and every group that sampled (the ``joiners``, whose prefill it
        ended, and its decoders) gets its next drafts."""
        step, tokens, sampled = sched.step, sched.step_tokens, list(joiners)
        for group, drafts, padded in self.scheduled:
            if group.state != RUNNING or not (padded or group.index in tokens):
                continue
            sampled.append(group)
            if not drafts:  # nothing to verify (drafts cut by the budget or max_model_len)
                continue
            accepted = 0 if padded else self.accept(group, drafts)
            self.num_drafts += 1
            self.num_draft_tokens += drafts
            self.num_accepted_tokens += accepted
            if accepted:
                group.base -= accepted
                for seq_id in group.seq_ids:
                    sched.decode.advance(seq_id, accepted)
                group.epoch += 1
                sched.completions.push(group)
        self.scheduled = []
        for group in sampled:
            if group.state == RUNNING:
                tokens_now = group.prompt + step + 1 - group.base
                self.drafts[group.index] = max(0, min(self.k, self.max_model_len - tokens_now))

    def stop(self, group: SequenceGroup) -> None:
        """A preempted or finished request holds no drafts (vLLM's ``_preempt_request`` clears them)."""
        self.drafts.pop(group.index, None)

    def summary(self) -> dict:
        """vLLM's ``SpecDecodingStats`` over the run, and its logged mean acceptance length."""
        return {"num_speculative_tokens": self.k, "spec_acceptance_rate": self.p,
                "num_drafts": self.num_drafts, "num_draft_tokens": self.num_draft_tokens,
                "num_accepted_tokens": self.num_accepted_tokens,
                "mean_acceptance_length": (1 + self.num_accepted_tokens / self.num_drafts) if self.num_drafts
                else None}


def check_spec_workload(workload) -> None:
    """Refuse what speculative decoding is not modelled with: a row sampled ``n > 1`` times (a fanned-out row's
    children share an index space kvsim has not checked against vLLM; its ``fork`` groups are vLLM v0's), beam
    search (vLLM v1 has none with drafts), and sessions or closed loops (the oracle drives neither)."""
    from sim.kernel.arrivals import releases_arrivals

    reasons = []
    if getattr(workload, "fan_parent", None) is not None or (np.asarray(workload.n) > 1).any():
        reasons.append("rows sampled n > 1 times")
    if (np.asarray(workload.beam_width) > 1).any():
        reasons.append("beam search")
    if workload.has_sessions or releases_arrivals(workload):
        reasons.append("sessions or a closed loop")
    if reasons:
        raise ValueError("--speculative-config is not modelled with " + ", ".join(reasons))
