"""The notebooks' experiment helpers (`sim.reproduce.explore`, `sim.reproduce.reuse`) take a lone name where a
list of names goes, and refuse a misspelled column or baseline by name instead of leaving a column empty."""

from __future__ import annotations

import pytest

from sim.reproduce.explore import compare_allocators, run_workload, summaries_table, system_prompt_sharing
from sim.reproduce.reuse import NO_REUSE, reuse_table, router_table, run_setups, sessions_workload
from workloads import load_preset

DEPLOYMENT = dict(model="llama-3-8b", gpu="a100-80gb", kv_tokens=60000)


@pytest.fixture(scope="module")
def workload():
    return load_preset("sharegpt-demo", num_requests=20)


def test_a_lone_allocator_name_is_one_run(workload):
    runs = run_workload(workload, "paged", **DEPLOYMENT)
    assert list(runs) == ["paged"] and runs["paged"].summary["completed"] == 20
    assert list(compare_allocators("paged", num_requests=10)) == ["paged"]
    assert system_prompt_sharing("paged-cow", num_requests=10).index.tolist() == ["paged-cow"]
    with pytest.raises(ValueError, match="allocators must be a list of values, got a set"):
        run_workload(workload, {"paged", "radix"}, **DEPLOYMENT)


def test_a_lone_router_and_replica_count_are_one_row():
    sessions = sessions_workload(24, turns=2, think_time_s=1.0, rate=2.0, system_prompt_len=64)
    table = router_table(sessions, "prefix-aware", 2, **DEPLOYMENT)
    assert table[["router", "replicas"]].values.tolist() == [["prefix-aware", 2]]


def test_summaries_table_refuses_a_key_no_summary_has(workload):
    runs = run_workload(workload, ["paged", "radix"], **DEPLOYMENT)
    assert summaries_table(runs, columns="mean_running").columns.tolist() == ["mean_running"]
    with pytest.raises(ValueError, match="summaries_table: no run's summary has 'mean_runing', 'ttft_p99'; the "
                                         "keys are allocator, .*mean_running"):
        summaries_table(runs, columns=["completed", "mean_runing", "ttft_p99"])


def test_reuse_table_baseline_must_name_a_run(workload):
    setups = run_setups(workload, {"no reuse": NO_REUSE, "paged": {"allocator": "paged"}}, **DEPLOYMENT)
    assert "prefill_saved_frac" in reuse_table(setups).columns
    assert "prefill_saved_frac" not in reuse_table(setups, baseline=None).columns
    with pytest.raises(ValueError, match=r"reuse_table: baseline 'no-reuse' is not one of the runs \('no reuse', "
                                         r"'paged'\); pass one of them, or baseline=None"):
        reuse_table(setups, baseline="no-reuse")
