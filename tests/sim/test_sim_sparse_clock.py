"""The clock of a sparse MLA model (DeepSeek-V3.2): attention pairs a query with, and reads the latent of, at
most ``index_topk`` keys, and the lightning indexer scores and reads every key's indexer key. Checked: the
step time term by term, a long-context decode step against DeepSeek-V3's, the closed-form decode run against
its steps, and the fast-forward (which ends a run where a sequence passes the top-k) equal to stepping."""

from dataclasses import replace

import numpy as np
import pytest

from allocators import catalog, roofline
from sim.kernel.config import SimConfig
from sim.kernel.cost_model import StepCostModel
from sim.kernel.runner import run_simulation
from tests.sim.summaries import assert_fast_forward_equals_stepping, mixed_prompts
from workloads import Workload

H100 = catalog.get_gpu("h100-80gb")
V32 = catalog.get_model("deepseek-v3.2").with_kv_cache_dtype("fp8")
V3 = catalog.get_model("deepseek-v3").with_kv_cache_dtype("fp8")


def cost(model, tp=16):
    return StepCostModel(model=model, gpu=H100, block_size=64, tensor_parallel=tp)


def test_a_decode_step_prices_top_k_attention_and_the_indexer_over_every_key():
    c = cost(V32)
    n, ctx, k = 4, 4 * 30_000, 4 * 2048
    flops_s, bytes_s = 0.6 * H100.bf16_tflops * 1e12, 0.8 * H100.hbm_bandwidth_gb_s * 1e9
    ovh = 1.22  # the paged kernel overhead at blocks of 64
    # the replicated layers' FLOPs (the indexer's projections among them) and the indexer's scoring are not
    # divided over the GPUs
    linear = 2 * ((V32.active_params - V32.replicated_params) / 16 + V32.replicated_params)
    compute = (n * linear + k * roofline.pair_flops(V32) / 16 + ctx * 2 * 61 * 64 * 128) / flops_s
    latent, indexer = 61 * 656, 61 * 132
    memory = (c.weights_time(n) + (k * latent * ovh + ctx * indexer * ovh + n * (latent + indexer)) / bytes_s)
    assert c.step_time(0, n, ctx, window_context=k) == pytest.approx(0.003 + max(compute, memory), rel=1e-12)


def test_below_top_k_every_key_is_attended():
    c = cost(V32)
    assert c.step_time(0, 3, 3000, window_context=3000) == c.step_time(0, 3, 3000)


def test_long_context_decode_is_cheaper_than_dense_mla():
    """At 32k tokens a query attends to 2,048 keys: at batch 32 the step reads 1/16 of DeepSeek-V3's latents,
    plus 32k indexer keys; at short context the indexer's keys and fp8 scales make it a little dearer."""
    sparse, dense = cost(V32), cost(V3)
    n = 32
    assert sparse.step_time(0, n, n * 32768, window_context=n * 2048) < 0.7 * dense.step_time(0, n, n * 32768)
    assert sparse.step_time(0, n, n * 1024, window_context=n * 1024) > dense.step_time(0, n, n * 1024)


def test_a_decode_run_prices_the_top_k_in_closed_form():
    c = cost(V32)
    n, c0, k, window = 6, 6 * 3000, 40, (4 * 2048 + 2 * 1500, 2)  # two sequences below the top-k, growing
    steps = [c.step_time(0, n, c0 + n * j, window_context=window[0] + 2 * j) for j in range(k)]
    total, weighted = c.decode_run(n, c0, k, window)
    assert total == pytest.approx(sum(steps), rel=1e-12)
    assert weighted == pytest.approx(sum(j * t for j, t in enumerate(steps)), rel=1e-12)
    assert c.decode_prefix(n, c0, window)(17) == pytest.approx(sum(steps[:17]), rel=1e-12)


@pytest.fixture
def sparse(monkeypatch):
    """DeepSeek-V3.2 with a top-k of 200 keys, so prompts of 100-400 tokens start below and above it and decoders
    pass it mid-run."""
    model = replace(catalog.MODELS["deepseek-v3.2"], name="test-sparse-200", index_topk=200)
    monkeypatch.setitem(catalog.MODELS, model.name, model)
    return model.name



@pytest.mark.parametrize("options", [{}, {"kv_tokens": 6000}, {"max_num_batched_tokens": 256}])
def test_fast_forward_equals_step_by_step_with_top_k(sparse, options):
    config = SimConfig(model=sparse, gpu="h100-80gb", block_size=64, **({"kv_tokens": 40_000} | options))
    assert_fast_forward_equals_stepping(config, mixed_prompts())


def test_the_top_k_makes_long_decodes_faster(sparse):
    w = Workload(arrival_time_s=np.zeros(8), prompt_tokens=np.full(8, 3000), output_tokens=np.full(8, 200),
                 name="long")
    runs = {name: run_simulation(SimConfig(model=name, gpu="h100-80gb", block_size=64, kv_tokens=40_000), w)
            for name in (sparse, "deepseek-v3.2")}
    assert runs[sparse].summary["tpot_p50_s"] < runs["deepseek-v3.2"].summary["tpot_p50_s"]
