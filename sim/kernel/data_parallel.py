"""What kvsim's data parallelism (``--data-parallel-size``) leaves out of vLLM's, said once in the run's summary.

Why: kvsim runs ``--data-parallel-size N`` as N replicas of one engine behind vLLM's load balancer
(`sim.kernel.routers.DataParallelLB`), each with its own scheduler, KV pool and clock (`sim.kernel.fleet`). For a
dense model that is what vLLM runs: its ranks are independent. For a mixture of experts vLLM's ranks are not
(its docs, "Data Parallel Deployment": "Forward passes must be aligned, and expert layers across all ranks are
required to synchronize during every forward pass, even when there are fewer requests to be processed than DP
ranks"; idle ranks run dummy batches, the DP coordinator keeping them in step). A rank's step then lasts as long as
the slowest rank's, and the tokens of every rank cross the GPUs to reach their experts. Making a fleet step in
lock-step would tie every replica's clock to the others' at every step, where the fleet lets each run (and
fast-forward) alone, so it is left out and the summary's ``clock_omits`` says so; the clock charges each GPU its
share of the experts as every rank's tokens touch them (`sim.kernel.roofline_cost.StepCostModel.weights_time`,
taking the other ranks to be as full as this one).
"""

from __future__ import annotations


def data_parallel_lockstep(data_parallel: int) -> str:
    """The ``clock_omits`` phrase for a mixture of experts over ``data_parallel`` ranks."""
    return (f"data-parallel lock-step: vLLM runs the MoE layers of all {data_parallel} ranks together every step "
            "(idle ranks on dummy batches), so a rank's step lasts as long as the slowest rank's, and moves every "
            "rank's tokens to their experts' GPUs (all-gather / all-to-all); kvsim clocks each rank alone, without "
            "that communication")
