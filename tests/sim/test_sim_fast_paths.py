"""The cost model's closed forms for decode runs against brute-force sums of `step_time`, step by step.

`decode_prefix(n, c0)(m)` must be when step ``m`` of a run starts (the sum of the first ``m`` durations) and
`steps_starting_before` how many steps start strictly before a horizon, on both sides of the roofline's
crossover (memory-bound first then compute-bound, or the other way), with parallel lines, with lines that
cross exactly on a step, and at exact float ties with the horizon.
"""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocators.catalog import get_gpu, get_model
from sim.kernel.cost_model import ConstantStepCost, StepCostModel
from tests.soak import examples

SETTINGS = settings(max_examples=examples(60), deadline=None)


def synthetic(token_flops: float, pair_flops: float, weights: float, kv_read: float, kv_write: float,
              overhead: float = 0.003) -> StepCostModel:
    """A roofline with chosen per-unit times, so that every regime of the two lines can be reached:
    compute of decode step j is ``n*token_flops + c_j*pair_flops``, memory ``weights + c_j*kv_read +
    n*kv_write`` with context ``c_j = c0 + n*j``."""
    cost = StepCostModel(get_model("opt-13b"), get_gpu("a100-40gb"), step_overhead_s=overhead)
    cost._t_token_flops, cost._t_pair_flops = token_flops, pair_flops
    cost._t_weights, cost._t_kv_read, cost._t_kv_write = weights, kv_read, kv_write
    return cost


def brute_starts(cost: StepCostModel, n: int, c0: int, k: int) -> list[float]:
    """Start of each of steps 0..k (the last is the run's end), summed step by step."""
    starts = [0.0]
    for j in range(k):
        starts.append(starts[-1] + cost.step_time(0, n, c0 + n * j))
    return starts


def brute_count(starts: list[float], k: int, horizon: float) -> int:
    return max(1, sum(1 for m in range(k) if starts[m] < horizon))


def regime(cost: StepCostModel, n: int, c0: int, k: int) -> str:
    wins = ["c" if n * cost._t_token_flops + (c0 + n * j) * cost._t_pair_flops
            > cost._t_weights + (c0 + n * j) * cost._t_kv_read + n * cost._t_kv_write else "m" for j in range(k)]
    return "".join(w for i, w in enumerate(wins) if i == 0 or w != wins[i - 1])


CASES = {
    # name: (cost model, n, c0, k, expected regime sequence)
    "memory then compute": (synthetic(1e-3, 2e-5, 0.02, 1e-6, 1e-6), 4, 100, 400, "mc"),
    "compute then memory": (synthetic(1e-3, 1e-7, 0.002, 2e-6, 1e-6), 8, 100, 600, "cm"),
    "memory throughout": (StepCostModel(get_model("opt-13b"), get_gpu("a100-40gb")), 30, 5000, 300, "m"),
    "parallel lines": (synthetic(1e-3, 1e-6, 0.5e-3, 1e-6, 0.0), 2, 10, 50, "c"),
    "cross exactly on step 3": (synthetic(1.0, 0.25, 1.75, 0.0, 0.0, overhead=0.5), 1, 0, 10, "mc"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_decode_prefix_is_the_sum_of_the_durations_before(name):
    cost, n, c0, k, expected = CASES[name]
    if name != "cross exactly on step 3":
        assert regime(cost, n, c0, k) == expected
    starts = brute_starts(cost, n, c0, k)
    prefix = cost.decode_prefix(n, c0)
    for m in range(k + 1):
        assert prefix(m) == pytest.approx(starts[m], rel=1e-11, abs=1e-15)
    total, weighted = cost.decode_run(n, c0, k)
    assert total == pytest.approx(starts[k], rel=1e-11)
    assert weighted == pytest.approx(sum(j * (starts[j + 1] - starts[j]) for j in range(k)), rel=1e-11)
    assert prefix(k) == pytest.approx(total, rel=1e-12)


def test_lines_crossing_on_a_step_sum_exactly():
    """Compute 1 + j/4 against memory 7/4: equal at j = 3 (either side may take it); all binary fractions."""
    cost, n, c0, k, _ = CASES["cross exactly on step 3"]
    durations = [0.5 + max(1.0 + 0.25 * j, 1.75) for j in range(k)]
    assert durations[:5] == [2.25, 2.25, 2.25, 2.25, 2.5]
    prefix = cost.decode_prefix(n, c0)
    assert [prefix(m) for m in range(k + 1)] == [sum(durations[:m]) for m in range(k + 1)]
    assert cost.decode_run(n, c0, k)[0] == sum(durations)


@pytest.mark.parametrize("name", list(CASES))
def test_steps_starting_before_counts_starts_strictly_before_the_horizon(name):
    cost, n, c0, k, _ = CASES[name]
    starts = brute_starts(cost, n, c0, k)
    prefix = cost.decode_prefix(n, c0)
    probes = [0.0, -1.0, starts[k] * 10, math.inf]
    for m in range(k):  # between two starts, well clear of either
        probes.append(starts[m] + 0.5 * (starts[m + 1] - starts[m]))
    for horizon in probes:
        want = brute_count(starts, k, horizon)
        assert cost.steps_starting_before(n, c0, k, horizon) == want
        assert cost.steps_starting_before(n, c0, k, horizon, prefix) == want
    for m in range(1, k):  # exact ties: a step starting exactly at the horizon does not start before it
        tie = prefix(m)
        assert cost.steps_starting_before(n, c0, k, tie, prefix) == m
        assert cost.steps_starting_before(n, c0, k, math.nextafter(tie, math.inf), prefix) == m + 1
        assert cost.steps_starting_before(n, c0, k, math.nextafter(tie, -math.inf), prefix) == m


def test_steps_starting_before_edges():
    cost = StepCostModel(get_model("opt-13b"), get_gpu("a100-40gb"))
    assert cost.steps_starting_before(4, 100, 1, 0.0) == 1  # the first step starts now, whatever the horizon
    assert cost.steps_starting_before(4, 100, 0, 1.0) == 1
    assert cost.steps_starting_before(4, 100, 50, math.inf) == 50
    assert cost.steps_starting_before(4, 100, 50, 1e-12) == 1


def test_constant_cost_ties():
    cost = ConstantStepCost(0.5)
    assert cost.steps_starting_before(3, 10, 10, 1.5) == 3  # starts 0, 0.5, 1.0 are before 1.5; 1.5 is not
    assert cost.steps_starting_before(3, 10, 10, math.nextafter(1.5, 2.0)) == 4
    assert cost.steps_starting_before(3, 10, 3, 100.0) == 3
    assert cost.decode_prefix(3, 10)(7) == 3.5


@SETTINGS
@given(token_flops=st.floats(1e-5, 1e-2), pair_flops=st.floats(0, 1e-5), weights=st.floats(1e-4, 0.05),
       kv_read=st.floats(0, 1e-5), kv_write=st.floats(0, 1e-5), overhead=st.floats(0, 0.01),
       n=st.integers(1, 64), c0=st.integers(0, 20_000), k=st.integers(1, 120), where=st.floats(0, 1.2))
def test_closed_forms_match_brute_force_in_every_regime(token_flops, pair_flops, weights, kv_read, kv_write,
                                                       overhead, n, c0, k, where):
    cost = synthetic(token_flops, pair_flops, weights, kv_read, kv_write, overhead)
    starts = brute_starts(cost, n, c0, k)
    prefix = cost.decode_prefix(n, c0)
    for m in range(k + 1):
        assert prefix(m) == pytest.approx(starts[m], rel=1e-9, abs=1e-15)
    assert cost.decode_run(n, c0, k)[0] == pytest.approx(starts[k], rel=1e-9)
    horizon = where * starts[k]
    got = cost.steps_starting_before(n, c0, k, horizon, prefix)
    assert got == max(1, sum(1 for m in range(k) if prefix(m) < horizon))  # exact against its own prefix
    if all(abs(s - horizon) > 1e-9 * max(starts[k], 1e-12) for s in starts):  # clear of rounding: brute force
        assert got == brute_count(starts, k, horizon)
