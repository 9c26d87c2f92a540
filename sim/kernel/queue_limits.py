"""vLLM's admission control at its API server (``--max-num-queued-reqs``, ``--max-num-queued-tokens``): a request
is turned away (HTTP 503, so that a client or load balancer may retry elsewhere) when the server is too far behind.

Why: vLLM's request queue is otherwise unbounded, so under overload every request waits and TTFT grows without
limit. The two limits shed load instead: a capacity valve (requests in flight) and a TTFT guard (prompt tokens
not yet past prefill; vLLM suggests ``target TTFT x prefill throughput``). The rule, as vLLM 0.33 and 0.34 check
each request on arrival, before it reaches the engine (``AsyncLLM.check_admission``, ``v1/engine/async_llm.py``):

- ``max_num_queued_reqs``: refused if the requests the server has in flight (sent, their last output not yet
  processed: ``OutputProcessor.get_num_unfinished_requests``; a request fanned out into n samples counts n) plus
  its own n would exceed the limit.
- ``max_num_queued_tokens``: refused if the prompt tokens of the requests in flight that have not had their first
  output back (``is_prefilling``: each sample its whole prompt, whatever the prefix cache held or chunks
  computed, which the server does not see) are already at least the limit; its own tokens are not counted.

kvsim checks each request at its arrival time against the outputs processed by then (a step's at its end), so a
run that skips ahead through decode runs refuses the same requests as one that steps. A refused request is
reported rejected with the reason (``rejected_reasons`` keeps one category per limit); a request the engine could
never run is refused by the engine first and counts against neither limit, as vLLM refuses a prompt past
``max_model_len`` before this check. Modelled for one engine's server and for each independent replica's own
(a router other than ``dp-lb``): a data-parallel deployment's servers count across the ranks they route to
(requests across every server, tokens per server), which is not modelled and is refused (`check_scope`).
"""

from __future__ import annotations

from bisect import bisect_right


def check_scope(config) -> None:
    """Refuse the limits where kvsim does not model the server that applies them: behind vLLM's data-parallel
    front end (``dp-lb``, or a data-parallel size above 1) and in a prefill/decode split (a proxy in front)."""
    if config.max_num_queued_reqs is None and config.max_num_queued_tokens is None:
        return
    if config.router == "dp-lb" or config.data_parallel_size > 1:
        raise ValueError("--max-num-queued-reqs and --max-num-queued-tokens are checked by vLLM's API servers across "
                         "the data-parallel ranks they route to, which kvsim does not model; give them for one engine "
                         "or for independent replicas (--replicas with a router other than dp-lb)")
    if config.prefill_replicas or config.decode_replicas:
        raise ValueError("--max-num-queued-reqs and --max-num-queued-tokens are checked by the API server in front of "
                         "one engine, and a prefill/decode split is reached through a proxy, which kvsim does not "
                         "model")


class QueueLimits:
    """One API server's counts: the sequences and prompt tokens it has sent, and those freed by outputs (when a
    request finished or was rejected, when its first token came back) by time, so that a request arriving at ``t``
    is checked against what the server had processed at ``t``."""

    __slots__ = ("max_reqs", "max_tokens", "sent_seqs", "sent_tokens", "times", "freed_seqs", "freed_tokens",
                 "held", "verdicts")

    def __init__(self, max_reqs: int | None, max_tokens: int | None) -> None:
        self.max_reqs = max_reqs
        self.max_tokens = max_tokens
        self.sent_seqs = self.sent_tokens = 0
        self.times: list[float] = []  # when outputs freed sequences or prompt tokens (nondecreasing)
        self.freed_seqs: list[int] = []  # sequences freed by then, in all
        self.freed_tokens: list[int] = []  # prompt tokens freed by then, in all
        self.held: dict[int, list[int]] = {}  # a sent group's index -> [its sequences, its prompt tokens not freed]
        self.verdicts: dict[int, list] = {}  # a fanned-out request's row -> [its verdict, children still to come]

    @classmethod
    def of(cls, config) -> QueueLimits | None:
        """The server of a run configured with either limit (None: neither given)."""
        if config.max_num_queued_reqs is None and config.max_num_queued_tokens is None:
            return None
        return cls(config.max_num_queued_reqs, config.max_num_queued_tokens)

    def refuses(self, group, t: float, samples: int) -> str | None:
        """Why the server turns ``group`` away at ``t`` (None: it is sent on, and counted). ``samples``: the
        sequences its request occupies (its fanned-out children, or a forked group's sequences); a fanned-out
        request's children share the verdict its first one got."""
        shared = self.verdicts.get(group.row)
        if shared is not None:
            why = shared[0]
            shared[1] -= 1
            if not shared[1]:
                del self.verdicts[group.row]
        else:
            why = self._verdict(t, samples)
            if samples > group.num_seqs:  # its siblings follow
                self.verdicts[group.row] = [why, samples // group.num_seqs - 1]
        if why is None:
            tokens = group.prompt * group.num_seqs
            self.sent_seqs += group.num_seqs
            self.sent_tokens += tokens
            self.held[group.index] = [group.num_seqs, tokens]
        return why

    def _verdict(self, t: float, samples: int) -> str | None:
        i = bisect_right(self.times, t)
        if self.max_reqs is not None:
            in_flight = self.sent_seqs - (self.freed_seqs[i - 1] if i else 0)
            if in_flight + samples > self.max_reqs:
                return (f"turned away by the API server (HTTP 503): {in_flight} requests in flight and {samples} more "
                        f"exceed max_num_queued_reqs {self.max_reqs}")
        if self.max_tokens is not None:
            queued = self.sent_tokens - (self.freed_tokens[i - 1] if i else 0)
            if queued >= self.max_tokens:
                return (f"turned away by the API server (HTTP 503): {queued} prompt tokens awaiting their first "
                        f"tokens reach max_num_queued_tokens {self.max_tokens}")
        return None

    def first_token(self, group, t: float) -> None:
        """``group``'s first token came back at ``t``: its prompt is past prefill."""
        held = self.held.get(group.index)
        if held is not None and held[1]:
            self._free(t, 0, held[1])
            held[1] = 0

    def left(self, group, t: float) -> None:
        """``group`` finished (or was rejected) at ``t``: its sequences are out of flight."""
        held = self.held.pop(group.index, None)
        if held is not None:
            self._free(t, *held)

    def _free(self, t: float, seqs: int, tokens: int) -> None:
        times = self.times
        if times and t < times[-1]:
            raise RuntimeError(f"an output processed at {t!r} s after one at {times[-1]!r} s")
        if times and times[-1] == t:
            self.freed_seqs[-1] += seqs
            self.freed_tokens[-1] += tokens
            return
        times.append(t)
        self.freed_seqs.append((self.freed_seqs[-1] if self.freed_seqs else 0) + seqs)
        self.freed_tokens.append((self.freed_tokens[-1] if self.freed_tokens else 0) + tokens)
