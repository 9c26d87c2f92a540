"""What one engine step does: the figures the scheduler hands the cost model and the steps table."""

from __future__ import annotations

from dataclasses import dataclass, field

from allocators.base import Copy, PageMap
from sim.kernel.sequence_group import SequenceGroup


@dataclass(slots=True)
class StepPlan:
    """What one step does, for the cost model and the steps table."""

    prefill_tokens: int = 0
    decode_seqs: int = 0
    context_tokens: int = 0
    attention_pairs: int = 0
    window_context: int | None = None  # context_tokens with each sequence clipped to the sliding window (if any)
    window_pairs: int | None = None  # attention_pairs likewise
    copies: int = 0  # copy-on-write copies (blocks, or slabs for contiguous allocators)
    swap_blocks: int = 0  # swap transfers, out and in (blocks, or slabs for contiguous allocators)
    copy_slots: int = 0  # token slots those copies move inside HBM (what the cost model charges)
    swap_slots: int = 0  # token slots the swaps move over PCIe
    page_maps: int = 0  # page sets mapped into virtual ranges (vAttention), charged per driver map call
    reload_blocks: int = 0  # host-tier blocks loaded back over PCIe
    reload_slots: int = 0  # token slots those loads move
    reload_transfers: int = 0  # copy calls those loads take (`Allocator.reload_transfers`), charged as swap-ins
    gpu_hit_tokens: int = 0  # prompt tokens admissions found in GPU memory (prefix cache, shared prefix)
    host_hit_tokens: int = 0  # prompt tokens admissions loaded from the host tier
    preempted: int = 0
    eager_appended: int = 0
    spec_tokens: int = 0  # speculative drafts the step verifies: query tokens besides prefill and decode ones
    draft_seqs: int = 0  # requests a model-based drafter drafts for after the step (its later passes' queries)
    draft_context: int = 0  # the tokens their queries read in the drafter's layers
    lag_offset: int = 0  # slots the decode set's lag misses this step: one per joiner and per deferred decoder,
    # less the prompt tokens held whole and not computed yet (`Scheduler.unfilled_prompt`)
    can_run: bool = False
    chunks: list[tuple[SequenceGroup, int]] = field(default_factory=list)

    @property
    def computes(self) -> bool:
        """Whether the step runs the model: it schedules tokens (vLLM's ``executed``, ``num_executed_steps``)."""
        return bool(self.prefill_tokens or self.decode_seqs)

    def add_copies(self, copies: tuple[Copy | PageMap, ...]) -> None:
        """Charge the copies an allocator call returned (count and the slots they move) and the page sets
        it mapped (`PageMap`)."""
        for c in copies:
            if type(c) is PageMap:
                self.page_maps += c.pages
            else:
                self.copies += 1
                self.copy_slots += c.slots
