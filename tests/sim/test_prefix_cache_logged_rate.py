"""The "Prefix cache hit rate" a vLLM 0.33 server logs covers its most recent 1,000 fresh requests, whole
scheduler steps at a time (``CachingMetrics(max_recent_requests=1000)``), where ``prefix_cache_hit_rate`` covers
the whole run: ``prefix_cache_logged_hit_rate`` is the logged one, by hand on a cache that warms up late."""

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.prefix_cache_stats import MAX_RECENT_REQUESTS, LoggedWindow, PrefixCacheStats
from sim.kernel.runner import run_simulation
from workloads import Workload


def test_the_window_drops_whole_old_steps_past_1000_requests():
    """600 fresh lookups in step 0, then 600 in step 1: 1,200 > 1,000, so step 0 goes whole (vLLM pops the
    oldest step's stats while more than one step is held); a single step of 1,500 stays whole."""
    window = LoggedWindow()
    for _ in range(600):
        window.add(0, 10, 10)
    assert (window.requests, window.hit_rate()) == (600, 1.0)
    for _ in range(600):
        window.add(1, 10, 0)
    assert (window.requests, window.queries, window.hits, window.hit_rate()) == (600, 6000, 0, 0.0)
    big = LoggedWindow()
    for _ in range(1500):
        big.add(7, 4, 1)
    assert (big.requests, big.hit_rate()) == (1500, 0.25)
    assert LoggedWindow().hit_rate() is None  # the logger prints no rate before a fresh request
    assert MAX_RECENT_REQUESTS == 1000


def test_preempted_lookups_stay_out_of_the_window():
    stats = PrefixCacheStats()
    stats.record(100, 90, True, step=0)  # a preempted request re-admitted: apart, as vLLM keeps it
    assert stats.window.hit_rate() is None and (stats.preempted_requests, stats.preempted_hits) == (1, 90)
    stats.record(100, 0, False, step=1)
    assert stats.window.hit_rate() == 0.0 and stats.requests == 1


def test_a_sum_over_replicas_has_no_single_log():
    """Each vLLM engine logs its own rate (``--aggregate-engine-logging`` off): a sum over replicas that each
    looked up has none; a replica that looked nothing up leaves the other's."""
    one, other = PrefixCacheStats(), PrefixCacheStats()
    one.record(10, 5, False, step=0)
    assert (PrefixCacheStats() + one).window.hit_rate() == 0.5
    assert (one + PrefixCacheStats()).window.hit_rate() == 0.5
    other.record(10, 0, False, step=0)
    assert (one + other).window is None


def late_warming_workload(cold: int = 500, warm: int = 1000) -> Workload:
    """``cold`` requests with nothing shared, then ``warm`` sharing a 512-token system prompt, all 600-token
    prompts 100 s apart: each finishes before the next arrives, so each is admitted alone in its own step."""
    n = cold + warm
    group = np.where(np.arange(n) < cold, np.arange(n), cold)  # the cold ones each their own prefix
    return Workload(arrival_time_s=np.arange(n) * 100.0, prompt_tokens=np.full(n, 600),
                    output_tokens=np.full(n, 2), prefix_group=group, prefix_len=np.full(n, 512), name="late-warm")


@pytest.mark.parametrize("step_by_step", [False, True])
def test_the_logged_rate_reads_the_last_1000_requests(step_by_step):
    """The first warm request fills the cache, the other 999 hit its 32 blocks: over the run 999 x 512 of
    1,500 x 600 tokens, over the last 1,000 requests (all warm) 999 x 512 of 1,000 x 600."""
    s = run_simulation(SimConfig(kv_tokens=200_000, prefix_caching=True, memory_snapshots=0,
                                 step_by_step=step_by_step), late_warming_workload()).summary
    assert (s["prefix_cache_queries"], s["prefix_cache_hits"]) == (1500 * 600, 999 * 512)
    assert s["prefix_cache_hit_rate"] == pytest.approx(999 * 512 / (1500 * 600))
    assert s["prefix_cache_logged_hit_rate"] == pytest.approx(999 * 512 / (1000 * 600))
    assert s["external_prefix_cache_logged_hit_rate"] is None  # no host tier: no connector line in the log


def test_without_prefix_caching_nothing_is_logged():
    s = run_simulation(SimConfig(kv_tokens=200_000, prefix_caching=False, memory_snapshots=0),
                       late_warming_workload(3, 3)).summary
    assert s["prefix_cache_logged_hit_rate"] is None and s["prefix_cache_hit_rate"] == 0.0


def test_a_fleet_logs_per_replica():
    s = run_simulation(SimConfig(kv_tokens=200_000, prefix_caching=True, memory_snapshots=0, replicas=2),
                       late_warming_workload(4, 4)).summary
    assert s["prefix_cache_logged_hit_rate"] is None
    assert all(r["prefix_cache_logged_hit_rate"] is not None for r in s["per_replica"])
