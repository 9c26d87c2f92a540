"""Named step-cost profiles and the new cost terms: sources, closed-form decode runs, fast-forward equality."""

import json

import numpy as np
import pytest

from allocators.catalog import get_gpu, get_model
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import CalibratedStepCost, StepCostModel
from sim.kernel.cost_profiles import DEFAULT_PROFILE, PROFILES, make_step_cost
from sim.kernel.runner import make_cost_model, run_simulation
from tests.sim.summaries import assert_same_step_totals
from workloads import Workload

MODEL, GPU = get_model("llama-2-7b"), get_gpu("h100-80gb")


def test_every_profile_coefficient_has_a_source():
    assert DEFAULT_PROFILE == "vllm-v1" and {"vllm-v1", "paper-2023"} <= set(PROFILES)
    for profile in PROFILES.values():
        assert set(profile.sources) == set(profile.coefficients), profile.name
        assert all(len(text) > 10 for text in profile.sources.values()), profile.name


def test_default_config_uses_vllm_v1_and_unknown_profiles_are_refused():
    cost = make_cost_model(SimConfig(model="llama-2-7b", gpu="h100-80gb"), MODEL, GPU)
    assert cost.profile == "vllm-v1" and cost.seq_overhead_s == PROFILES["vllm-v1"].coefficients["seq_overhead_s"]
    with pytest.raises(ValueError, match="unknown cost profile 'vllm-v0'; valid choices: vllm-v1, paper-2023"):
        SimConfig(cost_profile="vllm-v0")


def test_batch_one_decode_step_matches_the_measured_h100_steps():
    """vllm-v1 reproduces the facts it was derived from: batch-1 decode 6.66 ms (7B) and 26.06 ms (34B)."""
    small = make_step_cost("vllm-v1", MODEL, GPU).step_time(0, 1, 0)
    large = make_step_cost("vllm-v1", get_model("codellama-34b"), GPU).step_time(0, 1, 0)
    assert small == pytest.approx(6.66e-3, rel=0.03) and large == pytest.approx(26.06e-3, rel=0.03)


@pytest.mark.parametrize("name", sorted(PROFILES))
@pytest.mark.parametrize("n,c0,k", [(1, 10, 7), (30, 5000, 200), (256, 400_000, 50)])
def test_decode_run_closed_form_under_every_profile(name, n, c0, k):
    cost = make_step_cost(name, MODEL, GPU)
    durations = [cost.step_time(0, n, c0 + n * j) for j in range(k)]
    total, weighted = cost.decode_run(n, c0, k)
    assert total == pytest.approx(sum(durations), rel=1e-12)
    assert weighted == pytest.approx(sum(j * d for j, d in enumerate(durations)), rel=1e-12)
    prefix = cost.decode_prefix(n, c0)
    assert prefix(k) == pytest.approx(total, rel=1e-12)


def test_mixed_steps_overlap_only_partly():
    """A step that prefills pays (1 - mixed_overlap) of the smaller side; a pure decode step stays a roofline."""
    full = StepCostModel(MODEL, GPU, mixed_overlap=1.0)
    part = StepCostModel(MODEL, GPU, mixed_overlap=0.5)
    assert part.step_time(0, 8, 4000) == full.step_time(0, 8, 4000)
    assert part.step_time(64, 8, 4000) > full.step_time(64, 8, 4000)
    per_seq = StepCostModel(MODEL, GPU, seq_overhead_s=1e-4, prefill_token_s=1e-6)
    plain = StepCostModel(MODEL, GPU)
    extra = per_seq.step_time(100, 8, 4000, prefill_seqs=2) - plain.step_time(100, 8, 4000)
    assert extra == pytest.approx(10 * 1e-4 + 100 * 1e-6)


def _workload(n: int = 120) -> Workload:
    rng = np.random.default_rng(3)
    return Workload(arrival_time_s=np.cumsum(rng.exponential(0.15, n)), prompt_tokens=rng.integers(20, 2000, n),
                    output_tokens=rng.integers(1, 300, n))


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_fast_forward_equals_step_by_step_under_every_profile(name):
    options = dict(model="llama-2-7b", gpu="h100-80gb", kv_tokens=30_000, cost_profile=name,
                   max_num_batched_tokens=512)
    w = _workload()
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert len(fast.steps) < len(slow.steps)
    for column in ("first_token_s", "finished_s"):
        np.testing.assert_allclose(fast.requests[column], slow.requests[column], rtol=1e-9)
    assert fast.summary["mean_running"] == pytest.approx(slow.summary["mean_running"], rel=1e-9)
    assert_same_step_totals(fast, slow)


def test_calibration_tables_of_both_versions(tmp_path):
    """A version-1 table (no CPU terms) is a plain roofline; a version-2 table sets every term; both are
    accepted by --calibration and --cost-profile."""
    base = {"format": "kvsim-calibration", "gpu": "h100-80gb", "model": "llama-2-7b"}
    v1 = dict(base, version=1, coefficients={"bandwidth_frac": 0.7, "flops_frac": 0.5, "step_overhead_s": 0.002})
    v2 = dict(base, version=2, coefficients=dict(v1["coefficients"], seq_overhead_s=5e-5, prefill_token_s=1e-6,
                                                 mixed_overlap=0.6, paged_kernel_overhead={"16": 1.1}))
    for table in (v1, v2):
        path = tmp_path / f"v{table['version']}.json"
        path.write_text(json.dumps(table))
        cost = CalibratedStepCost.from_file(path, MODEL, GPU)
        via_profile = make_cost_model(SimConfig(model="llama-2-7b", gpu="h100-80gb", cost_profile=str(path)),
                                      MODEL, GPU)
        assert via_profile.step_time(100, 4, 3000) == cost.step_time(100, 4, 3000)
    assert (cost.seq_overhead_s, cost.mixed_overlap) == (5e-5, 0.6)
    plain = CalibratedStepCost.from_file(tmp_path / "v1.json", MODEL, GPU)
    assert (plain.seq_overhead_s, plain.prefill_token_s, plain.mixed_overlap) == (0.0, 0.0, 1.0)
    (tmp_path / "bad.json").write_text(json.dumps(dict(v2, coefficients=dict(v2["coefficients"], mixed_overlap="x"))))
    with pytest.raises(ValueError, match="bad.json: field 'coefficients.mixed_overlap' must be a number"):
        CalibratedStepCost.from_file(tmp_path / "bad.json", MODEL, GPU)


def test_paper_2023_batches_the_papers_fig13_vllm():
    """With paper-2023 (its per-sequence term fitted to Fig. 13), kvsim's ShareGPT at 2 req/s batches vLLM's
    30.42 requests within 10% (the acceptance; the fit itself lands within 0.1%)."""
    from sim.reproduce import paper
    from sim.reproduce.fit_paper import mean_batch

    batch = mean_batch(PROFILES["paper-2023"].coefficients["seq_overhead_s"])
    assert batch == pytest.approx(paper.FIG13_BATCH["paged"], rel=0.10)


OPT66 = get_model("opt-66b")
COMM = dict(allreduce_latency_s=38.6e-6, allreduce_bus_gb_s=141.9)  # Vidur's A100 DGX all-reduces at 4 GPUs


def test_allreduce_terms_charge_two_per_layer_and_each_tokens_hidden_state():
    """With the all-reduce coefficients, a step on 4 tensor-parallel GPUs pays 2 x 64 all-reduces of latency
    plus each token's 9,216 16-bit values moved 2 x 3/4 times over the bus; one GPU, or no coefficients, pays
    nothing, and a step that computes no token (a swap alone) runs no all-reduce."""
    a100 = get_gpu("a100-40gb")
    with_comm = StepCostModel(OPT66, a100, tensor_parallel=4, **COMM)
    plain = StepCostModel(OPT66, a100, tensor_parallel=4)
    per_token = 2 * 64 * 9216 * 2 * 1.5 / 141.9e9
    for prefill, seqs in ((0, 1), (0, 37), (512, 8)):
        extra = with_comm.step_time(prefill, seqs, 5000) - plain.step_time(prefill, seqs, 5000)
        assert extra == pytest.approx(2 * 64 * 38.6e-6 + (prefill + seqs) * per_token, rel=1e-9)
    assert with_comm.step_time(0, 0, 0, swap_blocks=3) == plain.step_time(0, 0, 0, swap_blocks=3)
    one = StepCostModel(OPT66, a100, tensor_parallel=1, **COMM)
    assert one.step_time(0, 37, 5000) == StepCostModel(OPT66, a100).step_time(0, 37, 5000)
    assert plain.omits() and not with_comm.omits() and not one.omits()
    assert with_comm.describe()["allreduce_bus_gb_s"] == 141.9 and "allreduce_bus_gb_s" not in plain.describe()
    total, weighted = with_comm.decode_run(37, 5000, 60)
    durations = [with_comm.step_time(0, 37, 5000 + 37 * j) for j in range(60)]
    assert total == pytest.approx(sum(durations), rel=1e-12)
    assert weighted == pytest.approx(sum(j * d for j, d in enumerate(durations)), rel=1e-12)


def test_fast_forward_equals_step_by_step_with_allreduces(tmp_path):
    """A calibration table with the all-reduce terms (given as --cost-profile) keeps decode runs in closed
    form: fast-forward and step by step agree on OPT-66B over 4 GPUs, and the summary no longer says the
    clock omits communication."""
    roofline = {"bandwidth_frac": 0.8, "flops_frac": 0.6, "step_overhead_s": 0.003}
    for name, coefficients in (("tp4", dict(roofline, **COMM)), ("plain", roofline)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"format": "kvsim-calibration", "version": 2,
                                                            "gpu": "a100-40gb", "model": "opt-66b",
                                                            "coefficients": coefficients}))
    path = tmp_path / "tp4.json"
    options = dict(model="opt-66b", gpu="a100-40gb", tensor_parallel=4, kv_tokens=6000, cost_profile=str(path),
                   max_num_batched_tokens=512)
    w = _workload(80)
    fast = run_simulation(SimConfig(**options), w)
    slow = run_simulation(SimConfig(step_by_step=True, **options), w)
    assert len(fast.steps) < len(slow.steps)
    for column in ("first_token_s", "finished_s"):
        np.testing.assert_allclose(fast.requests[column], slow.requests[column], rtol=1e-9)
    assert "clock_omits" not in fast.summary and fast.summary["allreduce_latency_s"] == 38.6e-6
    plain = run_simulation(SimConfig(**dict(options, cost_profile=str(tmp_path / "plain.json"))), w)
    assert plain.summary["clock_omits"] and plain.requests["finished_s"].max() < fast.requests["finished_s"].max()


def test_calibrate_list_names_every_profile_and_the_tables_a_run_would_pick_up(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from sim.cli import main

    monkeypatch.setenv("KVSIM_HOME", str(tmp_path))
    (tmp_path / "calibration" / "h100-80gb").mkdir(parents=True)
    (tmp_path / "calibration" / "h100-80gb" / "llama-3-8b.json").write_text("{}")
    result = CliRunner().invoke(main, ["calibrate", "--list"])
    assert result.exit_code == 0, result.output
    for name in PROFILES:
        assert f"\n{name}" in "\n" + result.output
    lines = result.output.splitlines()
    checks = [line for line in lines if line.startswith("  checked against: ")]
    assert len(checks) == sum(len(p.checked) for p in PROFILES.values()) >= len(PROFILES)
    assert any("H200" in line for line in checks)
    assert any(line.startswith("  shipped with kvsim") and "--gpu cpu --model llama-3-8b" in line for line in lines)
    assert any(line.startswith("  yours") and "--gpu h100-80gb --model llama-3-8b" in line for line in lines)
