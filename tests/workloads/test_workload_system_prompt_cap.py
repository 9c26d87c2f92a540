"""Regression: a shared system prompt no longer breaks the lengths cap. The cap (``max_total``) holds for
the final request: for requests given the system prompt, the drawn prompt is shortened (then, if need be,
the output) so that system prompt + prompt + output stays within it."""

import numpy as np
import pytest

from workloads.errors import TraceError
from workloads.named import generate

LENGTHS = "lognormal:prompt_mean=161,prompt_cv=1.2,output_mean=338,output_cv=1.0,max_total=2048"


@pytest.mark.parametrize("turns", [1, 3])
def test_system_prompt_stays_within_the_cap(turns):
    gap = {"turn_gap_s": 1.0} if turns > 1 else {}
    w = generate(LENGTHS, "poisson:rate=2", 2000, seed=1, system_prompt_len=500, system_prompt_frac=1.0,
                 turns=turns, **gap)
    total = w.prompt_tokens + w.output_tokens
    assert total.max() <= 2048
    assert (w.prompt_tokens >= 500 + 1).all() and (w.output_tokens >= 1).all()
    assert (w.prefix_len == 500).all()


def test_cap_reached_by_the_system_prompt_alone_is_an_error():
    with pytest.raises(TraceError, match="system_prompt_len"):
        generate("uniform:prompt_min=10,prompt_max=20,output_min=5,output_max=9,max_total=100", "poisson:rate=1",
                 10, system_prompt_len=99, system_prompt_frac=0.5)


def test_requests_without_system_prompt_keep_their_draws():
    plain = generate(LENGTHS, "poisson:rate=2", 500, seed=2)
    mixed = generate(LENGTHS, "poisson:rate=2", 500, seed=2, system_prompt_len=500, system_prompt_frac=0.5)
    without = mixed.prefix_len == 0
    assert without.any() and (~without).any()
    np.testing.assert_array_equal(mixed.prompt_tokens[without], plain.prompt_tokens[without])
    np.testing.assert_array_equal(mixed.output_tokens, np.minimum(plain.output_tokens, 2048 - mixed.prompt_tokens))
