"""vLLM's prefix-cache counters, counted as vLLM 0.33 counts them, for a run's summary to be read beside a real
server's ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` and its logged "Prefix cache hit rate".

vLLM records a lookup when the scheduler admits a request (``Scheduler.schedule``, once ``allocate_slots`` has
succeeded), not at every try: a request that waits, or does not fit and is looked up again next step, counts
once. A lookup counts the request's tokens then
(``request.num_tokens``: its prompt, plus the tokens it had generated when it comes back from a preemption to be
recomputed) and the tokens found in GPU memory (``num_new_local_computed_tokens``); a request preempted before
counts apart (``PrefixCacheStats.preempted_queries`` / ``preempted_hits``, which 0.33 exports neither as a counter
nor in the log). Hits loaded by a KV connector (kvsim's host tier, vLLM's ``OffloadingConnector``) are not
``prefix_cache_hits``: the connector has its own stats, ``vllm:external_prefix_cache_queries`` (the tokens the
GPU did not hold) and ``vllm:external_prefix_cache_hits``. Nothing is recorded without prefix caching, nor when a
request swapped out comes back (vLLM v1 has no swap), nor when one whose host hits were loaded is scheduled (it
was counted when it was admitted to load them).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PrefixCacheStats:
    """One cache's counters (vLLM's ``vllm.v1.metrics.stats.PrefixCacheStats``), in tokens."""

    queries: int = 0
    hits: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0

    def record(self, num_tokens: int, num_hits: int, preempted: bool) -> None:
        """One admission's lookup of ``num_tokens`` tokens that found ``num_hits``; ``preempted``: the request
        had been preempted before."""
        if preempted:
            self.preempted_queries += num_tokens
            self.preempted_hits += num_hits
        else:
            self.queries += num_tokens
            self.hits += num_hits

    def __add__(self, other: PrefixCacheStats) -> PrefixCacheStats:
        return PrefixCacheStats(self.queries + other.queries, self.hits + other.hits,
                                self.preempted_queries + other.preempted_queries,
                                self.preempted_hits + other.preempted_hits)


def summary_keys(local: PrefixCacheStats, external: PrefixCacheStats) -> dict[str, int | float]:
    """The summary's keys, with vLLM's names: ``prefix_cache_hit_rate`` is hits over queries as vLLM's logger
    computes it (0 before any query), over the whole run where the logger's covers its last 1,000 requests."""
    return {"prefix_cache_queries": local.queries, "prefix_cache_hits": local.hits,
            "prefix_cache_hit_rate": local.hits / local.queries if local.queries else 0.0,
            "prefix_cache_preempted_queries": local.preempted_queries,
            "prefix_cache_preempted_hits": local.preempted_hits,
            "external_prefix_cache_queries": external.queries, "external_prefix_cache_hits": external.hits}
