"""`kvsim plan` shows vLLM's own "Prefix cache hit rate" (``prefix_cache_hit_rate``) beside kvsim's
``prefix_hit_frac``: sizing a deployment with prefix caching, the rate its metrics will log is the one to check
the plan against, and the two differ once requests are preempted (their re-hits count in ``prefix_hit_frac``
only). The plan's figure is the run summary's at the replica count found."""

import json

from click.testing import CliRunner

from sim.cli import main
from sim.commands.plan import format_plan
from workloads.frames import write_trace
from workloads.named import generate


def test_the_table_shows_vllms_hit_rate_apart_from_kvsims():
    row = {"router": "round-robin", "status": "ok", "replicas": 2, "simulations": 3,
           "summary": {"prefix_hit_frac": 0.206, "preempted_hit_tokens": 12345, "prefix_cache_hit_rate": 0.0}}
    header, line = format_plan([row], ["router"]).splitlines()
    cells = dict(zip(header.split(), line.split(), strict=False))
    assert cells["prefix_hit_frac"] == "0.206" and cells["prefix_cache_hit_rate"] == "0"
    failed = {"router": "foo", "status": "failed", "replicas": None, "summary": {}}
    assert dict(zip(header.split(), format_plan([failed], ["router"]).splitlines()[1].split(),
                    strict=False))["prefix_cache_hit_rate"] == "-"


def test_the_plans_rate_is_the_run_summarys(tmp_path):
    """A tight KV pool preempts requests, so vLLM's rate (fresh admissions' GPU hits) is below kvsim's."""
    lengths = "uniform:prompt_min=50,prompt_max=200,output_min=200,output_max=600"
    trace = write_trace(generate(lengths, "poisson:rate=20", 80, seed=1, system_prompt_len=256,
                                 system_prompt_frac=0.8), tmp_path / "t.csv")
    common = ["--kv-gib", "1.5", "--router", "round-robin"]
    args = ["plan", "--trace", str(trace), *common, "--memory-snapshots", "0", "--ttft-p99", "200",
            "--max-replicas", "2", "--workers", "1"]
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    rate = row["summary"]["prefix_cache_hit_rate"]
    assert 0 < rate < row["summary"]["prefix_hit_frac"]
    ran = CliRunner().invoke(main, ["run", str(trace), *common, "--replicas", str(row["replicas"]), "--json"])
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout)["prefix_cache_hit_rate"] == rate
    table = CliRunner().invoke(main, args)
    header, line = table.stdout.splitlines()[1:3]
    assert dict(zip(header.split(), line.split(), strict=False))["prefix_cache_hit_rate"] == f"{rate:.4g}"
