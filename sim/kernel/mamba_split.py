"""The scheduler's side of vLLM 0.33's Mamba prefix caching (``mamba_cache_mode="align"``): prefill chunks cut at
block boundaries (``Scheduler._mamba_block_aligned_split``, `allocators.mamba_align.aligned_split`).

vLLM applies the split after the budget and the long-prefill threshold, to running and waiting requests alike. A
running request whose split is 0 is skipped (the loop goes on, ``continue``); a waiting one stops admission for the
step (``break``). A request's shared-prefix junction (``shared_prefix_boundary``) is looked up when it is admitted
(``_get_local_prefix_cache_hit``) and kept while it runs.
"""

from __future__ import annotations

from allocators.mamba_align import aligned_split


class MambaSplit:
    """The block-aligned split for one replica's scheduler; built only for a pool in align mode."""

    __slots__ = ("memory", "block_size", "max_prefill", "junctions", "checkpoints")

    def __init__(self, memory, max_num_batched_tokens: int, long_prefill_token_threshold: int) -> None:
        self.memory = memory
        self.block_size = memory.block_size
        threshold = long_prefill_token_threshold
        self.max_prefill = min(max_num_batched_tokens, threshold) if threshold > 0 else max_num_batched_tokens
        self.junctions: dict[int, int] = {}  # group index -> its junction, from its admission's lookup
        self.checkpoints = memory.mamba_checkpoints()  # False: prompts' chunks stop at their last cacheable boundary

    def begin(self) -> None:
        """A step is being scheduled: states cached before it may be hit now (vLLM's ``new_step_starts``)."""
        self.memory.new_step()

    def look_up(self, group) -> int:
        """A waiting group's prefix hit, its junction remembered for its chunks: the tokens computed before its
        first chunk."""
        memory = self.memory
        junction = memory.shared_prefix_boundary(group)
        if junction:
            self.junctions[group.index] = junction
        else:  # kept only where there is one (an earlier admission's is stale)
            self.junctions.pop(group.index, None)
        return memory.cached_tokens(group.hashes, group.prefill_target)

    def split(self, group, start: int, num_new: int) -> int:
        """The tokens of a chunk of ``num_new`` from ``start`` the split keeps."""
        return aligned_split(start, num_new, prompt=group.prompt, num_tokens=group.prefill_target,
                             junction=self.junctions.get(group.index, 0), block_size=self.block_size,
                             max_prefill=self.max_prefill, checkpoints=self.checkpoints)
