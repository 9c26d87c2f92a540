"""When kvsim's data-parallel ranks (``--data-parallel-size``) step in lock-step, and what their clock still leaves out.

Why: kvsim runs ``--data-parallel-size N`` as N replicas of one engine behind vLLM's load balancer
(`sim.kernel.routers.DataParallelLB`), each with its own scheduler and KV pool (`sim.kernel.fleet`). For a dense
model that is what vLLM runs: its ranks are independent, each on its own clock. For a mixture of experts they are
not (its docs, "Data Parallel Deployment": "Forward passes must be aligned, and expert layers across all ranks are
required to synchronize during every forward pass, even when there are fewer requests to be processed than DP
ranks"). vLLM 0.33 (``vllm/v1/engine/core.py``) runs such ranks as ``DPEngineCoreProc`` ("should only be used for
MoE models"), whose ``run_busy_loop`` is what `sim.kernel.lockstep` models:

* every iteration a rank steps its scheduler; a rank that ran no forward pass (nothing scheduled, or no requests)
  runs ``execute_dummy_batch`` (one token, ``gpu_worker.execute_dummy_batch`` -> ``_dummy_run(1,
  uniform_decode=True)``) while ``engines_running`` holds, so the expert layers' collectives always have every
  rank; each forward pass therefore ends when the slowest rank's does;
* ``engines_running`` is the all-reduce of every rank's ``scheduler.has_unfinished_requests()``
  (``_has_global_unfinished_reqs`` -> ``ParallelConfig.sync_dp_state``), taken only at the wave's first step and
  at every ``dp_sync_interval``-th (`DP_SYNC_INTERVAL`, ``step_counter``); in between it stays true, so ranks
  whose work is done keep running dummy batches up to the next such step. When it comes back false the wave
  ends (``current_wave += 1``, ``step_counter = 0``) and every rank pauses;
* a request reaching a paused rank wakes it (``add_request``: ``engines_running = True``, ``start_wave`` to the
  coordinator, which sends the others ``START_DP_WAVE``), so every rank steps again from that arrival.

How long the common step lasts: each rank is priced at its own batch through its own layers, plus the routed
experts running every rank's tokens of the step together (vLLM's MoE layers gather them onto every GPU:
`sim.kernel.lockstep` cites the dispatch), and the step lasts the longest of those.
vLLM pads every rank to the largest token count across ranks only when all run a CUDA graph or micro-batch
(``v1/worker/dp_utils.py``, ``_synchronize_dp_ranks``: ``should_dp_pad = synced_cudagraph_mode != 0 or
should_ubatch``, then ``num_tokens_across_dp`` = the max for every rank; the synced mode is the least over the
ranks, so one rank stepping eagerly, e.g. over ``CompilationConfig.max_cudagraph_capture_size``, 512 by default,
pads none). kvsim models no CUDA graphs (nor their bucket padding) for any engine, and padded rows add matrix rows
to a rank's step, not attention reads: every rank is priced at its own count, and the experts at the sum of the
counts (`sim.kernel.lockstep.shared_expert_tokens`), the padded rows of the lighter ranks not among them.

What the clock still leaves out (``clock_omits``, `data_parallel_exchange`): moving every rank's tokens to their
experts' GPUs and back (all-gather / reduce-scatter, or all-to-all with expert parallelism) at every MoE layer.
"""

from __future__ import annotations

from allocators.catalog_file import model_with_catalog

DP_SYNC_INTERVAL = 16
"""vLLM 0.33's ``ParallelConfig.dp_sync_interval`` default (``config/parallel.py``: ``Field(default=16, ge=1)``):
the ranks all-reduce whether any has unfinished requests at a wave's first step and every 16th
(``DPEngineCoreProc._has_global_unfinished_reqs``)."""


def steps_in_lockstep(config, model=None) -> bool:
    """Whether the data-parallel ranks of ``config`` step in lock-step: more than one, of a mixture of experts
    (``model``: the run's `ModelSpec`, looked up from ``config`` when not given)."""
    if config.data_parallel_size < 2:
        return False
    if model is None:
        model = model_with_catalog(config.model, config.catalog)
    return bool(model.num_experts)


def data_parallel_exchange(data_parallel: int) -> str:
    """The ``clock_omits`` phrase for a mixture of experts over ``data_parallel`` ranks."""
    return (f"data-parallel expert exchange: vLLM's {data_parallel} ranks step together (kvsim's lock-step: each "
            "step lasts the slowest rank's) and move every rank's tokens to their experts' GPUs and back at every "
            "MoE layer (all-gather / reduce-scatter, or all-to-all); kvsim charges no time for that communication, "
            "nor for the rows vLLM pads lighter ranks' CUDA-graph steps with")
