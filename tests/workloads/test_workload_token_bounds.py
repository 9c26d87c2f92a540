"""A `Workload` built in Python holds the counts a trace row may hold, no more: it accepted ``prompt_tokens=10**12``
(the readers' bound is 10**9) and wrote a trace its own reader refused. The generator, whose largest system prompt
(10**9 tokens) and multi-turn contexts made such prompts, now stays within the bound, so what it writes reads back."""

import re

import numpy as np
import pytest

from workloads import Workload, load_trace
from workloads.frames import write_trace
from workloads.named import generate
from workloads.validation import MAX_SAMPLES, MAX_TOKENS, UPPER_BOUNDS


def one(**columns):
    base = {"arrival_time_s": [0.0, 1.0], "prompt_tokens": [100, 200], "output_tokens": [10, 20]}
    return Workload(**(base | columns), name="w")


@pytest.mark.parametrize("field, high", sorted(UPPER_BOUNDS.items()))
def test_each_bounded_count_is_refused_past_the_readers_bound_and_accepted_at_it(field, high):
    columns = {"prefix_group": [0, 0]} if field == "prefix_len" else {}
    if field in ("prefix_len", "max_tokens"):  # within the prompt, and >= the output
        columns |= {"prompt_tokens": [high, high], "output_tokens": [1, 1]}
    at = one(**columns, **{field: [1, high]})
    assert getattr(at, field)[1] == high
    message = f"workload 'w': {field}: must be <= {high:g}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        one(**columns, **{field: [1, high + 1]})


def test_the_bounds_are_the_readers():
    assert UPPER_BOUNDS == {"prompt_tokens": MAX_TOKENS, "output_tokens": MAX_TOKENS, "max_tokens": MAX_TOKENS,
                            "prefix_len": MAX_TOKENS, "n": MAX_SAMPLES, "beam_width": MAX_SAMPLES}


def test_the_largest_system_prompt_makes_prompts_that_read_back(tmp_path):
    w = generate("fixed:prompt=10,output=5", "poisson:rate=1", 5, system_prompt_len=MAX_TOKENS - 1,
                 system_prompt_frac=1.0)
    assert (w.prompt_tokens == MAX_TOKENS).all() and (w.prefix_len == MAX_TOKENS - 1).all()
    back = load_trace(write_trace(w, tmp_path / "t.csv"))
    np.testing.assert_array_equal(back.prompt_tokens, w.prompt_tokens)


def test_a_system_prompt_within_the_bound_keeps_the_draws():
    """Only a prompt that would pass the bound is shortened: the same bytes as before otherwise."""
    w = generate("uniform:prompt_min=10,prompt_max=20,output_min=5,output_max=9", "poisson:rate=1", 50, seed=3,
                 system_prompt_len=1000, system_prompt_frac=0.5)
    plain = generate("uniform:prompt_min=10,prompt_max=20,output_min=5,output_max=9", "poisson:rate=1", 50, seed=3)
    np.testing.assert_array_equal(w.prompt_tokens - w.prefix_len, plain.prompt_tokens)


@pytest.mark.parametrize("loop", [{"think_time_s": 1.0}, {"turn_gap_s": 0.1}])
def test_a_conversation_ends_before_its_prompt_passes_the_bound(tmp_path, loop):
    """Turns of 6e8-token messages made a second turn of 1.2e9 prompt tokens; each now opens a conversation."""
    w = generate("fixed:prompt=600000000,output=5", "poisson:rate=1", 4, turns=2, **loop)
    assert w.prompt_tokens.max() == 6 * 10**8 and (w.turn == 0).all()
    w = generate("fixed:prompt=400000000,output=5", "poisson:rate=1", 6, turns=3, **loop)
    assert w.prompt_tokens.max() == 8 * 10**8 + 5 and w.turn.max() == 1
    assert len(load_trace(write_trace(w, tmp_path / "t.csv"))) == 6
