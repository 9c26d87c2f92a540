"""kvsim's requests table carries each request's prefix hashes (``hash_ids``, ``prefix_hash_tokens``), so that a
simulated Mooncake-style run read back by ``kvsim calibrate --from-trace`` (`sim.measured`) replays the cache
hits it had. Before, the table had no hash column and the replay of such a run hit nothing."""

import warnings

import numpy as np
import pandas as pd
import pytest

import workloads
from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from sim.measured import read_measured
from sim.replay import replay, workload_of
from workloads import Workload
from workloads.presets import SAMPLES_DIR

MOONCAKE = SAMPLES_DIR / "conversation_trace.jsonl"
CONFIG = dict(model="llama-3-8b", gpu="a100-40gb", kv_tokens=120_000, max_num_batched_tokens=8192)
TAIL = ["normalized_latency_s_per_tok", "trace_row", "hash_ids", "prefix_hash_tokens"]


def _write(requests: pd.DataFrame, path) -> None:
    requests.to_csv(path, index=False) if path.suffix == ".csv" else requests.to_parquet(path, index=False)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_mooncake_run_round_trips_through_the_measured_reader_with_its_hits(tmp_path, suffix):
    """The shipped Mooncake sample's first 60 requests that fit Llama-3-8B's context share 512-token blocks (hash
    0 on every one): the run hits them on every request after the first, 32,256 tokens; its table read back as a
    measured run replays the same hits request by request (none before the columns existed) and every latency."""
    trace = workloads.load_trace(MOONCAKE)
    w = trace.select(np.flatnonzero(trace.prompt_tokens + trace.output_tokens <= 8192)[:60])
    config = SimConfig(**CONFIG)
    requests = run_simulation(config, w).requests
    assert list(requests.columns[-len(TAIL):]) == TAIL
    assert requests["hash_ids"].iloc[1] == " ".join(map(str, w.prefix_hashes(1).tolist()))
    assert (requests["prefix_hash_tokens"] == 512).all()
    hits = requests["cached_tokens"].to_numpy()
    assert not requests["rejected"].any() and hits.sum() == 32_256 and (hits > 0).sum() == 59
    path = tmp_path / f"requests{suffix}"
    _write(requests, path)
    run = read_measured(path)
    assert run.prefix_hash_tokens == 512 and run.frame["hash_ids"].iloc[1] == tuple(w.prefix_hashes(1).tolist())
    back = run_simulation(config, workload_of(run)).requests
    assert back["cached_tokens"].tolist() == hits.tolist()
    simulated = replay(run, config)
    for metric in ("ttft_s", "e2e_s"):
        assert simulated[metric].to_numpy() == pytest.approx(run.frame[metric].to_numpy(), rel=1e-9), metric
    _write(requests.drop(columns=["hash_ids", "prefix_hash_tokens"]), path)  # the table as it was
    assert run_simulation(config, workload_of(read_measured(path))).requests["cached_tokens"].sum() == 0


def test_a_units_other_than_512_and_a_request_without_hashes_come_back():
    """The workload's ``prefix_hash_tokens`` on every row; a request with no hashes is NA, as a blank cell."""
    w = Workload(arrival_time_s=np.array([0.0, 5.0, 10.0]), prompt_tokens=np.array([200, 200, 50]),
                 output_tokens=np.array([3, 3, 3]), hash_offsets=np.array([0, 3, 6, 6]),
                 hash_values=np.array([1, 2, 3, 1, 2, 4]), prefix_hash_tokens=64)
    requests = run_simulation(SimConfig(step_time=0.01), w).requests
    assert requests["hash_ids"].tolist()[:2] == ["1 2 3", "1 2 4"] and pd.isna(requests["hash_ids"].iloc[2])
    assert requests["prefix_hash_tokens"].tolist() == [64, 64, 64]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_workload_without_hashes_has_the_columns_na_and_reads_back(tmp_path, suffix):
    """As ``session_id`` and ``prefix_group``, the columns are on every table, NA where unused; the measured
    reader takes that for no hashes at Mooncake's 512 (a Parquet column of nullable integers, all NA, too)."""
    w = workloads.Workload(np.arange(4.0), np.full(4, 100), np.full(4, 10), max_tokens=np.full(4, 10))
    requests = run_simulation(SimConfig(step_time=0.01), w).requests
    assert requests["hash_ids"].isna().all() and requests["prefix_hash_tokens"].isna().all()
    assert requests["prefix_hash_tokens"].dtype == "Int64"
    path = tmp_path / f"requests{suffix}"
    _write(requests, path)
    run = read_measured(path)
    assert run.prefix_hash_tokens == 512 and run.frame["hash_ids"].tolist() == [()] * 4


def test_a_fleet_keeps_replica_after_trace_row_and_a_fanned_out_request_its_own_hashes():
    """A fleet's ``replica`` stays where it was, right after ``trace_row``; the hash columns follow it. A request
    sampled n times is one row with its own hashes, not one per child."""
    w = Workload(arrival_time_s=np.array([0.0, 1.0, 2.0]), prompt_tokens=np.array([100, 100, 100]),
                 output_tokens=np.array([3, 3, 3]), n=np.array([1, 3, 1]), hash_offsets=np.array([0, 1, 2, 3]),
                 hash_values=np.array([7, 7, 8]), prefix_hash_tokens=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        requests = run_simulation(SimConfig(step_time=0.01, replicas=2, parallel_sampling="fan-out"), w).requests
    assert list(requests.columns[-5:]) == ["normalized_latency_s_per_tok", "trace_row", "replica", "hash_ids",
                                           "prefix_hash_tokens"]
    assert requests["hash_ids"].tolist() == ["7", "7", "8"] and requests["n"].tolist() == [1, 3, 1]
