"""A measured run's ``hash_ids`` (Mooncake-style block hashes) are read, checked and replayed as the requests'
``prefix_hashes``, so that the replay's prefix cache hits what the measured one did."""

import re

import numpy as np
import pandas as pd
import pytest

import workloads
from allocators.catalog import get_gpu, get_model
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import StepCostModel
from sim.kernel.cost_profiles import PROFILES
from sim.kernel.runner import run_simulation
from sim.measured import read_measured
from sim.replay import overall, replay, workload_of
from sim.trace_fit import fit_trace
from workloads.errors import TraceError

HEADER = "arrival_time_s,prompt_tokens,output_tokens,ttft_s,e2e_s"
LLAMA = dict(model="llama-2-7b", gpu="h100-80gb", kv_tokens=119_008, max_num_seqs=256, max_num_batched_tokens=4096,
             max_model_len=4096, prefix_caching=True, watermark=0.0)
TRUTH = dict(bandwidth_frac=0.75, flops_frac=0.58, seq_overhead_s=6e-5)


def test_hash_ids_are_read_as_the_readers_read_a_csv_cell(tmp_path):
    """Space-separated whole numbers, blank for none, in arrival order; ``prefix_hash_tokens`` gives the unit
    (Mooncake's 512 where absent or blank)."""
    path = tmp_path / "m.csv"
    path.write_text(f"{HEADER},hash_ids\n1,1000,5,0.1,0.5,7 8\n0,600,5,0.1,0.5, 7  9 \n2,10,5,0.1,0.5,\n")
    run = read_measured(path)
    assert run.frame["hash_ids"].tolist() == [(7, 9), (7, 8), ()] and run.prefix_hash_tokens == 512
    workload = workload_of(run)
    assert [workload.prefix_hashes(i).tolist() for i in range(3)] == [[7, 9], [7, 8], []]
    path.write_text(f"{HEADER},hash_ids,prefix_hash_tokens\n0,1000,5,0.1,0.5,1 2 3 4,256\n1,600,5,0.1,0.5,1 2 3,\n")
    run = read_measured(path)
    assert run.prefix_hash_tokens == 256 and workload_of(run).prefix_hash_tokens == 256


@pytest.mark.parametrize("rows,message", [
    ('0,1000,5,0.1,0.5,1 2\n1,600,5,0.1,0.5,"[1, 3]"\n',
     "row 2: field 'hash_ids': bad value '[1, 3]' (must be whole numbers >= 0 separated by spaces"),
    ("0,1000,5,0.1,0.5,1 -2\n1,600,5,0.1,0.5,1\n", "row 1: field 'hash_ids': bad value '1 -2'"),
    ("0,1000,5,0.1,0.5,1 2.5\n1,600,5,0.1,0.5,1\n", "row 1: field 'hash_ids': bad value '1 2.5'"),
    ("0,1000,5,0.1,0.5,1 99999999999999999999\n1,600,5,0.1,0.5,1\n", "row 1: field 'hash_ids'"),
    ("0,1000,5,0.1,0.5,1 2\n1,600,5,0.1,0.5,1 2 3\n",
     "row 2: field 'hash_ids': bad value '1 2 3' (more hashes than 512-token blocks of the prompt)"),
])
def test_bad_hash_ids_name_file_row_and_field(tmp_path, rows, message):
    path = tmp_path / "m.csv"
    path.write_text(f"{HEADER},hash_ids\n{rows}")
    with pytest.raises(TraceError, match=re.escape(f"m.csv: {message}")):
        read_measured(path)


@pytest.mark.parametrize("columns,rows,message", [
    ("hash_ids,prefix_hash_tokens", "0,1000,5,0.1,0.5,1 2 3 4,256\n1,600,5,0.1,0.5,1 2 3,512\n",
     "row 2: field 'prefix_hash_tokens': bad value 512 (must be the same on every row"),
    ("hash_ids,prefix_hash_tokens", "0,1000,5,0.1,0.5,1,0\n1,600,5,0.1,0.5,1,\n",
     "row 1: field 'prefix_hash_tokens': bad value 0 (must be a whole number from 1"),
    ("hash_ids,prefix_group,prefix_len", "0,1000,5,0.1,0.5,,1,10\n1,600,5,0.1,0.5,1 2,1,10\n",
     "row 2: field 'hash_ids': bad value '1 2' (given with prefix_group"),
    ("hash_ids,session_id,turn", "0,1000,5,0.1,0.5,,a,0\n1,1600,5,0.1,0.5,1 2,a,1\n",
     "row 2: field 'hash_ids': bad value '1 2' (given on a session turn"),
])
def test_hash_ids_follow_the_readers_rules_with_other_columns(tmp_path, columns, rows, message):
    path = tmp_path / "m.csv"
    path.write_text(f"{HEADER},{columns}\n{rows}")
    with pytest.raises(TraceError, match=re.escape(f"m.csv: {message}")):
        read_measured(path)


def test_parquet_hash_ids_are_lists_of_integers(tmp_path):
    frame = pd.DataFrame({"arrival_time_s": [0.0, 1.0], "prompt_tokens": [1000, 600], "output_tokens": [5, 5],
                          "ttft_s": [0.1, 0.1], "e2e_s": [0.5, 0.5], "hash_ids": [[3, 4], None]})
    path = tmp_path / "m.parquet"
    frame.to_parquet(path, index=False)
    assert read_measured(path).frame["hash_ids"].tolist() == [(3, 4), ()]
    frame["hash_ids"] = [[1.5, 2.5], None]
    frame.to_parquet(path, index=False)
    with pytest.raises(TraceError, match=r"m.parquet: row 1: field 'hash_ids': bad value \[1.5, 2.5\]"):
        read_measured(path)


def _hashed_run(path) -> tuple[SimConfig, StepCostModel, int]:
    """200 requests at 3/s, each a Mooncake-style prompt: one of 8 shared documents (2-4 blocks of 512 tokens)
    and 1-3 blocks of its own, the last one partial; simulated with `TRUTH` and prefix caching, written to
    ``path`` as a measured CSV with ``hash_ids``. Returns the configuration, the clock and the prompt tokens that
    hit the cache."""
    rng = np.random.default_rng(0)
    size = 200
    docs = [list(range(100 * d, 100 * d + rng.integers(2, 5))) for d in range(8)]
    hashes = [docs[rng.integers(len(docs))] + [10_000 + 10 * i + k for k in range(rng.integers(1, 4))]
              for i in range(size)]
    prompt = np.array([512 * (len(h) - 1) + int(rng.integers(1, 513)) for h in hashes])
    arrival, output = np.cumsum(rng.exponential(1 / 3.0, size)), rng.integers(50, 400, size)
    offsets = np.concatenate([[0], np.cumsum([len(h) for h in hashes])])
    w = workloads.Workload(arrival, prompt, output, max_tokens=output, hash_offsets=offsets,
                           hash_values=np.concatenate(hashes))
    config = SimConfig(**LLAMA)
    cost = StepCostModel(get_model("llama-2-7b"), get_gpu("h100-80gb"),
                         **dict(PROFILES["vllm-v1"].coefficients, **TRUTH))
    requests = run_simulation(config, w, cost=cost).requests
    assert requests["cached_tokens"].sum() > 0.5 * requests["prompt_tokens"].sum()
    pd.DataFrame({"arrival_time_s": arrival, "prompt_tokens": prompt, "output_tokens": output,
                  "ttft_s": requests["ttft_s"], "e2e_s": requests["e2e_s"],
                  "hash_ids": [" ".join(map(str, h)) for h in hashes]}).to_csv(path, index=False)
    return config, cost, int(requests["cached_tokens"].sum())


def test_a_hashed_run_replays_its_hits_and_fits_back(tmp_path):
    """Replayed under its own coefficients, a run sharing prompts by hash_ids hits the blocks the simulation
    hit (242,688 of its 419,281 prompt tokens) and every latency comes back. Without the column the replay hit
    nothing, TTFTs came back up to 5.1 times as long, and the fit bent flops_frac to its bound 1.0 and
    seq_overhead_s to 4.3e-6 against 6e-5 (TTFT 36% MAPE on both halves); with it every coefficient comes back
    within 1.2% (TTFT 8.6% training, 12% held-out: where a short, cached prefill's arrival falls in a step moves
    it)."""
    path = tmp_path / "measured.csv"
    config, cost, cached = _hashed_run(path)
    run = read_measured(path)
    assert run_simulation(config, workload_of(run), cost=cost).requests["cached_tokens"].sum() == cached
    simulated = replay(run, config, cost)
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        assert simulated[metric].to_numpy() == pytest.approx(run.frame[metric].to_numpy(), rel=1e-9), metric
    result = fit_trace(run, config)
    for name, value in TRUTH.items():
        assert result.coefficients[name] == pytest.approx(value, rel=0.05), name
    assert overall(result.heldout_score)["ttft"] < 0.2

    pd.read_csv(path).drop(columns=["hash_ids"]).to_csv(path, index=False)
    blind = read_measured(path)
    assert run_simulation(config, workload_of(blind), cost=cost).requests["cached_tokens"].sum() == 0
    assert (replay(blind, config, cost)["ttft_s"] > 2 * blind.frame["ttft_s"]).any()
    assert fit_trace(blind, config).coefficients["flops_frac"] > 0.9
