"""``--data-parallel-size`` (``-dp``) and ``--enable-expert-parallel`` (``-ep``) on ``kvsim capacity`` and ``kvsim
run``: vLLM's spellings, the per-rank, total and per-GPU figures, the default router, and one-line refusals."""

import json

from click.testing import CliRunner

from sim.cli import main


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def capacity_json(*args: str) -> dict:
    result = invoke("capacity", "--model", "deepseek-v3", "--gpu", "h200", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_capacity_tp8_against_dp8_with_expert_parallelism():
    tp8 = capacity_json("-tp", "8")
    dp8 = capacity_json("--data-parallel-size", "8", "--enable-expert-parallel")
    assert capacity_json("-dp", "8", "-ep") == dp8  # vLLM's short flags
    assert (tp8["kv_capacity_tokens"], tp8["kv_capacity_tokens_total"], tp8["kv_capacity_tokens_per_gpu"]) == (
        708_857, 708_857, 88_607)
    assert (dp8["kv_capacity_tokens"], dp8["kv_capacity_tokens_total"], dp8["kv_capacity_tokens_per_gpu"]) == (
        488_290, 3_906_320, 488_290)
    assert (dp8["gpus"], dp8["data_parallel_size"], dp8["enable_expert_parallel"]) == (8, 8, True)
    text = invoke("capacity", "--model", "deepseek-v3", "--gpu", "h200", "-dp", "8", "-ep").output
    assert "488,290 tokens per data-parallel rank (each rank its own pool), 3,906,320 on all 8" in text
    assert "derived from 1 x h200 per data-parallel rank with expert parallelism" in text


def test_expert_parallelism_on_a_dense_model_is_a_one_line_error():
    for command in (["capacity"], ["run", "--num-requests", "5"]):
        result = invoke(*command, "--model", "llama-3-8b", "--gpu", "h100-80gb", "--enable-expert-parallel")
        assert result.exit_code == 2
        assert result.output.strip().splitlines()[-1] == (
            "Error: --enable-expert-parallel places routed experts on GPUs, and llama-3-8b is a dense model with "
            "none (no num_experts in its catalog entry); leave it out")


def test_run_with_data_parallelism_routes_with_vllms_balancer_unless_told():
    result = invoke("run", "-dp", "2", "--num-requests", "20", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["replicas"], summary["router"]) == (2, "dp-lb")
    assert "2 data-parallel ranks behind 2 API servers of opt-13b" in result.stderr
    told = invoke("run", "-dp", "2", "--router", "round-robin", "--num-requests", "20", "--json")
    assert json.loads(told.stdout)["router"] == "round-robin"
    assert "2 data-parallel ranks of opt-13b" in told.stderr


def test_data_parallelism_and_another_replica_count_are_refused():
    result = invoke("run", "--data-parallel-size", "2", "--replicas", "3", "--num-requests", "5")
    assert result.exit_code == 2
    assert "give --data-parallel-size 2" in result.output and "not both" in result.output


def test_expert_parallelism_that_changes_nothing_is_reported_ignored():
    """256 experts over 8 GPUs: whole experts are the same bytes as an eighth of each, so kvsim says the flag
    changed nothing; 32 over 3 GPUs: the fullest GPU holds 11 whole experts, so it does change the pool."""
    even = invoke("capacity", "--model", "deepseek-v3", "--gpu", "h200", "-dp", "8", "-ep")
    assert "Warning: paged: --enable-expert-parallel ignored: its 8 GPUs divide deepseek-v3's 256" in even.output
    uneven = invoke("capacity", "--model", "gpt-oss-20b", "--gpu", "h100-80gb", "-dp", "3", "-ep")
    assert uneven.exit_code == 0 and "--enable-expert-parallel ignored" not in uneven.output


def test_run_takes_vllms_api_server_count_one_per_rank_by_default():
    """``--api-server-count`` (vLLM's flag): the summary says how many API servers ran the balancer, vLLM's
    default one per rank (the setup line names it too); above 1 without dp-lb it is a one-line error."""
    default = json.loads(invoke("run", "-dp", "2", "--num-requests", "20", "--json").stdout)
    one = invoke("run", "-dp", "2", "--num-requests", "20", "--api-server-count", "1", "--json")
    assert (default["api_server_count"], json.loads(one.stdout)["api_server_count"]) == (2, 1)
    assert "2 data-parallel ranks behind 1 API server of opt-13b" in one.stderr  # the setup line says it too
    result = invoke("run", "-dp", "2", "--router", "round-robin", "--api-server-count", "2", "--num-requests", "5")
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "Error: --api-server-count 2: only vLLM's data-parallel load balancer (--router dp-lb) routes per API "
        "server; with --router round-robin it cannot change the run")
    result = invoke("run", "-dp", "2", "--api-server-count", "0", "--num-requests", "5")
    assert result.output.strip().splitlines()[-1] == "Error: --api-server-count must be a positive integer, got 0"
