"""The write-through tier's eviction policy end to end (``--offload-eviction-policy``, vLLM's
``eviction_policy``): ARC keeps a shared prefix that one-off prompts would push out of an LRU host; the
summary key; where the flag does nothing; a bad value (decode runs skipped ahead against stepping:
`test_sim_offload_write_policy`)."""


import numpy as np
import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from tests.sim.test_sim_host_tier import SMALL_GPU, host_gib
from tests.sim.test_sim_offload_write_policy import TIER_SETTINGS, summaries_by_tier
from workloads.workload import Workload


def prefix_among_one_offs() -> Workload:
    """Prefix group 0 twice in a row, then three one-off prompts (groups 1, 2, 3), then group 0 again, and so
    on: 600-token prompts whose first 512 tokens are their group's, each request alone."""
    groups = np.array([0, 0, 1, 2, 3, 0, 4, 5, 6, 0])
    n = len(groups)
    return Workload(arrival_time_s=np.arange(n) * 100.0, prompt_tokens=np.full(n, 600), output_tokens=np.full(n, 5),
                    prefix_group=groups, prefix_len=np.full(n, 512), name="prefix-among-one-offs")


def test_arc_keeps_a_reused_prefix_that_one_off_prompts_push_out_of_lru():
    """A host of 80 blocks behind a GPU of 47 (37 blocks a request, 32 of them its group's prefix). The second
    request reuses the prefix from the GPU and offers it, held on the host: ARC moves it to T2 when the request
    finishes, and the three one-off requests that follow (111 blocks) churn T1 around it, so the next use of
    the prefix loads all 32 prefix blocks from the host (the GPU lost them), and so does the use after the
    next three one-offs; LRU ranks the prefix newest too, but the one-offs push it off the host all the
    same."""
    runs = {policy: run_simulation(SimConfig(cpu_offload_gib=host_gib(80), offload_write_policy="write_through",
                                             offload_eviction_policy=policy, **SMALL_GPU), prefix_among_one_offs())
            for policy in ("lru", "arc")}
    for r in runs.values():
        assert r.requests["gpu_hit_tokens"].tolist() == [0, 512] + [0] * 8
    assert runs["lru"].requests["host_hit_tokens"].tolist() == [0] * 10
    assert runs["arc"].requests["host_hit_tokens"].tolist() == [0] * 5 + [512] + [0] * 3 + [512]
    for policy, r in runs.items():
        assert r.summary["offload_eviction_policy"] == policy


def test_the_flag_is_reported_and_named_where_it_does_nothing():
    s = summaries_by_tier("--offload-eviction-policy", "arc")
    assert [s[k]["offload_eviction_policy"] for k in TIER_SETTINGS] == ["arc", "arc", None]
    assert "ignored_settings" not in s["write-through"]
    assert s["write-back"]["ignored_settings"] == {
        "--offload-eviction-policy arc": "it is vLLM's policy for its write-through tier; the write_back tier "
                                         "(SGLang's) evicts LRU"}
    assert s["no tier"]["ignored_settings"] == {
        "--offload-eviction-policy arc": "this run has no host tier to evict from"}


def test_a_bad_policy_is_a_one_line_error():
    result = CliRunner().invoke(main, ["run", "--cpu-offload-gib", "1", "--offload-eviction-policy", "lfu"])
    assert result.exit_code == 2 and "'lfu' is not one of 'lru', 'arc'" in result.output
    with pytest.raises(ValueError, match="^--offload-eviction-policy must be one of lru, arc, got 'fifo'$"):
        SimConfig(offload_eviction_policy="fifo")
