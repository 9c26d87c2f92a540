"""The hybrid paged allocator with Mamba groups (Nemotron-H's pool, vLLM's ``mamba_cache_mode='none'``): one state
block per sequence per Mamba group from admission to free, taken from the same pool as the attention blocks,
never grown, never shared, reported under ``mamba``, and audited."""


from allocators.hybrid import HybridPagedAllocator
from tests.allocators.kv_group_fixture import KVGroupFixture

ATTENTION = (KVGroupFixture("full", "full", 4, None, 4 * 4096),)  # Nemotron-H-8B's 4 attention layers
BS = 1040


def pool(blocks: int = 40, **options) -> HybridPagedAllocator:
    a = HybridPagedAllocator(blocks * BS, block_size=BS, kv_groups=ATTENTION, mamba_groups=6, max_model_len=16384,
                             **options)
    a.check_invariants()
    return a


def test_the_pool_is_the_given_blocks_with_six_mamba_groups():
    a = pool()
    assert a.num_blocks == 40 and a.num_usable_blocks == 39 and len(a.groups) == 7
    assert [g.name for g in a.groups] == ["full", *(f"mamba.{i}" for i in range(6))]
    assert a.mamba == [False] + [True] * 6 and a.slots_per_token == 1 and a.group_names == ("full", "mamba")


def test_a_sequence_holds_one_state_block_per_mamba_group_for_its_life():
    """``MambaManager`` with a block of ``max_model_len`` tokens: one block per group at the first step, none
    more as the sequence grows past attention block boundaries, all freed with it."""
    a = pool()
    assert a.admit(1, 2000, final_tokens=3000) is not None
    assert a.live_blocks(1) == [2] + [1] * 6 and a.num_free_blocks == 39 - 8
    mamba_blocks = [t for t in a.block_tables(1)[1:]]
    assert a.grow_chunk(1, 100) is not None and a.grow(1, 200) is not None
    a.check_invariants()
    assert a.live_blocks(1) == [3] + [1] * 6 and list(a.block_tables(1)[1:]) == mamba_blocks
    assert a.free(1) > 0 and a.num_free_blocks == 39
    a.check_invariants()


def test_admission_counts_the_state_blocks():
    """A request needs its attention blocks and six state blocks free (vLLM's ``get_num_blocks_to_allocate``
    summed over the groups), also when its whole prompt is checked (``scheduler_reserve_full_isl``)."""
    a = pool(blocks=10)  # 9 usable
    assert a.admit(1, 3 * BS, final_tokens=3 * BS + 1) is not None  # 3 + 6
    assert a.num_free_blocks == 0
    a.free(1)
    assert a.admit(2, BS, final_tokens=BS + 1, full_tokens=4 * BS) is None  # 4 + 6 > 9
    assert a.admit(2, BS, final_tokens=BS + 1, full_tokens=3 * BS) is not None
    assert a.never_fits(4 * BS, final_tokens=4 * BS) is not None and a.never_fits(3 * BS, final_tokens=3 * BS) is None


def test_a_refused_growth_changes_nothing():
    a = pool(blocks=9)  # 8 usable: one sequence of 2 attention blocks + 6 state blocks
    assert a.admit(1, BS + 1, final_tokens=4 * BS) is not None and a.num_free_blocks == 0
    assert a.grow(1, BS) is None and a.live_blocks(1) == [2] + [1] * 6
    a.check_invariants()


def test_memory_reports_state_blocks_as_whole_token_states_under_mamba():
    a = pool()
    a.admit(1, 100, final_tokens=500)
    b = a.breakdown()
    full, mamba = b.groups
    assert (mamba.name, mamba.slots_per_token, mamba.reservation, mamba.internal_frag) == ("mamba", 0, 0, 0)
    assert mamba.token_states == 6 * BS and mamba.used_blocks == 6
    assert (full.token_states, full.reservation, full.internal_frag) == (100, 400, BS - 500)
    assert b.token_states + b.reservation + b.internal_frag + b.external_frag + b.free == a.capacity


def test_a_fork_copies_the_state_blocks():
    a = pool()
    a.admit(1, 100, final_tokens=200)
    copies = a.fork(1, 2, final_tokens=200)
    assert len(copies) == 7 and a.live_blocks(2) == [1] * 7
    a.check_invariants()


def test_prefix_caching_puts_the_pool_in_align_mode():
    """With prefix caching on (vLLM's ``mamba_cache_mode='align'``, `tests/allocators/test_mamba_align.py`) a
    prompt of three blocks holds, per Mamba group, the checkpoint state at its last boundary and the running state
    in a table of three columns; a fork copies them, the nulls kept."""
    a = pool(prefix_caching=True)
    assert a.align and not pool().align
    a.admit(1, 3 * BS, final_tokens=3 * BS + 10, block_hashes=(11, 12, 13), prompt_tokens=3 * BS)
    assert a.live_blocks(1) == [3] + [2] * 6 and all(t[0] == 0 for t in a.block_tables(1)[1:])
    copies = a.fork(1, 2, final_tokens=3 * BS + 10)
    assert len(copies) == 3 + 2 * 6 and a.live_blocks(2) == [3] + [2] * 6
    a.check_invariants()


def test_a_freed_request_joins_the_free_queue_in_vllms_group_order():
    """vLLM frees a request's blocks KV cache group by group in its config's order (``KVCacheCoordinator.free``),
    which lists the recurrent groups first where the model's layer 0 is one (``mamba_groups_first``: Nemotron-H,
    Qwen3-Next): which cached blocks a later allocation evicts first depends on it. A two-block prompt caches its
    two attention blocks and, per Mamba group, the state at its replay boundary (column 0); those join the queue's
    end in group order."""
    for first in (False, True):
        a = pool(blocks=20, mamba_groups_first=first, prefix_caching=True)
        a.admit(1, 2 * BS, final_tokens=2 * BS + 1, block_hashes=(11, 12))
        attention, *states = a.block_tables(1)
        a.free(1)
        cached = [b for b in a.free_block_ids() if a._cache.block_hash[b] is not None]
        checkpoints = [t[0] for t in states]
        assert cached == ([*checkpoints, *reversed(attention)] if first else [*reversed(attention), *checkpoints])
        a.check_invariants()
