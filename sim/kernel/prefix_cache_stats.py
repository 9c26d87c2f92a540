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

The counters cover the whole run, as the Prometheus counters do; the rate vLLM *logs* does not: its
``LoggingStatLogger`` feeds each step's stats (``Scheduler.make_stats``, reset every step) to a
``CachingMetrics(max_recent_requests=1000)`` (``vllm/v1/metrics/stats.py``, ``loggers.py``), which keeps only
the most recent steps holding at most 1,000 fresh requests (`LoggedWindow`). A run's last log line therefore
reads the last ~1,000 admissions, which a run whose cache warms up (or thrashes) late reads differently from
the whole run's rate.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

MAX_RECENT_REQUESTS = 1000
"""``CachingMetrics.__init__``'s default, which ``LoggingStatLogger`` uses (vLLM 0.33, "TODO: Make the interval
configurable"): the requests the logged "Prefix cache hit rate" covers."""


@dataclass
class LoggedWindow:
    """vLLM's ``CachingMetrics``: per step with fresh lookups ``[step, requests, queries, hits]``, oldest first,
    the oldest steps dropped while more than one is held and they hold over ``MAX_RECENT_REQUESTS`` requests
    (the latest step is kept whatever its size). A step whose admissions were all preempted before adds nothing
    (``observe`` skips ``requests == 0``)."""

    steps: deque = field(default_factory=deque)
    requests: int = 0
    queries: int = 0
    hits: int = 0

    def add(self, step: int, num_tokens: int, num_hits: int) -> None:
        """One fresh admission's lookup in step ``step``, merged into that step's entry. Dropping old steps after
        each lookup drops the same ones as vLLM dropping them once per step: the totals only grow within a step."""
        if not self.steps or self.steps[-1][0] != step:
            self.steps.append([step, 0, 0, 0])
        entry = self.steps[-1]
        entry[1] += 1
        entry[2] += num_tokens
        entry[3] += num_hits
        self.requests += 1
        self.queries += num_tokens
        self.hits += num_hits
        while len(self.steps) > 1 and self.requests > MAX_RECENT_REQUESTS:
            _, requests, queries, hits = self.steps.popleft()
            self.requests -= requests
            self.queries -= queries
            self.hits -= hits

    def hit_rate(self) -> float | None:
        """``CachingMetrics.hit_rate``, or None where the logger prints no rate (``empty``: no fresh request)."""
        if not self.requests:
            return None
        return self.hits / self.queries if self.queries else 0.0


@dataclass
class PrefixCacheStats:
    """One cache's counters (vLLM's ``vllm.v1.metrics.stats.PrefixCacheStats``), in tokens but for the request
    counts, and the window of its logged rate (`LoggedWindow`; None for a sum over replicas that each held
    lookups: each vLLM engine logs its own, ``--aggregate-engine-logging`` being off by default)."""

    queries: int = 0
    hits: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0
    requests: int = 0
    preempted_requests: int = 0
    window: LoggedWindow | None = field(default_factory=LoggedWindow)

    def record(self, num_tokens: int, num_hits: int, preempted: bool, step: int) -> None:
        """One admission's lookup of ``num_tokens`` tokens that found ``num_hits``, in scheduler step ``step``;
        ``preempted``: the request had been preempted before."""
        if preempted:
            self.preempted_requests += 1
            self.preempted_queries += num_tokens
            self.preempted_hits += num_hits
        else:
            self.requests += 1
            self.queries += num_tokens
            self.hits += num_hits
            self.window.add(step, num_tokens, num_hits)

    def __add__(self, other: PrefixCacheStats) -> PrefixCacheStats:
        window = other.window if not self.requests else self.window if not other.requests else None
        return PrefixCacheStats(self.queries + other.queries, self.hits + other.hits,
                                self.preempted_queries + other.preempted_queries,
                                self.preempted_hits + other.preempted_hits, self.requests + other.requests,
                                self.preempted_requests + other.preempted_requests, window)


def logged_hit_rate(stats: PrefixCacheStats) -> float | None:
    """The rate a run's last log line would print (`LoggedWindow.hit_rate`); None where it prints none, or where
    several engines each log their own."""
    return None if stats.window is None else stats.window.hit_rate()


def summary_keys(local: PrefixCacheStats, external: PrefixCacheStats) -> dict[str, int | float | None]:
    """The summary's keys, with vLLM's names. ``prefix_cache_hit_rate`` is the whole run's hits over queries (0
    before any query): the ratio of the two Prometheus counters, which is what vLLM's logger computes but over
    the whole run; ``prefix_cache_logged_hit_rate`` is the logger's own window, the last 1,000 fresh requests
    (`LoggedWindow`), and ``external_prefix_cache_logged_hit_rate`` the same for the connector's "External
    prefix cache hit rate"."""
    return {"prefix_cache_queries": local.queries, "prefix_cache_hits": local.hits,
            "prefix_cache_hit_rate": local.hits / local.queries if local.queries else 0.0,
            "prefix_cache_logged_hit_rate": logged_hit_rate(local),
            "prefix_cache_preempted_queries": local.preempted_queries,
            "prefix_cache_preempted_hits": local.preempted_hits,
            "external_prefix_cache_queries": external.queries, "external_prefix_cache_hits": external.hits,
            "external_prefix_cache_logged_hit_rate": logged_hit_rate(external)}
