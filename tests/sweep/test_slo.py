"""The SLO rate search: bracketing, bisection, the failure rules, and a grid of searches."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from test_sweep_fakes import SERVICE_S, capacity, queue_point, rejecting_point

from sim.kernel.config import SimConfig
from sim.kernel.ignored_settings import SettingWarning
from sim.sweep.grid import grid_from_flags
from sim.sweep.run import run_slo
from sim.sweep.slo import SearchSettings, SloTarget, search_rate

E2E = SloTarget({"e2e_p50_s": 0.5})


def _true_limit(config, bound: float) -> float:
    """Highest rate with SERVICE_S / (1 - rate / cap) <= bound."""
    return capacity(config) * (1 - SERVICE_S / bound)


def test_search_brackets_the_true_limit_within_tolerance():
    config = SimConfig(allocator="paged", seed=3)
    settings = SearchSettings(rate_min=0.5, growth=2.0, tolerance=0.05)
    row = search_rate(queue_point, config, E2E, settings)
    limit = _true_limit(config, 0.5)  # 6.4 req/s
    assert row["status"] == "ok" and row["error"] is None
    assert row["rate_ok"] <= limit < row["rate_fail"]
    assert row["rate_fail"] / row["rate_ok"] - 1 <= 0.05
    assert row["sustained_rate"] == row["rate_ok"]
    probes = json.loads(row["probes"])
    assert [r for r, _ in probes[:5]] == [0.5, 1.0, 2.0, 4.0, 8.0]  # bracketing, then bisection
    assert row["simulations"] == len(probes) and 6 <= len(probes) <= 12
    assert row["e2e_p50_s_at_ok"] <= 0.5 and row["fail_reason"].startswith("e2e_p50_s=")
    assert row["seed"] == 3 and "rate" not in row


def test_every_probe_keeps_the_seed():
    seen: list[tuple[int, float]] = []

    def recording(config):
        seen.append((config.seed, config.rate))
        return queue_point(config)

    search_rate(recording, SimConfig(seed=7), E2E, SearchSettings())
    assert {seed for seed, _ in seen} == {7} and len({rate for _, rate in seen}) == len(seen)


def test_rejected_or_unfinished_requests_fail_the_target():
    row = search_rate(rejecting_point, SimConfig(), E2E, SearchSettings(tolerance=0.01))
    assert 3.0 - 0.04 <= row["rate_ok"] <= 3.0 < row["rate_fail"]
    assert row["fail_reason"] == "1 rejected"
    assert E2E.check({"requests": 10, "completed": 9, "rejected": 0, "e2e_p50_s": 0.1}) == "1 unfinished"
    assert E2E.check({"requests": 10, "completed": 10, "rejected": 0, "e2e_p50_s": math.nan}) == "e2e_p50_s missing"
    assert E2E.check({"requests": 10, "completed": 10, "rejected": 0, "e2e_p50_s": 0.5}) is None
    reasons = {"prompt of N tokens leaves no room for an output token within max_model_len 8192": 3, "other": 1}
    assert E2E.check({"requests": 10, "completed": 6, "rejected": 4, "rejected_reasons": reasons}) == (
        "4 rejected (3: prompt of N tokens leaves no room for an output token within max_model_len 8192)")


def test_below_min_above_max_and_errors():
    low = search_rate(queue_point, SimConfig(allocator="contiguous-max"), E2E, SearchSettings(rate_min=4.0))
    assert low["status"] == "below-min" and math.isnan(low["sustained_rate"]) and low["rate_fail"] == 4.0
    assert low["simulations"] == 1
    high = search_rate(queue_point, SimConfig(), SloTarget({"e2e_p50_s": 100.0}), SearchSettings(rate_max=3.0))
    assert high["status"] == "above-max" and high["sustained_rate"] == 3.0 and math.isnan(high["rate_fail"])
    assert json.loads(high["probes"]) == [[0.5, True], [1.0, True], [2.0, True], [3.0, True]]
    broken = search_rate(queue_point, SimConfig(allocator="broken"), E2E, SearchSettings())
    assert broken["status"] == "failed" and broken["error"] == "RuntimeError: simulated failure"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rate_min": 0.0}, "--rate-min"), ({"rate_min": 5.0, "rate_max": 1.0}, "--rate-min"),
    ({"rate_max": math.inf}, "--rate-max < inf"),
    ({"growth": 1.0}, "--growth"), ({"growth": math.inf}, "--growth must be above 1 and finite"),
    ({"tolerance": 0.0}, "--tolerance"), ({"tolerance": math.inf}, "--tolerance must be at least 1e-09 and finite"),
    # before: a bisection whose midpoint rounds to an end of the bracket, forever
    ({"tolerance": 1e-300}, "--tolerance must be at least 1e-09"),
    # before: searches of days, or never ending (rates too far apart for a float)
    ({"growth": 1.0000000000001}, r"could take 7\.61e\+13 simulations, over the 200 one may: 7\.61e\+13 to bracket "
                                  r"--rate-min 0\.5 \.\. --rate-max 1000\.0 by --growth 1\.0000000000001, 0 to"),
    ({"rate_min": 1e-300, "rate_max": 1e300}, "could take inf simulations"),
])
def test_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SearchSettings(**kwargs)


@pytest.mark.parametrize(("settings", "most"), [
    (SearchSettings(), (12, 4)), (SearchSettings(growth=1.1), (81, 1)), (SearchSettings(rate_max=0.5), (1, 0)),
    (SearchSettings(rate_min=1e-3, rate_max=1e6, tolerance=1e-9), (31, 30)),
])
def test_most_probes_bounds_every_search(settings, most):
    """The bound the settings are refused past is the search's own: a limit anywhere in (or out of) the range
    takes no more probes, and some limit takes all of them."""
    assert settings.most_probes() == most
    taken = []
    for limit in np.geomspace(settings.rate_min / 3, settings.rate_max * 3, 400):
        def point(config, limit=limit):
            return {"requests": 1, "completed": 1, "e2e_p50_s": 0.1 if config.rate <= limit else 1.0}
        taken.append(search_rate(point, SimConfig(), E2E, settings)["simulations"])
    assert max(taken) == sum(most)


def test_target_needs_a_positive_bound():
    with pytest.raises(ValueError, match="at least one target"):
        SloTarget({})
    with pytest.raises(ValueError, match="positive"):
        SloTarget({"ttft_p99_s": -1.0})


def test_grid_of_searches_in_grid_order_and_parallel_agrees():
    grid = grid_from_flags(["--allocator", "paged,contiguous-max,broken", "--block-size", "16,32"], SimConfig)
    target = SloTarget({"ttft_p99_s": 1.5, "tpot_p50_s": 0.01})
    settings = SearchSettings(tolerance=0.02)
    table = run_slo(grid, target, settings, point_fn=queue_point)
    assert list(table["allocator"]) == ["paged", "paged", "contiguous-max", "contiguous-max", "broken", "broken"]
    assert list(table["status"]) == ["ok"] * 4 + ["failed"] * 2
    for _, row in table.iloc[:4].iterrows():
        limit = capacity(SimConfig(allocator=row["allocator"], block_size=row["block_size"])) * (1 - 0.3 / 1.5)
        assert row["rate_ok"] <= limit < row["rate_fail"]
    assert table["target"][0] == "ttft_p99_s<=1.5, tpot_p50_s<=0.01"
    pooled = run_slo(grid, target, settings, point_fn=queue_point, workers=2)
    assert pooled.equals(table)


def test_slo_refuses_a_rate_axis():
    grid = grid_from_flags(["--rate", "1,2"], SimConfig)
    with pytest.raises(ValueError, match="chooses the rate itself"):
        run_slo(grid, E2E, SearchSettings(), point_fn=queue_point)


@pytest.mark.parametrize("bounds, flags", [
    ({"tpot_p50_s": 50.0}, ["--tpot-p50 50"]),
    ({"ttft_p99_s": 500.0, "e2e_p50_s": 20_000.0}, ["--ttft-p99 500", "--e2e-p50 20000"]),
    ({"normalized_latency_s_per_tok": 5.0}, ["--normalized-latency 5"]),
])
def test_a_bound_no_target_takes_in_seconds_is_warned_of_as_milliseconds(bounds, flags):
    """``--tpot-p50 50`` meant as 50 ms bounds TPOT at 50 s, which every rate meets: the target is kept as given
    (the unit cannot be known) and each such bound is named with the value in seconds it may have meant."""
    with pytest.warns(SettingWarning) as said:
        target = SloTarget(bounds)
    assert target.bounds == bounds
    assert [str(w.message).split(" bounds ")[0] for w in said] == flags
    assert f"give {next(iter(bounds.values())) / 1000:g}" in str(said[0].message)


def test_plausible_bounds_in_seconds_are_not_warned_of():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SloTarget({"ttft_p99_s": 60.0, "tpot_p50_s": 1.0, "e2e_p50_s": 600.0, "normalized_latency_s_per_tok": 1.0})
