"""Runs of a hybrid attention/Mamba model are refused with the reason (`allocators.mamba_layout`): vLLM 0.33's
default for such a model, prefix caching on and so ``mamba_cache_mode="align"``, is not simulated yet."""

import pytest

from sim.kernel.config import SimConfig
from sim.kernel.replica import resolve_capacity


@pytest.mark.parametrize("allocator", ["paged", "contiguous-max", "radix"])
def test_runs_of_a_mamba_model_are_refused(allocator):
    config = SimConfig(model="nemotron-h-8b", gpu="h100-80gb", allocator=allocator)
    with pytest.raises(ValueError, match=r"nemotron-h-8b has Mamba layers.*mamba_cache_mode='align'"):
        resolve_capacity(config)


def test_other_models_still_resolve():
    cap = resolve_capacity(SimConfig(model="llama-3-8b", gpu="h100-80gb"))
    assert cap.kv_tokens > 0
