"""``--async-scheduling`` against vLLM 0.33's own ``AsyncScheduler`` and engine batch queue, case by case.

The references in ``tests/sim/data/vllm_oracle/async`` were written by ``tools/vllm_oracle/async_gap.py --write``
(vLLM 0.33.0's ``AsyncScheduler`` driven step by step as ``EngineCore.step_with_batch_queue`` drives it: step t + 1
scheduled before step t's output is processed) on the synchronous cases' traces and settings. Every metric must
be equal, as in ``test_sim_vllm_parity.py``; the run's steps are counted to its end, which takes the engine's
last step that only hands the last outputs back (vLLM's engine schedules it, computing nothing).
"""

import dataclasses
import json

import numpy as np
import pytest

from sim.kernel import async_outputs
from sim.kernel.config import SimConfig
from sim.kernel.runner import run_config, run_simulation
from tests.sim.summaries import assert_fast_forward_equals_stepping
from tests.sim.vllm_oracle import DATA, cases, compare
from workloads import load_trace, workload_from_frame
from workloads.workload import ClosedLoop

ASYNC = DATA / "async"
CASES = cases(ASYNC)



def async_config(case: str, *, step_by_step: bool = False) -> SimConfig:
    """The case's kvsim configuration (`compare.kvsim_config`) with vLLM's async scheduling on."""
    settings = json.loads((DATA / case / "settings.json").read_text())
    config = compare.kvsim_config(settings, DATA / case / "trace.csv", step_by_step=step_by_step)
    return dataclasses.replace(config, async_scheduling=True)


def async_metrics(case: str, *, step_by_step: bool = False) -> dict:
    """`compare.METRICS` of kvsim's async run: as `compare.kvsim_metrics`, but steps counted to the run's end."""
    result = run_config(async_config(case, step_by_step=step_by_step))
    assert not result.requests["rejected"].any(), case
    return compare.run_metrics(result, compare.total_steps(result, asynchronous=True))


def test_the_async_references_cover_the_synchronous_cases():
    """Every case `async_gap.py` runs that kvsim models under async scheduling has its reference."""
    assert set(CASES) >= {"contended", "ample", "shared_prefix_cached", "shared_prefix_uncached", "long_prompts_2048",
                          "long_prompts_8192", "max_num_seqs", "block_size_32", "offline_burst",
                          "long_prefill_threshold", "small_budget_threshold", "reserve_full_isl_off", "priority",
                          "priority_contended", "max_model_len_capped", "hybrid_long_prompts", "hybrid_contended",
                          "hybrid_shared_prefix", "hybrid_shared_prefix_uncached", "hybrid_reserve_full_isl_off",
                          "hybrid_long_prefill_threshold", "hybrid_small_budget_threshold", "hybrid_priority",
                          "hybrid_priority_contended", "hybrid_long_prompts_2048", "hybrid_long_prompts_8192",
                          "hybrid_block_size_32", "hybrid_block_size_256", "hybrid_offline_burst",
                          "hybrid_max_num_seqs", "hybrid_max_model_len_capped", "parallel_sampling",
                          "parallel_sampling_priority", "hybrid_parallel_sampling", "sessions_open_loop",
                          "hybrid_sessions", "offload_sessions", "offload_shared_prefix", "offload_arc_sessions",
                          "offload_arc_shared_prefix", "offload_whole_prompts",
                          # vLLM 0.33's default sparse window retention above; dense and periodic here
                          "hybrid_contended_dense", "hybrid_shared_prefix_dense", "hybrid_sessions_dense",
                          "hybrid_retention_interval_256",
                          # found by tools/vllm_oracle/fuzz.py: a host store seen written a step late
                          "offload_whole_prompts_few",
                          # arrivals released by finishes (`releases.py` plays the client)
                          "closed_loop", "closed_loop_priority", "sessions_released",
                          # generated blocks offloaded too: stored once their hashes are known
                          "offload_generated_blocks",
                          # a trace's own prefix hashes (hash_ids)
                          "hash_units", "hash_units_40", "offload_hash_units",
                          # decoders meeting a full pool in a running order preemptions reordered
                          "offload_full_pool_decoders"}


@pytest.mark.parametrize("case", CASES)
def test_kvsim_makes_async_vllms_decisions(case):
    """Total steps, running requests, preemptions, prefill tokens and every request's first-token step, finish
    step, preemptions and cached tokens equal vLLM's ``AsyncScheduler``'s exactly."""
    ours, theirs = async_metrics(case), compare.oracle_metrics(ASYNC / case)
    assert compare.differences(ours, theirs) == dict.fromkeys(compare.METRICS, "")


@pytest.mark.parametrize("case", ["contended", "shared_prefix_cached", "priority", "max_num_seqs", "parallel_sampling",
                                  "parallel_sampling_priority", "sessions_open_loop", "closed_loop",
                                  "sessions_released"])
def test_async_fast_forward_equals_step_by_step(case):
    """The decode fast-forward runs under async scheduling (between the steps that hand finished requests'
    blocks back) and gives what stepping gives: summary, memory maps, step totals, finish times."""
    assert_fast_forward_equals_stepping(async_config(case), load_trace(str(DATA / case / "trace.csv")))


def test_async_scheduling_moves_the_contended_case():
    """The setting is not a no-op: off, the contended case is the synchronous reference's (8,324 steps, 94
    preemptions); on, vLLM's async one's (8,397 steps, 100 preemptions)."""
    sync = run_config(dataclasses.replace(async_config("contended"), async_scheduling=False)).summary
    asy = run_config(async_config("contended")).summary
    assert (sync["preemptions"], asy["preemptions"]) == (94, 100)
    assert SimConfig().async_scheduling is False


@pytest.mark.parametrize("fields, named", [
    (dict(allocator="radix"), "--allocator radix"),
    (dict(preemption="swap"), "--preemption swap"),
    (dict(chunked_prefill=False), "--chunked-prefill False"),
    (dict(cpu_offload_gib=1.0), "--offload-write-policy write_back"),
    (dict(cpu_offload_gib=1.0, offload_write_policy="write_through", offload_loads="sync"), "--offload-loads sync"),
    (dict(scheduling_policy="lpm"), "--scheduling-policy lpm"),
    (dict(scheduler="static"), "--scheduler static"),
])
def test_unmodelled_settings_are_refused(fields, named):
    with pytest.raises(ValueError, match="--async-scheduling") as err:
        SimConfig(async_scheduling=True, **fields)
    assert named in str(err.value)


@pytest.mark.parametrize("extra, fields, named", [
    (dict(n=[1, 2]), dict(parallel_sampling="fork"), "sampled n > 1 times as one group"),
    (dict(beam_width=[1, 2]), {}, "beam search"),
])
def test_unmodelled_workloads_are_refused(extra, fields, named):
    """Sequences kept together (fork, beams) are not checked against vLLM's ``AsyncScheduler``."""
    import pandas as pd

    frame = pd.DataFrame(dict(arrival_time_s=[0.0, 1.0], prompt_tokens=[64, 100], output_tokens=[8, 8], **extra))
    with pytest.raises(ValueError, match=named):
        run_simulation(SimConfig(async_scheduling=True, kv_tokens=4096, step_time=1.0, **fields),
                       workload_from_frame(frame))


@pytest.mark.parametrize("extra", [dict(n=[1, 3]), dict(session_id=["a", "a"], turn=[0, 1])])
def test_fan_out_and_open_loop_sessions_run(extra):
    """vLLM v1's fan-out (a request sampled n times is n requests, `--parallel-sampling` auto on paged) and session
    turns arriving at their own times run under async scheduling (checked by the cases above)."""
    import pandas as pd

    frame = pd.DataFrame(dict(arrival_time_s=[0.0, 1.0], prompt_tokens=[64, 100], output_tokens=[8, 8], **extra))
    result = run_simulation(SimConfig(async_scheduling=True, kv_tokens=4096, step_time=1.0),
                            workload_from_frame(frame))
    assert not result.requests["rejected"].any()


def test_a_generated_block_is_stored_once_its_hash_is_known(monkeypatch):
    """With generated blocks offloaded (``offload_prompt_only`` off) vLLM stores a block whose last token is in
    flight a step late, when that token's output is processed (`InFlight.hashed_blocks`): without that rule the case
    parts from vLLM's (its first difference was at step 258: a turn that then loads a block more from the host)."""
    theirs = compare.oracle_metrics(ASYNC / "offload_generated_blocks")
    assert not any(compare.differences(async_metrics("offload_generated_blocks"), theirs).values())
    monkeypatch.setattr(async_outputs.InFlight, "hashed_blocks", lambda self: {})
    assert any(compare.differences(async_metrics("offload_generated_blocks"), theirs).values())


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("hybrid_")])
def test_a_hybrid_pool_fast_forwards_as_it_steps(case):
    """Under async scheduling a hybrid pool's window groups free by the tokens processed as the step before began;
    told the steps (`HybridPagedAllocator.step_basis`), a decoder grown over several steps at once frees what it
    would have freed step by step, at the same step, so decode runs fast-forward to what stepping gives."""
    assert_fast_forward_equals_stepping(async_config(case), load_trace(str(DATA / case / "trace.csv")))


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("offload_")])
def test_a_host_tier_fast_forwards_as_it_steps(case):
    """Behind a host tier the running loop may stop at a victim whose step is in flight (`InFlight.pinned`),
    deferring the decoders after it in running order: a decode run grows a step's due decoders only if they all
    fit, and none starts after such a stop, so fast-forwarding gives what stepping gives."""
    config = async_config(case)
    assert_fast_forward_equals_stepping(config, load_trace(config.trace))


def test_a_decode_run_grows_a_steps_decoders_whole_behind_a_host_tier(monkeypatch):
    """Grown in the run's (deadline, id) order, decoders later in running order took the last free blocks before
    the first one due in running order met the full pool, and the loop's stop deferred other decoders than
    vLLM's: on ``offload_full_pool_decoders`` the run took 5,494 steps against vLLM's 5,584 (stepping: 5,584)."""
    from sim.kernel import fast_forward

    theirs = compare.oracle_metrics(ASYNC / "offload_full_pool_decoders")
    assert not any(compare.differences(async_metrics("offload_full_pool_decoders"), theirs).values())
    monkeypatch.setattr(fast_forward, "_whole_steps", lambda sched: False)
    assert any(compare.differences(async_metrics("offload_full_pool_decoders"), theirs).values())


@pytest.mark.parametrize("think_s, later", [(0.0, 1), (1.0, 0), (2.5, 0)])
def test_a_client_hears_of_a_finish_once_the_next_step_is_scheduled(think_s, later):
    """One closed-loop user: its second request is sent at the first's finish plus the think time under either
    scheduler (the finish is still timed at the end of its step), but vLLM's async engine hands the output back
    only after it scheduled the next step, so with no think time the request waits ``later`` one step more."""
    import pandas as pd

    frame = pd.DataFrame(dict(arrival_time_s=[0.0, 0.0], prompt_tokens=[64, 100], output_tokens=[8, 8]))
    workload = workload_from_frame(frame).select(np.arange(2), closed_loop=ClosedLoop(users=1, think_time_s=think_s))
    sync, asy = (run_simulation(SimConfig(async_scheduling=asynchronous, kv_tokens=4096, step_time=1.0),
                                workload).requests for asynchronous in (False, True))
    assert asy["finished_s"][0] == sync["finished_s"][0] == 8.0
    assert asy["arrival_s"][1] == sync["arrival_s"][1] == 8.0 + think_s
    assert asy["first_token_s"][1] - sync["first_token_s"][1] == later


@pytest.mark.parametrize("case", ["contended", "shared_prefix_cached"])
def test_async_fast_forward_equals_stepping_on_the_roofline_clock(case):
    """The same on kvsim's default clock, whose empty steps (those that only wait for the last outputs) take no
    time, with memory maps taken along the run."""
    config = SimConfig(trace=str(DATA / case / "trace.csv"), kv_tokens=1920, async_scheduling=True,
                       memory_snapshots=5)
    assert_fast_forward_equals_stepping(config, load_trace(config.trace))
