"""``--over-length``: a request whose prompt fits ``max_model_len`` but whose prompt + output does not has its
output stopped at ``max_model_len`` (``cap``, the default: vLLM's ``FINISHED_LENGTH_CAPPED``), or is refused
(``reject``); a prompt of ``max_model_len`` tokens or more is refused either way. Exactness against vLLM's own
scheduler is the ``max_model_len_capped`` case of ``test_sim_vllm_parity.py`` (43 of its 150 requests cut)."""

import dataclasses
import json

import numpy as np
import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.over_length import cap_outputs
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_same_summary, assert_same_tiered_run
from workloads import Workload

NO_ROOM = "prompt of {} tokens leaves no room for an output token within max_model_len 1024"


def lengths(prompt: list[int], output: list[int], **columns) -> Workload:
    return Workload(arrival_time_s=np.arange(len(prompt), dtype=float), prompt_tokens=np.array(prompt),
                    output_tokens=np.array(output), name="lengths", **columns)


W = lengths([900, 100, 1000, 1024, 1500], [300, 50, 24, 10, 10])
"""Cut by 176 tokens; short; exactly max_model_len long (not cut); a prompt with no room left; one past it."""


@pytest.mark.parametrize("allocator", ["paged", "radix", "contiguous-max", "contiguous-oracle", "vattention"])
def test_an_output_past_max_model_len_stops_there_on_every_allocator(allocator):
    """900 + 300 tokens under a max_model_len of 1024 runs as 900 + 124: vLLM's scheduler stops a request whose
    tokens reach max_model_len, so the run generates 124 tokens and the table says 176 were cut."""
    r = run_simulation(SimConfig(allocator=allocator, max_model_len=1024, step_time=0.01, debug_invariants=1), W)
    req = r.requests
    assert req["output_tokens"].tolist() == [124, 50, 24, 10, 10]
    assert req["length_capped_tokens"].tolist() == [176, 0, 0, 0, 0]
    assert req["rejected"].tolist() == [False, False, False, True, True]
    assert req["reject_reason"].tolist()[3:] == [NO_ROOM.format(1024), NO_ROOM.format(1500)]
    assert r.summary["length_capped"] == 1 and r.summary["completed"] == 3
    assert req["e2e_s"].iloc[0] == pytest.approx(req["ttft_s"].iloc[0] + 123 * req["tpot_s"].iloc[0])
    decoded = (r.steps["decode_seqs"] * r.steps["num_steps"]).sum()
    assert decoded == 123 + 49 + 23  # the first token of each comes with its prefill


def test_a_cut_request_that_is_then_rejected_is_not_counted_as_stopped():
    """``length_capped`` counts the requests whose output stopped at max_model_len: one cut and then refused (a
    pool too small for it) never ran, so it is a rejection only; its row still says how much was cut."""
    r = run_simulation(SimConfig(allocator="contiguous-max", kv_tokens=1000, max_model_len=1024, step_time=0.01), W)
    req = r.requests
    assert req["length_capped_tokens"].tolist() == [176, 0, 0, 0, 0] and bool(req["rejected"].iloc[0])
    assert r.summary["length_capped"] == 0


def test_reject_refuses_what_cap_cuts_with_the_limit_it_crosses():
    r = run_simulation(SimConfig(max_model_len=1024, over_length="reject", step_time=0.01), W)
    assert r.requests["rejected"].tolist() == [True, False, False, True, True]
    assert r.requests["reject_reason"].iloc[0] == "prompt + output = 1200 tokens exceeds max_model_len 1024"
    assert r.summary["rejected_reasons"] == {NO_ROOM.format("N"): 2,
                                             "prompt + output = N tokens exceeds max_model_len 1024": 1}
    assert r.summary["length_capped"] == 0 and r.requests["length_capped_tokens"].tolist() == [0] * 5


def test_a_cut_lowers_max_tokens_too_and_leaves_a_workload_that_fits_alone():
    """The trace's max_tokens (a bound contiguous-max reserves by: >= output_tokens) is lowered to the model's
    room wherever it is larger, as vLLM's server takes the least of the two, whether or not the output is cut;
    a workload with nothing to cut is returned as is."""
    w = lengths([900, 100, 1000], [300, 50, 20], max_tokens=np.array([400, 60, 500]))
    config = SimConfig(max_model_len=1024)
    cut = cap_outputs(config, w)
    assert cut.output_tokens.tolist() == [124, 50, 20] and cut.max_tokens.tolist() == [124, 60, 24]
    assert cut.length_capped.tolist() == [176, 0, 0]
    only_bound = cap_outputs(config, w.select(np.array([2])))  # nothing cut, the bound lowered all the same
    assert only_bound.max_tokens.tolist() == [24] and only_bound.length_capped.tolist() == [0]
    assert cap_outputs(config, cut) is cut and cap_outputs(SimConfig(max_model_len=2048), w) is w
    assert cap_outputs(SimConfig(max_model_len=1024, over_length="reject"), w) is w


def test_the_default_limit_is_the_models_context():
    """Without --max-model-len the model's own context (OPT-13B: 2048) bounds the request."""
    r = run_simulation(SimConfig(step_time=0.01), lengths([2000, 100], [100, 10]))
    assert r.requests["output_tokens"].tolist() == [48, 10] and r.summary["length_capped"] == 1


@pytest.mark.parametrize("mode", ["fan-out", "fork"])
def test_every_sample_of_a_request_stops_at_the_same_length(mode):
    """A request sampled 4 times: each sample stops at max_model_len; the table's one row says so once."""
    w = lengths([900, 100], [300, 50], n=np.array([4, 1]))
    r = run_simulation(SimConfig(max_model_len=1024, parallel_sampling=mode, step_time=0.01), w)
    assert r.requests["output_tokens"].tolist() == [124, 50] and r.requests["num_seqs"].tolist() == [4, 1]
    assert r.requests["length_capped_tokens"].tolist() == [176, 0] and r.summary["length_capped"] == 1
    assert r.summary["throughput_tok_s"] * r.summary["sim_time_s"] == pytest.approx(4 * 124 + 50)


def test_a_fleet_cuts_as_one_engine_does_in_one_process_or_two():
    config = SimConfig(max_model_len=1024, replicas=2, step_time=0.01)
    one = run_simulation(config, W)
    assert one.requests["length_capped_tokens"].tolist() == [176, 0, 0, 0, 0]
    assert one.summary["length_capped"] == 1
    two = run_simulation(config, W, workers=2)
    assert one.requests.equals(two.requests)
    assert_same_summary(one.summary, two.summary)


def test_fast_forward_and_stepping_agree_on_a_cut_run():
    w = lengths([900, 600, 700, 300], [400, 900, 100, 800])
    config = SimConfig(max_model_len=1024, kv_tokens=1200, step_time=0.01, debug_invariants=1)
    fast = run_simulation(config, w)
    slow = run_simulation(dataclasses.replace(config, step_by_step=True), w)
    assert fast.summary["length_capped"] == 3 and fast.summary["preemptions"] > 0
    assert_same_tiered_run(fast, slow)  # (no tier: its hits, preemptions, finishes, summary and memory map)


def test_kvsim_run_notes_the_cut_on_stderr_and_takes_the_flag(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,900,300\n1,100,50\n")
    args = ["run", str(path), "--max-model-len", "1024", "--step-time", "0.01", "--json"]
    cut = CliRunner().invoke(main, args)
    assert cut.exit_code == 0, cut.output
    assert json.loads(cut.stdout)["length_capped"] == 1
    assert ("Note: paged: 1 of 2 requests' outputs stopped at max_model_len, as vLLM stops them "
            "(length_capped_tokens in the requests table; --over-length reject rejects them instead)") in cut.stderr
    refused = CliRunner().invoke(main, [*args, "--over-length", "reject"])
    assert json.loads(refused.stdout)["rejected"] == 1 and "outputs stopped at max_model_len" not in refused.stderr
    bad = CliRunner().invoke(main, [*args, "--over-length", "truncate"])
    assert bad.exit_code == 2 and "'truncate' is not one of 'cap', 'reject'" in bad.output
    with pytest.raises(ValueError, match="--over-length must be one of cap, reject"):
        SimConfig(over_length="truncate")
