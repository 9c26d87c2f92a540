"""The store threshold of a write-through host tier end to end (``--offload-store-threshold``, vLLM's
``store_threshold``): a block reaches the host once that many requests have offered it, by hand on two
prefix groups taking turns; fewer stores, and hits only from the third use on; a fleet's replicas' skipped
stores summed; the summary keys; where the flag does nothing; a bad value (decode runs skipped ahead against
stepping: `test_sim_offload_write_policy`)."""


import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from tests.sim.test_sim_host_tier import BLOCK_BYTES, SMALL_GPU
from tests.sim.test_sim_offload_write_policy import TIER_SETTINGS, summaries_by_tier
from workloads.named import generate
from workloads.workload import Workload


def alternating_groups() -> Workload:
    """Five requests, each alone, of prefix groups 0, 1, 0, 1, 0: the A/B/C requests of `test_sim_host_tier`
    (600-token prompts, the first 512 tokens their group's, 37 hashed blocks: 32 of the group, 5 their own)."""
    return Workload(arrival_time_s=np.arange(5) * 100.0, prompt_tokens=np.full(5, 600), output_tokens=np.full(5, 5),
                    prefix_group=np.array([0, 1, 0, 1, 0]), prefix_len=np.full(5, 512), name="alternating")


def through(threshold: int, **options) -> dict:
    return run_simulation(SimConfig(cpu_offload_gib=1.0, offload_write_policy="write_through",
                                    offload_store_threshold=threshold, **SMALL_GPU, **options), alternating_groups())


@pytest.mark.parametrize("threshold, host_hits, stored, skipped", [
    # Every block stored: 37 for each of the first two requests, then the 5 own blocks of each later one
    # (its group's 32 are on the host); the third request on hits the 23 group blocks its GPU lost.
    (0, [0, 0, 23, 23, 23], 37 + 37 + 3 * 5, 0),
    # Offered twice: the first of each group stores nothing (74 skipped); its second stores the group's 32
    # (offered again) and skips its own 5; so group 0's prefix is on the host by the fifth request only.
    (2, [0, 0, 0, 0, 23], 32 + 32, 37 + 37 + 5 + 5 + 5),
    # Offered three times: only the fifth request (group 0's third) stores, its group's 32.
    (3, [0, 0, 0, 0, 0], 32, 37 * 4 + 5),
])
def test_blocks_are_stored_once_offered_often_enough(threshold, host_hits, stored, skipped):
    """The GPU (47 usable blocks) keeps 9 of a group's prefix blocks between its turns, so every later turn
    hits 144 tokens on the GPU; the other 23 prefix blocks come from the host when it has them."""
    r = through(threshold)
    assert r.requests["gpu_hit_tokens"].tolist() == [0, 0, 144, 144, 144]
    assert r.requests["host_hit_tokens"].tolist() == [16 * n for n in host_hits]
    assert r.summary["offload_bytes"] == stored * BLOCK_BYTES
    assert r.summary["offload_stores_skipped"] == skipped
    assert r.summary["offload_store_threshold"] == threshold


def test_the_flag_is_reported_and_named_where_it_does_nothing():
    s = summaries_by_tier("--offload-store-threshold", "2")
    assert [s[k]["offload_store_threshold"] for k in TIER_SETTINGS] == [2, 2, None]
    assert all(summary["offload_stores_skipped"] >= 0 for summary in s.values())
    assert "ignored_settings" not in s["write-through"]
    assert s["write-back"]["ignored_settings"] == {
        "--offload-store-threshold 2": "it filters write-through stores (vLLM's store_threshold); a write_back tier "
                                       "stores only what the GPU evicts"}
    assert s["no tier"]["ignored_settings"] == {"--offload-store-threshold 2": "this run has no host tier to store to"}


@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_a_bad_threshold_is_a_one_line_error(value):
    with pytest.raises(ValueError, match="^--offload-store-threshold must be a whole number of offers >= 0"):
        SimConfig(offload_store_threshold=value)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_fleet_sums_its_replicas_skipped_stores(workers):
    """Round-robin replicas run in worker processes too: the skipped stores travel back with each tier."""
    config = SimConfig(kv_tokens=2000, cpu_offload_gib=0.5, offload_write_policy="write_through",
                       offload_store_threshold=2, replicas=2, router="round-robin", step_time=0.01)
    w = generate("fixed:prompt=300,output=20", "poisson:rate=50", 60, seed=1, system_prompt_len=256,
                 system_prompt_frac=1.0)
    s = run_simulation(config, w, workers=workers).summary
    assert s["offload_stores_skipped"] == sum(r["offload_stores_skipped"] for r in s["per_replica"]) > 0
