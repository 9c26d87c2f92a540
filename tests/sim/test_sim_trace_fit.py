"""`kvsim calibrate --from-trace`: measured-run readers, the replay fit's round trip and held-out error."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import workloads
from allocators.catalog import get_gpu, get_model
from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import StepCostModel
from sim.kernel.cost_profiles import PROFILES
from sim.kernel.runner import run_simulation
from sim.measured import read_measured
from sim.replay import overall, replay, score
from sim.trace_fit import fit_trace

FIXTURES = Path(__file__).parent / "fixtures" / "real_vllm"
LLAMA = dict(model="llama-2-7b", gpu="h100-80gb", kv_tokens=119_008, max_num_seqs=256, max_num_batched_tokens=4096,
             max_model_len=4096, prefix_caching=True, watermark=0.0)
CODELLAMA = dict(model="codellama-34b", gpu="h100-80gb", kv_tokens=44_640, max_num_seqs=32,
                 max_num_batched_tokens=64, max_model_len=8192, prefix_caching=True, watermark=0.0)


def test_reads_benchmark_serving_and_guidellm_results(tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"request_rate": 2.0, "input_lens": [100, 200], "output_lens": [3, 2],
                                 "ttfts": [0.05, 0.07], "itls": [[0.01, 0.02], [0.03]]}))
    run = read_measured(bench)
    assert run.frame["arrival_time_s"].tolist() == [0.0, 0.5]
    assert run.frame["e2e_s"].tolist() == pytest.approx([0.08, 0.10])
    assert run.frame["tpot_s"].tolist() == pytest.approx([0.015, 0.03])
    guide = tmp_path / "guidellm.json"
    request = {"prompt_tokens": 50, "output_tokens": 4, "start_time": 10.0, "first_token_time": 10.2,
               "end_time": 10.5}
    guide.write_text(json.dumps({"benchmarks": [
        {"args": {"strategy": {"type_": "synchronous"}}, "requests": {"successful": [request]}},
        {"args": {"strategy": {"type_": "constant", "rate": 1.5}},
         "requests": {"successful": [dict(request, start_time=12.0, first_token_time=12.1, end_time=13.0)]}}]}))
    run = read_measured(guide)
    assert run.frame["phase"].tolist() == ["synchronous", "constant@1.5"]
    assert run.frame["ttft_s"].tolist() == pytest.approx([0.2, 0.1])
    assert run.frame["arrival_time_s"].tolist() == [0.0, 2.0]


def test_bad_measured_input_names_file_row_and_field(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("arrival_time_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,10,5,0.1,0.5\n1,10,5,x,0.5\n")
    with pytest.raises(ValueError, match=r"m.csv: row 2: field 'ttft_s': bad value 'x'"):
        read_measured(path)
    path.write_text("arrival_time_s,prompt_tokens,output_tokens,ttft_s\n0,10,5,0.1\n")
    with pytest.raises(ValueError, match="missing column\\(s\\) e2e_s"):
        read_measured(path)
    result = CliRunner().invoke(main, ["calibrate", "--from-trace", str(path), "--model", "llama-2-7b",
                                       "--gpu", "h100-80gb"])
    assert result.exit_code == 2 and result.output.startswith("Error: ") and "e2e_s" in result.output


def test_round_trip_recovers_known_coefficients(tmp_path):
    """A run simulated with known coefficients and written as a measured CSV is fitted back within 5%."""
    rng = np.random.default_rng(1)
    n = 240
    gaps = rng.exponential(1 / np.where(np.arange(n) < n // 3, 0.5, 5.0))
    frame = pd.DataFrame({"arrival_time_s": np.cumsum(gaps), "prompt_tokens": rng.integers(50, 3000, n),
                          "output_tokens": rng.integers(100, 600, n), "ttft_s": 1.0, "e2e_s": 2.0})
    path = tmp_path / "measured.csv"
    frame.to_csv(path, index=False)
    config = SimConfig(**LLAMA)
    truth = dict(PROFILES["vllm-v1"].coefficients, bandwidth_frac=0.75, flops_frac=0.58, seq_overhead_s=6e-5)
    sim = replay(read_measured(path), config, StepCostModel(get_model("llama-2-7b"), get_gpu("h100-80gb"), **truth))
    frame["ttft_s"], frame["e2e_s"] = sim["ttft_s"], sim["e2e_s"]
    frame.to_csv(path, index=False)
    result = fit_trace(read_measured(path), config)
    assert result.fitted == ("bandwidth_frac", "flops_frac", "seq_overhead_s")
    for name in result.fitted:
        assert result.coefficients[name] == pytest.approx(truth[name], rel=0.05), name


@pytest.mark.parametrize("name,options", [("jan21-llama7b-train-1", LLAMA), ("jan20-codellama-prefill-1", CODELLAMA)])
def test_fit_on_half_a_real_run_predicts_the_other_half(name, options):
    """Fitted on a seeded random half of a real vLLM run, kvsim predicts the held-out half's E2E within 10%
    and TTFT and TPOT within 15% (MAPE; the warm-up request left out)."""
    result = fit_trace(read_measured(FIXTURES / f"{name}.csv"), SimConfig(**options))
    mape = overall(result.heldout_score)
    assert mape["e2e"] <= 0.10 and mape["ttft"] <= 0.15 and mape["tpot"] <= 0.15, mape


def test_calibrate_from_trace_cli_writes_a_table_run_accepts(tmp_path):
    out = tmp_path / "cal.json"
    fixture = FIXTURES / "jan20-codellama-prefill-1.csv"
    args = ["calibrate", "--from-trace", str(fixture), "--model", "codellama-34b", "--gpu", "h100-80gb",
            "--kv-tokens", "44640", "--max-num-seqs", "32", "--max-num-batched-tokens", "64", "--max-model-len",
            "8192", "--prefix-caching", "--max-evals", "6", "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "held-out (100 requests): ttft MAPE" in result.output
    table = json.loads(out.read_text())
    assert table["format"] == "kvsim-calibration" and table["version"] == 2 and table["device"] == "trace"
    assert set(table["fit"]["heldout"]) >= {"e2e_mape", "ttft_mape", "tpot_mape"}
    for flag in ("--cost-profile", "--calibration"):
        run = CliRunner().invoke(main, ["run", str(fixture), "--model", "codellama-34b", "--gpu", "h100-80gb",
                                        "--kv-tokens", "44640", "--max-num-seqs", "32", "--max-num-batched-tokens",
                                        "64", "--num-requests", "20", flag, str(out), "--json"])
        assert run.exit_code == 0, run.output
        assert json.loads(run.stdout)["cost_model"] == "calibrated (cal.json)"


def test_a_run_without_phases_is_scored_once():
    """A measured file without a ``phase`` column is one phase, "all": each metric scored once, not twice."""
    measured = pd.DataFrame({"ttft_s": [1.0, 2.0], "tpot_s": [0.1, 0.2], "e2e_s": [2.0, 4.0], "phase": "all"})
    simulated = measured[["ttft_s", "tpot_s", "e2e_s"]] * 1.1
    table = score(measured, simulated)
    assert list(table["phase"]) == ["all"] * 3 and list(table["metric"]) == ["ttft", "tpot", "e2e"]
    assert overall(table) == pytest.approx({"ttft": 0.1, "tpot": 0.1, "e2e": 0.1})


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_kvsims_own_requests_table_reads_as_a_measured_run(tmp_path, fmt):
    """`kvsim run --out`'s requests table (``arrival_s``; rejected requests without latencies; Parquet by
    default) was refused as a measured run: the round trip needed hand editing. Its rejected rows are left out
    and counted; its ``session_id`` and ``turn`` (NA: no sessions here) are not read."""
    from workloads.errors import TraceWarning

    w = workloads.load_preset("sharegpt-demo", num_requests=60, seed=0)
    result = run_simulation(SimConfig(kv_tokens=600, max_model_len=512, step_time=0.01), w)
    rejected = int(result.summary["rejected"])
    assert rejected > 0 and result.requests["session_id"].isna().all()
    path = tmp_path / f"requests.{fmt}"
    getattr(result.requests, f"to_{fmt}")(path, index=False)
    with pytest.warns(TraceWarning, match=f"{rejected} request.s. left out .* rejected by the simulation"):
        measured = read_measured(path)
    assert len(measured.frame) == 60 - rejected and measured.skipped == {"rejected by the simulation": rejected}


def test_fit_names_are_known_and_given_once(tmp_path):
    w = workloads.load_preset("sharegpt-demo", num_requests=40, seed=0)
    path = tmp_path / "r.csv"
    run_simulation(SimConfig(kv_tokens=5000), w).requests.to_csv(path, index=False)
    run = read_measured(path)
    with pytest.raises(ValueError, match="--fit names bandwidth_frac more than once"):
        fit_trace(run, SimConfig(kv_tokens=5000), fit=("bandwidth_frac", "bandwidth_frac"))
    with pytest.raises(ValueError, match="cannot fit bandwith_frac; fittable: "):
        fit_trace(run, SimConfig(kv_tokens=5000), fit=("bandwith_frac",))


def test_latencies_in_milliseconds_fit_to_implausible_fractions_and_warn(tmp_path):
    """Seconds' columns holding milliseconds: on a light run the fit absorbs the factor into the fractions (about a
    thousandth of the GPU's peaks) and can score under the 50% MAPE warning, so the fractions are checked too."""
    w = workloads.load_preset("sharegpt-demo", num_requests=60, seed=0)
    frame = run_simulation(SimConfig(model="llama-2-7b", gpu="h100-80gb"), w).requests
    frame = frame.rename(columns={"arrival_s": "arrival_time_s"}).assign(ttft_s=frame.ttft_s * 1000,
                                                                         e2e_s=frame.e2e_s * 1000)
    path = tmp_path / "ms.csv"
    frame[["arrival_time_s", "prompt_tokens", "output_tokens", "ttft_s", "e2e_s"]].to_csv(path, index=False)
    result = CliRunner().invoke(main, ["calibrate", "--from-trace", str(path), "--model", "llama-2-7b", "--gpu",
                                       "h100-80gb", "--out", str(tmp_path / "t.json"), "--max-evals", "20"])
    assert result.exit_code == 0, result.output
    assert "a GPU running at under 5% of its peak is implausible" in result.stderr


SESSION_TRUTH = dict(bandwidth_frac=0.75, flops_frac=0.58, seq_overhead_s=6e-5)


def _session_run(path, num_requests: int = 240):
    """A multi-turn chat run (4 turns, 2 s think time) simulated with `SESSION_TRUTH`, its requests table
    written to ``path`` (Parquet, as ``kvsim run --out`` writes it)."""
    from workloads.named import generate

    w = generate("lognormal:prompt_mean=400,prompt_cv=1,output_mean=150,output_cv=1,max_total=3000",
                 "poisson:rate=2", num_requests, seed=1, turns=4, think_time_s=2.0)
    truth = dict(PROFILES["vllm-v1"].coefficients, **SESSION_TRUTH)
    cost = StepCostModel(get_model("llama-2-7b"), get_gpu("h100-80gb"), **truth)
    requests = run_simulation(SimConfig(**LLAMA), w, cost=cost).requests
    assert requests["cached_tokens"].sum() > 0.5 * requests["prompt_tokens"].sum()  # later turns hit
    requests.to_parquet(path, index=False)
    return requests


@pytest.mark.parametrize("holdout", ["random", "time"])
def test_a_session_run_fits_back_with_each_turns_hits(tmp_path, holdout):
    """A measured chat run's later turns hit what the previous turn computed; replayed as unrelated requests they
    were computed in full, and the fit bent the coefficients to match (flops_frac at its bound 1.0, TTFT MAPE 50%
    training, 44% held-out). With ``session_id`` and ``turn`` carried the fit recovers the coefficients, on both
    halves, whichever half each turn falls in (every request is simulated: the split only picks the compared).
    TTFT MAPE stays near 15%: a cached turn's TTFT is a step or two, and where in a step it arrives moves it."""
    path = tmp_path / "requests.parquet"
    _session_run(path)
    config = SimConfig(**LLAMA)
    result = fit_trace(read_measured(path), config, holdout=holdout)
    for name in ("bandwidth_frac", "flops_frac"):
        assert result.coefficients[name] == pytest.approx(SESSION_TRUTH[name], rel=0.05), name
    assert result.coefficients["seq_overhead_s"] == pytest.approx(SESSION_TRUTH["seq_overhead_s"], rel=0.2)
    for table in (result.train_score, result.heldout_score):
        mape = overall(table)
        assert mape["ttft"] < 0.2 and mape["tpot"] < 0.01 and mape["e2e"] < 0.01, mape
    if holdout == "random":
        pd.read_parquet(path).drop(columns=["session_id", "turn"]).to_parquet(path, index=False)
        unrelated = fit_trace(read_measured(path), config, holdout=holdout)
        assert overall(unrelated.train_score)["ttft"] > 0.35 and unrelated.coefficients["flops_frac"] > 0.9


def test_a_run_with_a_shared_system_prompt_fits_back_with_its_hits(tmp_path):
    """Half the requests carry a 200-token system prompt that the run's prefix cache served after its first use.
    kvsim's requests table did not say which (no ``prefix_group``, ``prefix_len``): replayed, every prompt was
    computed in full and the fit bent flops_frac from 0.58 to 0.76 (TTFT MAPE 18% training, 21% held-out);
    carried, it recovers the coefficients. A request without the prompt has the group NA and a length of 0."""
    from workloads.named import generate

    w = generate("lognormal:prompt_mean=300,prompt_cv=1,output_mean=100,output_cv=1,max_total=3000",
                 "poisson:rate=3", 200, seed=0, system_prompt_len=200, system_prompt_frac=0.5)
    cost = StepCostModel(get_model("llama-2-7b"), get_gpu("h100-80gb"),
                         **dict(PROFILES["vllm-v1"].coefficients, **SESSION_TRUTH))
    requests = run_simulation(SimConfig(**LLAMA), w, cost=cost).requests
    shared = requests["prefix_group"].notna()
    assert requests["prefix_group"].dtype == "Int64" and 0 < shared.sum() < len(requests)
    assert (requests["prefix_len"] == np.where(shared, 200, 0)).all()
    path = tmp_path / "requests.csv"
    requests.to_csv(path, index=False)
    result = fit_trace(read_measured(path), SimConfig(**LLAMA))
    for name in ("bandwidth_frac", "flops_frac"):
        assert result.coefficients[name] == pytest.approx(SESSION_TRUTH[name], rel=0.05), name
    assert overall(result.heldout_score)["ttft"] < 0.15
    requests.drop(columns=["prefix_group", "prefix_len"]).to_csv(path, index=False)
    assert fit_trace(read_measured(path), SimConfig(**LLAMA)).coefficients["flops_frac"] > 0.7


def test_a_turn_the_simulation_rejected_leaves_its_session_chained_to_the_turn_before(tmp_path):
    """kvsim's own table leaves rejected requests out: the later turns of a session follow its last kept turn
    (their prompts still begin with its tokens), numbered on, instead of refusing the file for a missing turn; so
    does a replay of a selection of the rows."""
    from workloads.errors import TraceWarning

    path = tmp_path / "requests.parquet"
    requests = _session_run(path, num_requests=40)
    middle = int(np.flatnonzero(requests["turn"].to_numpy() == 1)[0])
    session = requests["session_id"].iloc[middle]
    requests.loc[middle, ["rejected", "ttft_s", "e2e_s"]] = [True, np.nan, np.nan]
    requests.to_parquet(path, index=False)
    with pytest.warns(TraceWarning, match="1 request.s. left out .* rejected by the simulation"):
        run = read_measured(path)
    assert run.frame.loc[run.frame["session_id"] == session, "turn"].tolist() == [0, 1, 2]
    assert replay(run, SimConfig(**LLAMA))["ttft_s"].notna().all()
    assert replay(run, SimConfig(**LLAMA), rows=run.frame["turn"].to_numpy() != 1)["ttft_s"].notna().all()


def test_session_turns_are_checked_in_arrival_order(tmp_path):
    """The replay sends turns in arrival order, so a file listing a later turn first reads; its session and turn
    columns come through in arrival order, a name for a session reading as an id of its own."""
    path = tmp_path / "m.csv"
    path.write_text("arrival_time_s,prompt_tokens,output_tokens,ttft_s,e2e_s,session_id,turn\n"
                    "3,300,10,0.1,0.5,chat-a,1\n0,100,10,0.1,0.5,chat-a,0\n1,50,10,0.1,0.5,,\n")
    frame = read_measured(path).frame
    assert frame["turn"].tolist() == [0, 0, 1] and frame["session_id"].iloc[1] == -1
    assert frame["session_id"].iloc[0] == frame["session_id"].iloc[2] >= 0


SAMPLED_TRUTH = dict(bandwidth_frac=0.75, flops_frac=0.58, seq_overhead_s=2.7e-5)


def _sampled_run(path, parallel_sampling: str, quiet_rate: float = 0.5, **sampling) -> tuple[SimConfig, StepCostModel]:
    """The round trip's requests (`test_round_trip_recovers_known_coefficients`: the first third arriving at
    ``quiet_rate`` a second, the rest at 5), each with ``sampling`` (``n=3``: sampled 3 times; ``beam_width=3``;
    none: one sequence), simulated with `SAMPLED_TRUTH` under ``parallel_sampling``; kvsim's own requests table is
    written to ``path`` (CSV). Returns the run's configuration and clock."""
    rng, size = np.random.default_rng(1), 240
    gaps = rng.exponential(1 / np.where(np.arange(size) < size // 3, quiet_rate, 5.0))
    prompt, output = rng.integers(50, 3000, size), rng.integers(100, 600, size)
    w = workloads.Workload(np.cumsum(gaps), prompt, output, max_tokens=output,
                           **{name: np.full(size, value) for name, value in sampling.items()})
    config = SimConfig(**LLAMA, parallel_sampling=parallel_sampling)
    cost = StepCostModel(get_model("llama-2-7b"), get_gpu("h100-80gb"),
                         **dict(PROFILES["vllm-v1"].coefficients, **SAMPLED_TRUTH))
    requests = run_simulation(config, w, cost=cost).requests
    for name in ("n", "beam_width"):
        assert (requests[name] == sampling.get(name, 1)).all(), name
    requests.to_csv(path, index=False)
    return config, cost


@pytest.mark.parametrize("parallel_sampling,sampling", [("fan-out", {"n": 3}), ("fork", {"n": 3}),
                                                         ("auto", {"beam_width": 3})])
def test_a_sampled_run_replays_exactly_under_its_own_coefficients(tmp_path, parallel_sampling, sampling):
    """kvsim's requests table carries each request's ``n`` and ``beam_width``: replayed with the coefficients
    it was simulated with, every latency comes back (TPOT as the measured one is computed: a fanned-out
    request's span over its children, not the table's mean of them, which differs by up to 0.8% here). Before,
    each request replayed as one sequence."""
    path = tmp_path / "requests.csv"
    config, cost = _sampled_run(path, parallel_sampling, **sampling)
    run = read_measured(path)
    assert run.frame[next(iter(sampling))].tolist() == [3] * 240
    simulated = replay(run, config, cost)
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        assert simulated[metric].to_numpy() == pytest.approx(run.frame[metric].to_numpy(), rel=1e-9), metric


@pytest.mark.parametrize("parallel_sampling", ["fan-out", "fork"])
def test_a_sampled_run_fits_back_with_its_samples(tmp_path, parallel_sampling):
    """A run sampling each request 3 times, replayed as one sample each (kvsim's table said only ``num_seqs``,
    which mixes samples and beams), fitted seq_overhead_s 5.4e-4 against 2.7e-5 under fan-out (flops_frac 0.32
    against 0.58, TTFT MAPE 57% held out) and flops_frac 0.15 under fork (TTFT 158%). With ``n`` carried every
    coefficient comes back within 5%. Frozen-schedule steps alone stopped seq_overhead_s 15% high under fan-out,
    where the children's stagger (a child admitted a step after its sibling) makes decode times jump with the
    coefficients as TTFTs do; the secant-led start ends within 2%."""
    path = tmp_path / "requests.csv"
    config, _ = _sampled_run(path, parallel_sampling, n=3)
    result = fit_trace(read_measured(path), config)
    for name, value in SAMPLED_TRUTH.items():
        assert result.coefficients[name] == pytest.approx(value, rel=0.05), name
    assert overall(result.heldout_score)["e2e"] < 0.01
    if parallel_sampling == "fan-out":
        pd.read_csv(path).drop(columns=["n", "beam_width"]).to_csv(path, index=False)
        with pytest.warns(UserWarning, match="fan-out ignored: no request of this workload is sampled"):
            single = fit_trace(read_measured(path), config)
        assert single.coefficients["seq_overhead_s"] > 5 * SAMPLED_TRUTH["seq_overhead_s"]


def test_a_loaded_run_fits_back_out_of_the_bandwidth_overhead_valley(tmp_path):
    """240 requests at 5/s, 30 sequences a step on average: the whole run's derivatives are 2-3 times the
    frozen schedule's (faster steps shrink later batches), and frozen steps alone slid along the valley where
    bandwidth_frac and seq_overhead_s trade off, to bandwidth_frac +7.7% and seq_overhead_s +116% (TPOT 1.1%
    held out). The secant-led start ends within 1% on both fractions and 6% on seq_overhead_s, TPOT 0.5%. That
    6% is the objective's own: TTFTs move with where arrivals fall in a step, and 80% of points within 3% of the
    truth score worse than the fit."""
    path = tmp_path / "requests.csv"
    config, _ = _sampled_run(path, "auto", quiet_rate=5.0)
    result = fit_trace(read_measured(path), config)
    for name, rel in (("bandwidth_frac", 0.02), ("flops_frac", 0.02), ("seq_overhead_s", 0.1)):
        assert result.coefficients[name] == pytest.approx(SAMPLED_TRUTH[name], rel=rel), name
    assert overall(result.heldout_score)["tpot"] < 0.008


RELOADING = dict(LLAMA, kv_tokens=32_768, max_num_seqs=64, max_num_batched_tokens=2048, cpu_offload_gib=64.0,
                 offload_write_policy="write_through", offload_loads="async")
"""A write-through host tier loaded beside the steps, behind a GPU cache holding 21 of 48 shared prefixes."""


def _reloading_run(num_requests: int = 240) -> tuple[workloads.Workload, StepCostModel]:
    """Requests at 2/s, each opening with one of 48 shared 1536-token prefixes (96 blocks: a load of about 38 ms,
    three decode steps): the GPU has evicted a prefix before it comes round again about half the time, and the
    request loads it back from the host tier. Returns the workload and the clock with `SESSION_TRUTH`."""
    rng = np.random.default_rng(3)
    arrivals = np.cumsum(rng.exponential(0.5, num_requests))
    group = rng.integers(0, 48, num_requests)
    prefix = np.full(num_requests, 1536)
    prompt = prefix + rng.integers(32, 400, num_requests)
    output = rng.integers(50, 300, num_requests)
    w = workloads.Workload(arrivals, prompt, output, max_tokens=output, prefix_group=group, prefix_len=prefix,
                           name="reloading")
    cost = StepCostModel(get_model("llama-2-7b"), get_gpu("h100-80gb"),
                         **dict(PROFILES["vllm-v1"].coefficients, **SESSION_TRUTH))
    return w, cost


def test_loads_beside_the_steps_are_no_rows_calls_in_the_schedule_jacobian():
    """A load beside the steps is priced when it starts (`HostLoads`), outside any row. `RecordingStepCost`
    remembered it among the rows' calls, which `row_calls` deals out by duration: a row after a load as long as its
    step took the load for its own and left its step to the next row, and so on (139 of the 777 busy rows here
    were dealt calls that did not add up to their duration, and 25 of the 240 decode times moved by up to 5 steps
    too many or too few under step_overhead_s + h). Now every busy row's calls add up to it, and a request's
    decode time moves by h a step."""
    from sim.schedule_jacobian import RecordingStepCost, row_calls, schedule_jacobian

    w, truth = _reloading_run()
    cost = RecordingStepCost(model=truth.model, gpu=truth.gpu, **dict(PROFILES["vllm-v1"].coefficients,
                                                                      **SESSION_TRUTH))
    result = run_simulation(SimConfig(**RELOADING), w, cost=cost)
    steps, requests = result.steps, result.requests
    assert (requests["host_hit_tokens"] > 0).sum() > 10
    busy = steps["num_steps"].to_numpy() > 0
    dealt = np.array([sum(call[3] for call in calls) for calls in row_calls(steps, cost.calls)])
    assert dealt[busy] == pytest.approx(steps["duration_s"].to_numpy()[busy], rel=1e-9)
    h = 1e-4
    slower = StepCostModel(truth.model, truth.gpu, **dict(PROFILES["vllm-v1"].coefficients, **SESSION_TRUTH,
                                                          step_overhead_s=truth.step_overhead_s + h))
    _, d_decode = schedule_jacobian(steps, cost.calls, [slower], h, requests)
    ends = (steps["time_s"] + steps["duration_s"]).to_numpy()
    decode_steps = [steps["num_steps"][(ends > first + 1e-9) & (ends <= finish + 1e-9)].sum()
                    for first, finish in zip(requests["first_token_s"], requests["finished_s"], strict=True)]
    assert d_decode[:, 0] == pytest.approx(decode_steps, rel=1e-6)


def test_a_run_loading_from_a_host_tier_beside_the_steps_fits_back(tmp_path):
    """Half the requests load their prefix back from a write-through host tier beside the steps (`_reloading_run`).
    Those loads' calls, priced outside any row, shifted the schedule Jacobian's rows: the fit stopped at flops_frac
    +4.7% and seq_overhead_s +7.2% (TTFT MAPE 12.6% training, 6.9% held out). Dealt only the rows' own calls, it
    ends within 2% of every coefficient (TTFT 5.1% and 4.9%). seq_overhead_s stays the weakly identified one
    (``docs/validation.md``): other draws of this run end up to 3.4% off, some other workloads 5-13%."""
    w, cost = _reloading_run()
    config = SimConfig(**RELOADING)
    requests = run_simulation(config, w, cost=cost).requests
    assert requests["host_hit_tokens"].sum() > 0.35 * requests["prompt_tokens"].sum()
    path = tmp_path / "requests.csv"
    requests.to_csv(path, index=False)
    result = fit_trace(read_measured(path), config)
    for name in result.fitted:
        assert result.coefficients[name] == pytest.approx(SESSION_TRUTH[name], rel=0.05), name
    assert overall(result.heldout_score)["e2e"] < 0.01
