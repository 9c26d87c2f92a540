"""`sim.deployment_memory` (notebook 08): `kvsim capacity` for several sets of flags as one table, and one
workload run on several deployments; the figures are those the capacity command's own tests check."""

import click
import pandas as pd
import pytest

from sim.deployment_memory import capacity_table, run_deployments
from workloads import workload_from_frame

DSV3 = "--model deepseek-v3 --gpu h200"


def test_deepseek_v3_deployments_on_eight_h200s():
    t = capacity_table({"TP=8": f"{DSV3} -tp 8", "DP=8 + EP": f"{DSV3} -dp 8 -ep", "DCP=8": f"{DSV3} -tp 8 -dcp 8"})
    assert list(t.index) == ["TP=8", "DP=8 + EP", "DCP=8"] and t.index.name == "deployment"
    assert t.loc["DP=8 + EP", "flags"] == f"{DSV3} -dp 8 -ep"
    assert t["kv_capacity_tokens_total"].tolist() == [708_857, 3_906_320, 5_670_861]
    assert t["kv_capacity_tokens"].tolist() == [708_857, 488_290, 5_670_861]
    assert t["block_size"].tolist() == [16, 16, 128]
    # the model's whole context per request: 4 and 34 (tests/cli/test_decode_context_parallel_cli.py); a rank's
    # count times its 8 ranks
    assert t["max_concurrent_requests"].tolist() == [4, 2, 34]
    assert t["max_concurrent_requests_total"].tolist() == [4, 16, 34]


def test_a_reports_dicts_become_columns_and_its_lists_are_left_out():
    t = capacity_table({"gemma": "--model gemma-3-12b --gpu h100-80gb --prompt-len 7168 --output-len 1024",
                        "nemotron": "--model nemotron-h-8b --gpu h100-80gb --kv-gib 60 --prompt-len 1000 "
                                    "--output-len 41"})
    assert {"breakdown.free", "breakdown.token_states", "mamba_pool.mamba_groups"} <= set(t.columns)
    assert "kv_groups" not in t.columns and "kv_cache_groups" not in t.columns
    assert t.loc["nemotron", "kv_capacity_blocks"] == 3780  # vLLM's planner: tests/allocators/data/mamba_pool.json
    assert t.loc["nemotron", "mamba_pool.mamba_groups"] == 6 and pd.isna(t.loc["gemma", "mamba_pool.mamba_groups"])


def test_the_flags_are_the_commands():
    """Defaults, short spellings and errors are `kvsim capacity`'s own."""
    long, short = (capacity_table({"x": f"{DSV3} {flags}"}).iloc[0] for flags in (
        "--tensor-parallel 8 --decode-context-parallel-size 8", "-tp 8 -dcp 8"))
    assert long.drop("flags").equals(short.drop("flags"))
    with pytest.raises(click.NoSuchOption, match="--tensor-paralel"):
        capacity_table({"typo": f"{DSV3} --tensor-paralel 8"})
    with pytest.raises(ValueError, match="--enable-expert-parallel .* llama-3-8b is a dense model"):
        capacity_table({"dense": "--model llama-3-8b --gpu h200 -ep"})
    with pytest.raises(ValueError, match="no deployments"):
        capacity_table({})


def test_run_deployments_runs_each_with_the_common_fields():
    frame = pd.DataFrame({"arrival_time_s": [0.0] * 3, "prompt_tokens": [2000] * 3, "output_tokens": [20] * 3})
    runs = run_deployments(workload_from_frame(frame), {"TP=8": dict(tensor_parallel=8),
                                                       "DCP=8": dict(tensor_parallel=8,
                                                                     decode_context_parallel_size=8)},
                           model="deepseek-v3", gpu="h200")
    assert list(runs) == ["TP=8", "DCP=8"]
    assert [r.summary["kv_capacity_tokens"] for r in runs.values()] == [708_857, 5_670_861]
    assert all(r.summary["completed"] == 3 for r in runs.values())
    with pytest.raises(ValueError, match="deployment 'x' sets model, which the common fields set too"):
        run_deployments(workload_from_frame(frame), {"x": dict(model="llama-3-8b")}, model="deepseek-v3")
    with pytest.raises(ValueError, match="no deployments"):
        run_deployments(workload_from_frame(frame), {})
