"""What a prompt prefilled in chunks holds while its chunks are computed: vLLM's paged manager allocates a chunk
at a time, an allocator that places the prompt whole (a contiguous slab, vAttention's pages, a group that will
fork) holds all of it from admission. Either way only the computed chunks are token states; the rest of a
whole placement is reservation (held, to be filled), in the breakdown, the step rows and the memory maps."""

import dataclasses

import numpy as np
import pytest

from sim.kernel.config import SimConfig
from sim.kernel.runner import run_simulation
from workloads import Workload

# One 8,000-token prompt, prefilled in chunks of 2,048 (vLLM's default budget), then a short one arriving
# during that prefill so that the memory maps (spread over the arrivals) fall inside it.
LONG = Workload(arrival_time_s=np.array([0.0, 0.2]), prompt_tokens=np.array([8000, 10]),
                output_tokens=np.array([100, 5]), name="long prompt")
CONFIG = SimConfig(model="llama-3-8b", gpu="h100-80gb", kv_tokens=60_000, memory_snapshots=3)
WHOLE = ("contiguous-oracle", "contiguous-max", "contiguous-pow2", "vattention")


def run(allocator: str, **options):
    return run_simulation(dataclasses.replace(CONFIG, allocator=allocator, **options), LONG)


@pytest.mark.parametrize("allocator", WHOLE)
def test_a_prompt_placed_whole_is_token_states_only_as_its_chunks_are_computed(allocator):
    paged, whole = run("paged"), run(allocator)
    prefill = whole.steps[whole.steps["prefill_tokens"] > 0]
    assert prefill["prefill_tokens"].tolist()[:4] == [2048, 2048, 2048, 1856]
    # during each chunk's step: the chunks computed so far, the rest of the prompt and the output reserved
    first = prefill.iloc[:4]
    assert first["token_states"].tolist() == [2048, 4096, 6144, 8000]
    assert first["token_states"].tolist() == paged.steps["token_states"].iloc[:4].tolist()
    if allocator == "contiguous-oracle":  # a slab of exactly prompt + output - 1 slots
        assert (first["token_states"] + first["reservation"]).tolist() == [8099] * 4
    for key in ("token_states_frac", "token_occupancy_frac"):  # the same tokens held, whatever holds them
        assert whole.summary[key] == pytest.approx(paged.summary[key], rel=0.02 if allocator == "vattention" else 1e-9)


@pytest.mark.parametrize("allocator", ["contiguous-oracle", "vattention"])
def test_the_memory_map_marks_an_uncomputed_prompt_reserved(allocator):
    """Each map is of the step row starting at its instant: the chunks computed before it and the one its step
    computes are tokens, the rest of the prompt reserved."""
    whole = run(allocator)
    long_request = whole.memory[whole.memory["request_id"] == 0]
    tokens = long_request[long_request["state"] == "token"].groupby("time_s").size()
    reserved = long_request[long_request["state"] == "reserved"].groupby("time_s").size()
    assert tokens.tolist()[:3] == [4096, 6144, 8000]
    assert tokens.tolist()[:3] == whole.steps.set_index("time_s")["token_states"][tokens.index[:3]].tolist()
    assert (tokens + reserved).tolist()[:3] == [8099] * 3


@pytest.mark.parametrize("allocator", WHOLE)
def test_step_by_step_agrees(allocator):
    fast, slow = run(allocator), run(allocator, step_by_step=True)
    for key in ("token_states_frac", "reservation_frac", "internal_frag_frac"):
        assert fast.summary[key] == pytest.approx(slow.summary[key], rel=1e-9)


def test_without_chunked_prefill_a_prompt_is_computed_in_one_step():
    whole = run("contiguous-oracle", chunked_prefill=False, max_num_batched_tokens=8192)
    assert whole.steps["token_states"].iloc[0] == 8000


def test_a_group_that_will_fork_holds_its_prompt_whole_yet_only_computed_chunks_are_token_states():
    """paged places a request that forks at its first token (``--parallel-sampling fork``) whole, as vLLM's
    V0 did a sequence group; the uncomputed part is reservation until its chunks run."""
    forking = dataclasses.replace(LONG, n=np.array([2, 1]))
    r = run_simulation(dataclasses.replace(CONFIG, parallel_sampling="fork"), forking)
    assert r.steps["token_states"].iloc[:3].tolist() == [2048, 4096, 6144]
    assert (r.steps["token_states"] + r.steps["reservation"]).iloc[:3].tolist() == [8000] * 3
