"""The request record: everything the simulator needs to know about one request, and nothing more.

Prefix identity is either a list of block hashes at the trace's own granularity (``prefix_hashes``, each
covering ``prefix_hash_tokens`` prompt tokens, as Mooncake's 512-token ``hash_ids``), or a shared-prefix group
(``prefix_group``, its first ``prefix_len`` prompt tokens identical across the group, e.g. a system prompt).
`Request.block_hashes` turns either into chained hashes of full blocks at the simulator's block size.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a workload. Token counts are per sequence; ``n`` parallel samples or a beam of
    ``beam_width`` share the prompt and each produce ``output_tokens``."""

    id: int
    arrival_time_s: float
    prompt_tokens: int
    output_tokens: int
    max_tokens: int | None = None
    n: int = 1
    beam_width: int = 1
    prefix_hashes: tuple[int, ...] = ()
    prefix_hash_tokens: int = 512
    prefix_group: int | None = None
    prefix_len: int = 0

    def __post_init__(self) -> None:
        if self.prompt_tokens <= 0:
            raise ValueError(f"request {self.id}: prompt_tokens must be positive, got {self.prompt_tokens}")
        if self.output_tokens <= 0:
            raise ValueError(f"request {self.id}: output_tokens must be positive, got {self.output_tokens}")
        if self.max_tokens is not None and self.max_tokens < self.output_tokens:
            raise ValueError(f"request {self.id}: max_tokens {self.max_tokens} < output_tokens {self.output_tokens}")
        if self.n < 1 or self.beam_width < 1:
            raise ValueError(f"request {self.id}: n and beam_width must be >= 1")
        if self.n > 1 and self.beam_width > 1:
            raise ValueError(f"request {self.id}: use either n (parallel sampling) or beam_width, not both")
        if not 0 <= self.prefix_len <= self.prompt_tokens:
            raise ValueError(f"request {self.id}: prefix_len must be within the prompt")

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens

    @property
    def num_seqs(self) -> int:
        """Sequences the request runs as once decoding starts (samples or beams)."""
        return max(self.n, self.beam_width)
