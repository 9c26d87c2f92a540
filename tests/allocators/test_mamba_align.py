"""vLLM 0.33's Mamba prefix caching (``mamba_cache_mode='align'``, retention 0) on small blocks: the block-aligned
prefill split and the state tables `HybridPagedAllocator` keeps, against what vLLM's own scheduler and
``MambaManager`` did with one attention and one Mamba group of 16-token blocks (probes run on vLLM 0.33;
'.' a null column, 'x' a held state block, 'C' a held block whose state is cached)."""

import pytest

from allocators.hybrid import HybridPagedAllocator
from allocators.mamba_align import aligned_split, checkpoint_position, checkpoint_valid, freed_columns
from tests.allocators.kv_group_fixture import KVGroupFixture

ATTENTION = (KVGroupFixture("full", "full", 4, None, 4 * 4096),)
HASHES = list(range(1000, 1100))


def split(start: int, budget: int, prompt: int, *, bs: int = 16, num_tokens: int | None = None,
          junction: int = 0, max_prefill: int | None = None) -> int:
    """The split of what ``budget`` (the budget left) allows; ``max_prefill``: the step's limit (default the
    budget, as for a request alone in its step)."""
    num_tokens = prompt if num_tokens is None else num_tokens
    return aligned_split(start, min(budget, num_tokens - start), prompt=prompt, num_tokens=num_tokens,
                         junction=junction, block_size=bs, max_prefill=budget if max_prefill is None else max_prefill)


def chunks(prompt: int, budget: int, bs: int = 16, junction: int = 0) -> list[int]:
    out, start = [], 0
    while start < prompt:
        out.append(split(start, budget, prompt, bs=bs, junction=junction))
        start += out[-1]
    return out


def test_the_checkpoint_is_the_last_boundary_before_the_last_token():
    assert [checkpoint_position(n, 16) for n in (1, 16, 17, 50, 64, 100)] == [0, 0, 16, 48, 48, 96]
    assert checkpoint_valid(0, 100, 96, 16) and not checkpoint_valid(16, 40, 16, 16)  # the hit's own state
    assert not checkpoint_valid(8, 100, 96, 16)  # a chunk starting mid-block exports no checkpoint


@pytest.mark.parametrize(("prompt", "budget", "bs", "expected"), [
    (50, 2048, 16, [50]),  # one chunk: its checkpoint (48) is exported in a block of its own
    (100, 40, 16, [32, 32, 36]),  # chunks end at block boundaries, the last one at the prompt's end
    (150, 40, 64, [40, 24, 40, 24, 22]),  # a block wider than the budget: sub-block chunks, re-aligned
])
def test_prefill_chunks_end_at_block_boundaries(prompt, budget, bs, expected):
    assert chunks(prompt, budget, bs) == expected


def test_a_junction_ends_a_chunk_and_too_little_budget_schedules_nothing():
    assert chunks(100, 2048, junction=64) == [64, 36]
    # no block fits in the budget left of a 2,048-token step: vLLM skips a running request, stops admitting
    assert split(0, 10, 100, max_prefill=2048) == 0
    assert split(0, 10, 100, max_prefill=8) == 10  # a block wider than any chunk advances sub-block
    assert split(0, 10, 100, num_tokens=130, max_prefill=2048) == 0  # a resumed request replays its output
    assert split(130, 10, 100, num_tokens=131) == 1 and split(40, 10, 100, max_prefill=2048) == 8


def test_a_state_block_is_freed_once_a_later_one_holds_the_state():
    table = [0, 0, 0, 7, 0, 9, 11]  # after the final chunk of 100: previous running, checkpoint, running
    assert freed_columns(table, 0, 3, 100, 16) == ([5, 3], 6)
    assert freed_columns([0, 0, 5, 6], 0, 2, 48, 16) == ([], 2)  # the state at 48 is still the one read


def pool(blocks: int = 100) -> HybridPagedAllocator:
    return HybridPagedAllocator(blocks * 16, block_size=16, kv_groups=ATTENTION, mamba_groups=1,
                                max_model_len=4096, prefix_caching=True)


def states(a: HybridPagedAllocator, seq_id: int) -> str:
    cached = a._cache.block_hash
    return "".join("." if b == 0 else "C" if cached[b] is not None else "x" for b in a.block_tables(seq_id)[1])


def used(a: HybridPagedAllocator) -> int:
    return a.num_usable_blocks - a.num_free_blocks


def step(a: HybridPagedAllocator, call, *args, **options):
    a.new_step()
    out = call(*args, **options)
    a.check_invariants()
    return out


def test_a_chunked_prompt_holds_at_most_three_state_blocks():
    """Prompt 100, budget 40: chunks of 32, 32, 36; the final chunk holds the previous running block, the
    checkpoint at 96 (cached: the prompt's replay boundary) and the running block; all but the last go back at
    the next step."""
    a = pool()
    step(a, a.admit, 1, 32, final_tokens=112, block_hashes=HASHES[:6], prompt_tokens=100, request_tokens=100)
    assert (states(a, 1), used(a)) == (".x", 3)
    step(a, a.grow_chunk, 1, 32)
    assert (states(a, 1), used(a)) == (".x.x", 6)
    step(a, a.grow_chunk, 1, 36)
    assert (states(a, 1), used(a)) == ("...x.Cx", 10)
    assert a.headroom(1) == 0  # the next step frees: the decode fast-forward stops there
    step(a, a.grow, 1, 1)
    assert (states(a, 1), used(a)) == ("......x", 8)
    assert a.headroom(1) > 0


def test_a_decoder_crossing_a_boundary_holds_two_state_blocks_for_one_step():
    a = pool()
    step(a, a.admit, 1, 64, final_tokens=67, block_hashes=HASHES[:4], prompt_tokens=64, request_tokens=64)
    assert (states(a, 1), used(a)) == ("..Cx", 6)
    step(a, a.grow, 1, 1)
    assert (states(a, 1), used(a)) == ("...xx", 7)
    step(a, a.grow, 1, 1)
    assert (states(a, 1), used(a)) == ("....x", 6)


def test_a_sibling_hits_the_cached_state_and_caches_the_junction():
    """r0 (prompt 64) cached the state at 48; r1 (prompt 100, the same first 64 tokens) hits 48, the attention
    groups 64: the junction at 64 ends its first chunk, and its state there is cached for later siblings."""
    a = pool()
    step(a, a.admit, 1, 64, final_tokens=67, block_hashes=HASHES[:4], prompt_tokens=64, request_tokens=64)
    for _ in range(3):
        step(a, a.grow, 1, 1)
    a.free(1)
    sibling = HASHES[:4] + list(range(5000, 5002))
    assert a.num_cached_tokens(sibling, 100) == 48 and a.shared_prefix_boundary(sibling, 100) == 64
    admission = step(a, a.admit, 2, 64, final_tokens=103, block_hashes=sibling, prompt_tokens=100,
                     request_tokens=100)
    assert admission.cached_tokens == 48 and (states(a, 2), used(a)) == ("..CC", 6)
    step(a, a.grow_chunk, 2, 36)
    assert (states(a, 2), used(a)) == ("...C.Cx", 10)
    step(a, a.grow, 2, 1)
    assert (states(a, 2), used(a)) == ("......x", 8)


def test_a_state_cached_in_this_step_is_hit_only_from_the_next():
    """Two requests with the same prompt of 80 in one step: the second's hit (the state at 64, cached by the
    first in this step) defers it to the next step (``cached_blocks_this_step``)."""
    a = pool()
    a.new_step()
    assert a.admit(1, 80, final_tokens=83, block_hashes=HASHES[:5], prompt_tokens=80, request_tokens=80)
    assert a.admit(2, 80, final_tokens=83, block_hashes=HASHES[:5], prompt_tokens=80, request_tokens=80) is None
    a.check_invariants()
    a.new_step()
    assert a.admit(2, 80, final_tokens=83, block_hashes=HASHES[:5], prompt_tokens=80, request_tokens=80) \
        .cached_tokens == 64
    assert states(a, 2) == "...Cx"
    a.check_invariants()


def test_a_fork_frees_its_states_as_its_parent_under_async_scheduling():
    """Under async scheduling states are freed by the tokens processed as the step before began (`begin_step`):
    a fork's child has processed what its parent has, so in the step after the fork both free the state the
    boundary crossing left (the child once kept it a step longer: 3 live states where its parent held 2)."""
    a = pool()
    a.processed_basis = True

    def step(call, *args, **options):
        a.begin_step()
        a.new_step()
        call(*args, **options)
        a.check_invariants()

    step(a.admit, 1, 64, final_tokens=80, block_hashes=HASHES[:4], prompt_tokens=64, request_tokens=64)
    step(a.grow, 1, 1)
    assert a.fork(1, 2, final_tokens=80) is not None and states(a, 2) == "..xxx"
    step(lambda: (a.grow(1, 1), a.grow(2, 1)))
    assert states(a, 1) == states(a, 2) == "...xx"
