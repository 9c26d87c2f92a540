"""Under async scheduling a window group frees by the tokens processed as the step before began. Told the steps
(`HybridPagedAllocator.step_basis`), a decoder grown lazily, several steps at once, frees what the snapshots of
every planned step (`begin_step`) free, by the step at which they free it: the rule that lets decode runs
fast-forward on a hybrid pool under async scheduling."""

from hypothesis import given, settings
from hypothesis import strategies as st

from allocators.hybrid import HybridPagedAllocator
from tests.allocators.kv_group_fixture import KVGroupFixture

WINDOW = 40
GROUPS = (KVGroupFixture("sliding", "sliding_window", 1, WINDOW, 1), KVGroupFixture("full", "full", 1, None, 1))


def _pool(step_basis: bool) -> HybridPagedAllocator:
    a = HybridPagedAllocator(8000, block_size=8, kv_groups=GROUPS, max_model_len=4000, max_num_batched_tokens=64)
    a.processed_basis, a.step_basis = True, step_basis
    return a


@settings(max_examples=150, deadline=None)
@given(prompt=st.integers(1, 200), chunk=st.integers(1, 64), output=st.integers(1, 150),
       idle=st.lists(st.booleans(), min_size=400, max_size=400), early=st.lists(st.booleans(), min_size=400,
                                                                              max_size=400))
def test_a_lazily_grown_decoder_frees_as_one_grown_every_step(prompt, chunk, output, idle, early):
    """A sequence prefilled in chunks, then decoding, deferred at random steps: one pool takes a snapshot as each
    step is planned and grows it every step it computes; the other is told the steps and grows it only when its
    headroom runs out (the scheduler's deadline: deferred, due at the next step), or earlier at random. After every
    step both hold the same blocks of every group: a block the window frees goes back at the same step."""
    steps, lazy = _pool(False), _pool(True)
    t = 0
    for a in (steps, lazy):
        a.begin_step(step=t)
        a.admit(1, min(chunk, prompt), final_tokens=prompt + output)
    done = told = min(chunk, prompt)
    due = 1 + lazy.headroom(1) if done >= prompt else None
    while done < prompt + output:
        t += 1
        steps.begin_step(step=t)
        lazy.begin_step(step=t)
        if done < prompt:  # a chunk: both grow now
            n = min(chunk, prompt - done)
            assert steps.grow_chunk(1, n) is not None and lazy.grow_chunk(1, n) is not None
            done = told = done + n
            due = t + 1 + lazy.headroom(1) if done >= prompt else None
        elif idle[t % 400]:  # deferred: computes nothing, due at the next step at the latest
            lazy.idle(1)
            due = min(due + 1, t + 1)
        else:
            assert steps.grow(1, 1) is not None
            done += 1
            if t >= due or early[t % 400]:
                assert lazy.grow(1, done - told) is not None
                told = done
                due = t + 1 + lazy.headroom(1)
        assert lazy.block_tables(1) == steps.block_tables(1)
