"""Regression: the summary counts rejections by reason (``rejected_reasons``), numbers normalised away so
per-request messages group; the text summary of ``kvsim run`` shows them when anything was rejected."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from sim.kernel.summary import reject_category
from workloads import Workload


def test_reject_category_groups_messages_that_differ_in_numbers():
    a = reject_category("prompt + output = 5000 tokens exceeds max_model_len 4096")
    b = reject_category("prompt + output = 4100 tokens exceeds max_model_len 4096")
    assert a == b == "prompt + output = N tokens exceeds max_model_len 4096"
    assert reject_category("paged: needs 3.5 of x-2 (12 blocks)") == "paged: needs N of x-2 (N blocks)"
    slab = "contiguous-oracle: needs 9000 slots (rounded up to 16384 by buddy placement) but the largest possible"
    assert reject_category(f"{slab} slab is 8192 in a pool of 15728") == (
        "contiguous-oracle: needs N slots (rounded up to N by buddy placement) but the largest possible slab is 8192 "
        "in a pool of 15728")  # the request's sizes grouped, the pool's limits kept


def test_summary_counts_rejections_by_reason_deterministically():
    w = Workload(arrival_time_s=np.zeros(5), prompt_tokens=np.array([5000, 4500, 100, 100, 100]),
                 output_tokens=np.array([10, 20, 10, 10, 10]), n=np.array([1, 1, 1, 1, 300]), name="t")
    # (fork: a group's sequences count against max_num_seqs together; fanned out, the 300 samples queue alone)
    config = SimConfig(kv_tokens=20_000, max_model_len=4096, step_time=0.01, parallel_sampling="fork")
    r = run_simulation(config, w)
    reasons = r.summary["rejected_reasons"]
    assert reasons == {"prompt of N tokens leaves no room for an output token within max_model_len 4096": 2,
                       "needs N sequences but max_num_seqs is 256": 1}
    assert list(reasons) == sorted(reasons, key=lambda k: (-reasons[k], k))
    assert r.requests["reject_reason"].iloc[0] == ("prompt of 5000 tokens leaves no room for an output token within "
                                                   "max_model_len 4096")
    assert run_simulation(config, w).summary["rejected_reasons"] == reasons
    with pytest.warns(UserWarning, match="--parallel-sampling fork ignored"):  # neither of the two samples
        assert run_simulation(config, w.select(np.array([2, 3]))).summary["rejected_reasons"] == {}


def test_kvsim_run_prints_reasons_only_when_something_was_rejected(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,5000,10\n0,100,10\n")
    runner = CliRunner()
    out = runner.invoke(main, ["run", str(path), "--kv-tokens", "20000", "--max-model-len", "4096",
                               "--step-time", "0.01"])
    assert out.exit_code == 0, out.output
    assert "rejected_reasons" in out.output
    assert "1 x prompt of N tokens leaves no room for an output token within max_model_len 4096" in out.output
    nothing = ["run", str(path), "--kv-tokens", "20000", "--step-time", "0.01", "--max-model-len", "8192"]
    assert json.loads(runner.invoke(main, [*nothing, "--json"]).stdout)["rejected_reasons"] == {}
    out = runner.invoke(main, nothing)
    assert out.exit_code == 0 and "rejected_reasons" not in out.output
