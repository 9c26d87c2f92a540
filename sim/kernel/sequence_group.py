"""`SequenceGroup`: one request inside the engine, from arrival to finish, with its sequences.

A request runs as one sequence until its prompt is prefilled, then as ``n`` parallel samples or ``beam_width``
beams forked from that prompt. The group is the unit the scheduler admits, preempts and frees (vLLM's
all-or-nothing rule); its sequences are the allocator's units. Prefill progress is counted in tokens so
chunked prefill and recompute after preemption are the same mechanism::

    prefill_target = prompt (+ every sequence's generated tokens after a recompute preemption)
    |<- cached (prefix hit) ->|<- prefilled in chunks, step by step ->|   then decode, one token a step
"""

from __future__ import annotations

WAITING, RUNNING, SWAPPED, FINISHED, REJECTED, LOADING, LOADED = range(7)
"""LOADING: placed, its host-tier hits being loaded beside the steps (``--offload-loads async``); LOADED: loaded,
back in the queue to be scheduled with its blocks held."""
NOT_DECODING = -(1 << 62)
"""``base`` of a group that is not decoding: no step index, as a decoding group's ``base`` may be negative (accepted
speculative drafts move it back, `sim.kernel.spec_decode`)."""


class SequenceGroup:
    """A request's live state. ``index`` is its position in the workload (results are stored by it)."""

    __slots__ = (
        "index", "row", "sibling_order", "request_id", "prefix_group", "prefix_blocks", "own_from", "priority", "arrival_s", "prompt",
        "output", "num_seqs", "beam", "max_total", "hashes",
        "state", "seq_ids", "generated", "prefill_target", "prefill_done", "admitted_s", "first_token_s",
        "preemptions", "epoch", "forked", "base",
    )

    def __init__(self, index: int, request_id: int, arrival_s: float, prompt: int, output: int, *, n: int = 1,
                 beam_width: int = 1, max_total: int | None = None, hashes: tuple[int, ...] = (),
                 prefix_group: int | None = None, prefix_blocks: int | None = None, priority: int = 0,
                 own_from: int | None = None, row: int | None = None, child: int | None = None) -> None:
        self.index = index
        self.row = index if row is None else row  # the workload row it came from (a fanned-out child: its request's)
        # a fanned-out ``child``'s place among its siblings where vLLM breaks ties by request id: its front end
        # names child k "k_<parent id>", so the ids sort as the strings "k_" ("10_" before "1_")
        self.sibling_order = "" if child is None else f"{child}_"
        self.prefix_group = prefix_group
        self.prefix_blocks = len(hashes) if prefix_blocks is None else prefix_blocks  # shared-prefix hashes
        self.own_from = len(hashes) if own_from is None else own_from  # hashes from here on: this request's own
        self.priority = priority
        self.request_id = request_id
        self.arrival_s = arrival_s
        self.prompt = prompt
        self.output = output
        self.num_seqs = n if n > 1 else beam_width
        self.beam = beam_width > 1
        self.max_total = max_total
        self.hashes = hashes
        self.state = WAITING
        self.seq_ids: list[int] = []
        self.generated = 0  # tokens each sequence has produced
        self.prefill_target = prompt
        self.prefill_done = 0
        self.admitted_s = -1.0
        self.first_token_s = -1.0
        self.preemptions = 0
        self.epoch = 0  # bumped at every admission and preemption: stale heap entries compare unequal
        self.forked = False  # its n sequences exist (forked at the first token); re-placed as n after preemption
        self.base = NOT_DECODING  # while decoding: the step index s.t. tokens generated before step G are G - base

    @property
    def total_tokens(self) -> int:
        """Prompt plus output: what ``max_model_len`` bounds."""
        return self.prompt + self.output

    @property
    def final_tokens(self) -> int:
        """Slots each sequence holds when it finishes (the waste accounting's ``final_tokens``): as in vLLM
        v1, a step allocates slots only for the tokens it computes, so the last sampled token never gets one."""
        return self.prompt + self.output - 1

    @property
    def decoding(self) -> bool:
        return self.base != NOT_DECODING

    @property
    def prefilling(self) -> bool:
        return self.prefill_done < self.prefill_target

    @property
    def prefill_remaining(self) -> int:
        return self.prefill_target - self.prefill_done

    @property
    def remaining_output(self) -> int:
        return self.output - self.generated

    def __repr__(self) -> str:
        return (f"SequenceGroup(request={self.request_id}, state={self.state}, seqs={self.seq_ids}, "
                f"prefill={self.prefill_done}/{self.prefill_target}, generated={self.generated}/{self.output})")
