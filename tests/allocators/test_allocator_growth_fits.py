"""`Allocator.growth_fits`: whether a group's decoders can all grow, asked before any of them grows.

The scheduler preempts on its answer (`sim.kernel.group_growth`, vLLM v0's ``can_append_slots(seq_group)``), so
it must change nothing and say exactly whether growing the sequences in turn goes through: with copy-on-write,
every sharer of a partly filled tail but the last to grow copies it first.
"""

import pytest

from allocators import ALLOCATORS

ALL = ["contiguous-max", "contiguous-pow2", "contiguous-oracle", "paged", "paged-cow", "vattention", "radix"]


@pytest.mark.parametrize("allocator", ALL)
@pytest.mark.parametrize("tokens", [1, 17])
@pytest.mark.parametrize("growers", [2, 3, 4])
def test_growth_fits_agrees_with_growing_the_group(allocator, tokens, growers):
    tried = fitted = 0
    for capacity in range(2 * 16, 40 * 16, 16):
        for prompt in (15, 16, 17, 40):
            a = ALLOCATORS[allocator](capacity, block_size=16, max_model_len=128)
            if a.admit(0, prompt, final_tokens=prompt + 40, max_total_tokens=128) is None or any(
                    a.fork(0, child, final_tokens=prompt + 40) is None for child in (1, 2, 3)):
                continue
            growth = [(seq, tokens) for seq in range(growers)]
            before = (a.breakdown(), a.memory_map().tolist())
            answer = a.growth_fits(growth)
            assert (a.breakdown(), a.memory_map().tolist()) == before
            ok = all(a.grow(seq, n) is not None for seq, n in growth)
            assert answer == ok, (capacity, prompt)
            a.check_invariants()
            tried += 1
            fitted += ok
    assert tried
    if allocator in ("paged", "paged-cow", "vattention"):  # slabs hold their final length, radix copies tails
        assert 0 < fitted < tried  # both answers were asked for
