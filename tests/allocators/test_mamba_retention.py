"""vLLM 0.33's Mamba prefix caching (``mamba_cache_mode='align'``) under a positive
``prefix_cache_retention_interval``, on small blocks: every chunk able to export the state one block before its end
takes a checkpoint block for it (under 0 only the chunk reaching the prefill's end does), and the state ending every
interval is cached beside the replay boundary's and a junction's, so a later request sharing part of the prompt
resumes there. The tables are what vLLM's own scheduler and ``MambaManager`` held (one attention and one Mamba group
of 16-token blocks, a 64-token budget, probes run on vLLM 0.33; '.' a null column, 'x' a held state block, 'C' a
held block whose state is cached)."""

import pytest

from allocators.hybrid import HybridPagedAllocator
from tests.allocators.kv_group_fixture import KVGroupFixture

ATTENTION = (KVGroupFixture("full", "full", 4, None, 4 * 4096),)
FIRST = list(range(1000, 1012))  # a 200-token prompt's 12 full blocks
SECOND = FIRST[:9] + list(range(2009, 2012))  # another sharing its first 150 tokens (9 full blocks)


def pool(retention: int) -> HybridPagedAllocator:
    return HybridPagedAllocator(100 * 16, block_size=16, kv_groups=ATTENTION, mamba_groups=1, prefix_caching=True,
                                max_model_len=4096, prefix_cache_retention_interval=retention)


def state_table(a: HybridPagedAllocator, seq: int) -> str:
    cache = a._cache.block_hash
    return "".join("." if not b else "C" if cache[b] is not None else "x" for b in a.block_tables(seq)[-1])


def used(a: HybridPagedAllocator) -> int:
    return a.num_usable_blocks - a.num_free_blocks


def prefill(a: HybridPagedAllocator, seq: int, hashes: list[int], chunks: list[int]) -> list[tuple[str, int]]:
    """Admit a 200-token prompt with its first chunk, then its other chunks a step each: the state table and
    the used blocks after each step's allocation."""
    a.new_step()
    assert a.admit(seq, chunks[0], final_tokens=202, block_hashes=hashes, prompt_tokens=200,
                   request_tokens=200) is not None
    out = [(state_table(a, seq), used(a))]
    for n in chunks[1:]:
        a.new_step()
        assert a.grow_chunk(seq, n) is not None
        out.append((state_table(a, seq), used(a)))
    a.check_invariants()
    return out


@pytest.mark.parametrize(("retention", "expected"), [
    (0, [("...x", 5), ("...x...x", 10), (".......x...C", 14), ("...........Cx", 15)]),
    (32, [("..xC", 6), ("...C..xC", 11), (".......C..xC", 15), ("...........Cx", 15)]),
    (None, [("..CC", 6), ("...C..CC", 11), (".......C..CC", 15), ("...........Cx", 15)])])
def test_every_chunk_that_can_export_its_checkpoint_takes_a_block_under_a_positive_interval(retention, expected):
    """Chunks of 64 (four blocks): under 0 only the last chunk's checkpoint (the replay boundary, 192) is
    exported; under 32 every chunk exports the state one block before its end, and those ending an interval
    (64, 128) stay cached; dense retention (None) takes the same blocks and caches every full state
    (``KVCacheCoordinator.get_num_blocks_to_allocate`` passes prefill_end 0 for any interval but 0, and
    ``MambaManager.reachable_block_mask`` returns None: every block)."""
    assert prefill(pool(retention), 0, FIRST, [64, 64, 64, 8]) == expected


@pytest.mark.parametrize(("retention", "hit", "junction", "tables"), [
    (0, 0, 144, ["...x", "...x...x", ".......xC", "........C..Cx"]),
    (32, 128, 144, [".......CC", "........C..Cx"]), (None, 128, 144, [".......CC", "........C..Cx"])])
def test_a_later_prompt_resumes_at_the_last_interval_state_it_shares(retention, hit, junction, tables):
    """A second prompt sharing the first's 150 tokens: under 0 no state of the first is within the shared part,
    so it starts from scratch (chunks stop at the junction, 144); under 32 it resumes at the state at 128 and
    computes 16 tokens to the junction."""
    a = pool(retention)
    prefill(a, 0, FIRST, [64, 64, 64, 8])
    a.free(0)
    assert a.num_cached_tokens(SECOND, 200) == hit
    assert a.shared_prefix_boundary(SECOND, 200) == junction
    chunks = [64, 64, 16, 56] if not hit else [16, 56]
    assert [t for t, _ in prefill(a, 1, SECOND, [hit + chunks[0], *chunks[1:]])] == tables


def test_a_positive_interval_needs_a_mamba_group_that_caches_states():
    """vLLM accepts a positive interval for a model with Mamba groups (``_validate_prefix_cache_retention_interval``),
    a multiple of the block size."""
    assert pool(48).retention_interval == 48
    with pytest.raises(ValueError, match="multiple of the scheduler block size"):
        pool(40)


def test_without_prefix_caching_an_interval_must_be_a_multiple_of_max_model_len_and_does_nothing():
    """Prefix caching off (``mamba_cache_mode='none'``), a Mamba group's block is ``max_model_len`` (4,096) tokens,
    so vLLM's scheduler block size is lcm(16, 4,096) = 4,096: it accepts 4,096 and 8,192, refuses 32 and 2,048
    (``KVCacheCoordinator.__init__`` validates for ``KVCacheCoordinatorNoPrefixCache`` too; probed on vLLM 0.33),
    and caches nothing, so the blocks a request takes are those under 0."""
    def none_mode(retention):
        return HybridPagedAllocator(100 * 16, block_size=16, kv_groups=ATTENTION, mamba_groups=1, max_model_len=4096,
                                    prefix_cache_retention_interval=retention)

    for retention in (32, 2048):
        with pytest.raises(ValueError, match=r"multiple of the scheduler block size \(4096"):
            none_mode(retention)
    runs = []
    for retention in (0, 4096, 8192, None):
        a = none_mode(retention)
        a.admit(0, 64, final_tokens=202, block_hashes=FIRST, prompt_tokens=200, request_tokens=200)
        a.grow_chunk(0, 136)
        a.check_invariants()
        runs.append((a.block_tables(0), used(a), a.num_cached_tokens(FIRST, 200)))
    assert runs == [runs[0]] * 4 and runs[0][1] == 13 + 1 and runs[0][2] == 0
    with pytest.raises(ValueError, match="no sliding-window or Mamba KV cache group"):
        HybridPagedAllocator(100 * 16, block_size=16, kv_groups=ATTENTION, max_model_len=4096,
                             prefix_cache_retention_interval=32)


@pytest.mark.parametrize(("retention", "tables"), [
    (0, [".C..x", ".C..x..C"]), (32, [".C.Cx", ".C.Cx.xC"]), (None, [".C.CC", ".C.CC.CC"])])
def test_under_async_scheduling_two_chunks_with_checkpoints_hold_five_states(retention, tables):
    """Under async scheduling states are freed by the tokens processed, a step late: a request resuming at a
    32-token hit whose second 48-token chunk is scheduled while its first is in flight holds, where every chunk
    may take a checkpoint block (a positive interval, or None), the hit's state and both chunks' checkpoint and
    running blocks, five, as vLLM 0.33's ``AsyncScheduler`` does (these tables, probed there); the audit allows
    them."""
    a = HybridPagedAllocator(100 * 16, block_size=16, kv_groups=ATTENTION, mamba_groups=1, prefix_caching=True,
                             max_model_len=4096, prefix_cache_retention_interval=retention)
    a.processed_basis = True

    def step():
        a.begin_step()
        a.new_step()

    first, second = [3000, 3001], [3000, 3001, *range(4002, 4008)]  # 33 tokens; 132 sharing its first 32
    step()
    a.admit(0, 33, final_tokens=35, block_hashes=first, prompt_tokens=33, request_tokens=33)
    step()
    a.grow(0, 1)
    step()
    a.free(0)
    step()
    assert a.num_cached_tokens(second, 132) == 32
    a.admit(1, 80, final_tokens=134, block_hashes=second, prompt_tokens=132, request_tokens=132)
    out = [state_table(a, 1)]
    step()
    assert a.grow_chunk(1, 48) is not None
    out.append(state_table(a, 1))
    a.check_invariants()
    assert out == tables
