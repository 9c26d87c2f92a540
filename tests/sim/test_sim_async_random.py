"""``--async-scheduling`` fast-forwarded against stepping on random workloads: bursts of shared-prefix requests of
mixed priority into pools small enough to preempt, on the models whose settings the oracle cases do not use
(DeepSeek's MLA latent in fp8 at 16 GPUs, whose blocks vLLM's backend sets to 64; a dense GQA model), with
chunked-prefill budgets, ``long_prefill_token_threshold`` and ``max_num_seqs`` drawn too. The oracle cases
(`test_sim_async_scheduling`) check the same equality on fixed traces of one model."""

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from tests.sim.summaries import assert_fast_forward_equals_stepping
from workloads import Workload


def bursty_shared_prefixes(seed: int, priorities: bool, count: int = 80) -> Workload:
    """``count`` requests in three bursts, three in four behind one of three shared prefixes; ``priorities``:
    each of priority 0-2 (for ``--scheduling-policy priority``, which alone reads them)."""
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.choice([0.0, 0.5, 1.5], count) + rng.exponential(0.003, count))
    group = rng.integers(-1, 3, count)
    prefix = np.where(group >= 0, np.array([96, 300, 640])[np.maximum(group, 0)], 0)
    prompts = np.maximum(rng.integers(20, 1200, count), prefix + rng.integers(1, 60, count))
    return Workload(arrival_time_s=arrivals, prompt_tokens=prompts, output_tokens=rng.integers(1, 200, count),
                    prefix_group=group, prefix_len=prefix, priority=rng.integers(0, 3, count) if priorities else None,
                    name="bursts")


CASES = {
    "deepseek-v3.2-tp16": dict(model="deepseek-v3.2", gpu="h100-80gb", tensor_parallel=16, kv_cache_dtype="fp8",
                               kv_tokens=8192, max_num_seqs=64, max_num_batched_tokens=512,
                               scheduling_policy="priority"),
    "deepseek-v3-tp8-threshold": dict(model="deepseek-v3", gpu="h100-80gb", tensor_parallel=8, kv_cache_dtype="fp8",
                                      kv_tokens=4096, max_num_batched_tokens=2048, long_prefill_token_threshold=256),
    "llama-3-8b-seats": dict(model="llama-3-8b", gpu="a100-40gb", kv_tokens=4096, max_num_seqs=16,
                             max_num_batched_tokens=256, scheduler_reserve_full_isl=False,
                             scheduling_policy="priority"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("prefix_caching", [True, False])
def test_async_fast_forward_equals_stepping_on_random_bursts(case, prefix_caching):
    """Every case preempts (8 to 371 times) and, with prefix caching, hits the shared prefixes; the MLA cases
    run vLLM's 64-token blocks (no --block-size given)."""
    config = SimConfig(async_scheduling=True, prefix_caching=prefix_caching, **CASES[case])
    workload = bursty_shared_prefixes(sorted(CASES).index(case), config.scheduling_policy == "priority")
    assert_fast_forward_equals_stepping(config, workload)
