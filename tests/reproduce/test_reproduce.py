"""`kvsim reproduce paper` end to end at toy sizes: configs follow the paper, every experiment yields its
checks, figures and files; the capacity arithmetic matches the paper exactly."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from sim.reproduce import paper
from sim.reproduce.experiments import QUICK, block_size_specs, paper_config, sharing_specs
from sim.reproduce.report import checks_table, figures, markdown_table, write_outputs
from sim.reproduce.run import measure_capacity, reproduce_paper

TOY = replace(QUICK, name="toy", fig2_requests=60, curve_rates={"sharegpt-paper": (1.0, 8.0)},
              curve_duration_s={"sharegpt-paper": 30.0}, size_rates={"opt-66b": (0.5, 8.0), "opt-175b": (1.0, 16.0)},
              size_duration_s=30.0, block_sizes=(16, 64), block_duration_s=5.0,
              block_rates={"sharegpt-paper": 2.0, "alpaca-paper": 10.0}, sharing_widths=(2,),
              sharing_rates={"alpaca-paper": 2.0}, sharing_duration_s=10.0, memory_snapshots=1,
              preemption_block_sizes=(1, 16))


def test_paper_config_is_the_papers_setup():
    config = paper_config("paged", "sharegpt-paper", 2.0, 7200)
    assert (config.model, config.gpu, config.kv_gib, config.block_size) == ("opt-13b", "a100-40gb", 12.0, 16)
    assert config.chunked_prefill is False and config.preemption == "recompute"
    assert config.max_model_len == 2048
    assert config.cost_profile == "paper-2023"


@pytest.mark.parametrize("model,gpu,gpus,kv_gib,slots", [("opt-66b", "a100-40gb", 4, 21.0, 9_557),
                                                         ("opt-175b", "a100-80gb", 8, 264.0, 60_074)])
def test_larger_deployments_are_table_1s(model, gpu, gpus, kv_gib, slots):
    """Table 1: OPT-66B on 4 A100s with 21 GB of KV (about 9.7K slots), OPT-175B on 8 A100-80GBs with 264 GB
    (about 60.1K slots); kvsim reads the GBs as GiB, as it does OPT-13B's 12 GB (exactly the paper's 15,728)."""
    from allocators.capacity import kv_capacity
    from allocators.catalog import get_model
    from sim.reproduce.experiments import curve_spec

    config = curve_spec("paged", "sharegpt-paper", 1.0, 60.0, model).config
    assert (config.model, config.gpu, config.tensor_parallel, config.kv_gib) == (model, gpu, gpus, kv_gib)
    assert config.cost_profile == "paper-2023" and config.chunked_prefill is False
    assert kv_capacity(get_model(model), kv_gib=config.kv_gib).kv_tokens == slots


def test_capacity_is_exactly_the_papers():
    assert measure_capacity() == {"slots": 15_728, "max_fit": 7, "unusable_frac": pytest.approx(0.08850457)}


def test_sharing_and_block_size_specs_cover_the_grid():
    specs = sharing_specs(TOY)
    assert [(s.n, s.beam_width, s.labels["mode"]) for s in specs] == [(2, 1, "parallel sampling"),
                                                                      (1, 2, "beam search")]
    assert all(s.config.allocator == "paged-cow" for s in specs)
    assert [s.config.block_size for s in block_size_specs(TOY)] == [16, 64, 16, 64]


@pytest.fixture(scope="module")
def toy_reproduction():
    return reproduce_paper(TOY)


def test_toy_reproduction_runs_every_experiment(toy_reproduction):
    rep = toy_reproduction
    assert set(rep.fig2) == set(paper.BATCH_ORDER)
    assert set(rep.sustained["sharegpt-paper"]) == set(paper.BATCH_ORDER)
    assert set(rep.size_sustained) == {"opt-66b", "opt-175b"}
    assert set(rep.size_curves["model"]) == {"opt-66b", "opt-175b"}
    sized = [c.metric for c in rep.checks if c.metric.startswith("OPT-")]
    assert sized == [f"{m}: vLLM / {b} sustained rate" for m in ("OPT-66B", "OPT-175B")
                     for b in ("Orca (Oracle)", "Orca (Max)")]
    experiments = {c.experiment for c in rep.checks}
    assert experiments == {"capacity", "fig2", "fig13", "sustained", "block-size", "preemption", "sharing"}
    assert set(rep.preemption["preemption"]) == {"recompute", "swap"}
    assert (rep.preemption.groupby("preemption")["block_size"].apply(sorted).tolist()
            == [sorted(TOY.preemption_block_sizes)] * 2)
    assert len(rep.sharing) == 2 and (rep.sharing["shared_saved_frac"] > 0).all()
    table = checks_table(rep.checks)
    assert "Orca (Max) requests that fit" in table and ("pass" in table)
    assert markdown_table(rep.checks).startswith("| experiment |")


def test_toy_reproduction_draws_and_writes(toy_reproduction, tmp_path):
    names = set(figures(toy_reproduction))
    assert {"fig2_breakdown", "fig13_batch_sizes", "memory_over_time", "memory_maps",
            "latency_vs_rate_sharegpt-paper", "latency_vs_rate_sharegpt-paper_opt-66b",
            "latency_vs_rate_sharegpt-paper_opt-175b", "block_sizes", "preemption", "sharing"} <= names
    paths = write_outputs(toy_reproduction, tmp_path, "kvsim reproduce paper --toy", dpi=30)
    assert {p.name for p in paths} >= {"results.json", "checks.csv", "fig2.csv", "sharing.csv",
                                       "latency_curves_sizes.csv", "fig2_breakdown.png"}
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["command"] == "kvsim reproduce paper --toy"
    assert results["capacity"]["slots"] == 15_728
    assert "0.2 s/token" in results["sustained_rate_definition"]
    assert set(results["size_sustained_rates"]) == {"opt-66b", "opt-175b"}
    assert results["larger_models"]["opt-175b"] == {"gpu": "a100-80gb", "tensor_parallel": 8, "kv_gib": 264.0}


def test_cli_runs_one_experiment_as_json():
    from sim.commands.reproduce import reproduce_group

    result = CliRunner().invoke(reproduce_group, ["paper", "--quick", "--only", "capacity", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    assert data["tally"] == "3 of 3 checks pass"
    assert data["command"] == "kvsim reproduce paper --quick --json --only=capacity"
