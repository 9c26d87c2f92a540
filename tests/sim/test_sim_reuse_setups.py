"""`sim.reproduce.reuse`, what the prefix-reuse notebook calls: a synthetic sessions workload under several
setups, a table of reuse figures against the no-reuse baseline, the reuse figure, and fleets by router."""

from matplotlib.figure import Figure

from sim.reproduce.reuse import (
    NO_REUSE,
    reuse_figure,
    reuse_table,
    router_table,
    run_setups,
    sessions_workload,
)


def test_sessions_under_paged_with_and_without_reuse():
    workload = sessions_workload(80, turns=4, think_time_s=2.0, rate=2.0, system_prompt_len=256)
    assert workload.has_sessions and workload.turn.max() == 3
    results = run_setups(workload, {"no reuse": NO_REUSE, "paged": {"allocator": "paged"}},
                         model="llama-3-8b", gpu="a100-80gb", max_model_len=16384)
    table = reuse_table(results)
    assert table.loc["no reuse", "cached_prompt_tokens"] == 0 and table.loc["no reuse", "prefill_saved_frac"] == 0
    assert table.loc["paged", "prefill_saved_frac"] > 0.5  # later turns repeat everything before them
    assert table.loc["paged", "ttft_p50_s"] < table.loc["no reuse", "ttft_p50_s"]
    assert isinstance(reuse_figure(results), Figure)


def test_router_table_runs_a_fleet_per_router_and_size():
    """Sessions over fleets: a row per router and replica count; following the conversation (prefix-aware)
    hits more of each prompt than sending turns round the replicas."""
    workload = sessions_workload(120, turns=4, think_time_s=2.0, rate=2.0, system_prompt_len=256)
    table = router_table(workload, ["round-robin", "prefix-aware"], [2, 3], model="llama-3-8b", gpu="a100-80gb",
                         max_model_len=16384)
    assert table[["router", "replicas"]].values.tolist() == [["round-robin", 2], ["prefix-aware", 2],
                                                             ["round-robin", 3], ["prefix-aware", 3]]
    assert (table["completed"] == 120).all()
    hits = table.set_index(["router", "replicas"])["prefix_hit_frac"]
    assert hits["prefix-aware", 3] > hits["round-robin", 3] + 0.1
    single = router_table(workload, ["round-robin"], [1], model="llama-3-8b", gpu="a100-80gb", max_model_len=16384)
    assert single["completed"].tolist() == [120] and single["load_imbalance"].isna().all()  # no fleet summary keys
