"""What `run_simulation` takes: a `SimConfig` and a `workloads.Workload` (anything else is a TypeError naming
the argument and what to pass); a config whose workload fields name another workload than the one passed is
refused, since ``r.config`` would echo them as applied; settings that change nothing are Python warnings, in
the words ``kvsim run`` prints, once each, and the CLI shows only its own line."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.runner import resolve_workload, run_config, run_simulation
from workloads import load_preset, load_trace, workload_to_frame

SMALL = dict(kv_gib=2.0, step_time=0.01, memory_snapshots=0)


def write_trace(path, workload):
    frame = workload_to_frame(workload)[["arrival_time_s", "prompt_tokens", "output_tokens"]]
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def workload():
    return load_preset("sharegpt-demo", num_requests=12, seed=5)


def run_quietly(config, workload, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run_simulation(config, workload, **kwargs)
    return result, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


@pytest.mark.parametrize("fields", [dict(rate=20.0), dict(num_requests=10), dict(preset="azure-conv"),
                                    dict(rate=20.0, num_requests=10, preset="azure-conv")])
def test_workload_fields_that_name_another_workload_are_refused(workload, fields):
    with pytest.raises(ValueError) as info:
        run_simulation(SimConfig(**SMALL, **fields), workload)
    message = str(info.value)
    assert "\n" not in message and message.startswith("run_simulation: the config's workload fields ")
    for name, value in fields.items():
        assert f"{name}={value!r}" in message
    assert "workload.head(n)" in message and "load_trace(path, arrivals=" in message


def test_trace_fields_with_a_frame_workload_are_refused(tmp_path, workload):
    path = write_trace(tmp_path / "t.csv", workload)
    with pytest.raises(ValueError, match=r"workload fields trace='[^']*t\.csv', arrivals='poisson:rate=4'"):
        run_simulation(SimConfig(**SMALL, trace=str(path), arrivals="poisson:rate=4"), workload)


def test_the_configs_own_workload_runs(workload):
    """The CLI's path (`resolve_workload` of the same config), a workload given parallel sampling by
    `Workload.select` (the paper's experiments), and one the caller loaded exactly as the fields say."""
    config = SimConfig(**SMALL, preset="sharegpt-paper", rate=4.0, num_requests=10, seed=5)
    own = resolve_workload(config)
    assert run_simulation(config, own).summary["requests"] == 10
    sampled = own.select(np.arange(len(own)), n=np.full(len(own), 2))
    assert run_simulation(config, sampled).summary["seed"] == 5
    same = load_preset("sharegpt-paper", num_requests=10, rate=4.0, seed=5)
    assert run_simulation(config, same).summary["requests"] == 10
    with pytest.raises(ValueError, match="num_requests=10"):
        run_simulation(config, own.head(5))


def test_a_trace_loaded_as_the_config_names_it_runs(tmp_path, workload):
    path = write_trace(tmp_path / "t.csv", workload)
    summary = run_simulation(SimConfig(**SMALL, trace=str(path)), load_trace(path)).summary
    assert summary["requests"] == len(workload)


def test_the_requests_table_joins_back_to_the_trace_file(tmp_path, workload):
    """Skipped rows leave ``request_id`` counting only the rows kept; ``trace_row``, the line the reader's errors
    name, says where each request was read, in one run's table and in a fleet's. A workload read from no file
    has none (NA)."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,10,5\n1,x,5\n\n2,20,5\n3,1e30,5\n4,30,5\n")
    for replicas in ("1", "2"):
        out = tmp_path / f"replicas{replicas}"
        result = CliRunner().invoke(main, ["run", "--trace", str(trace), "--skip-bad-rows", "--replicas", replicas,
                                           "--kv-gib", "2", "--step-time", "0.01", "--out", str(out), "--format",
                                           "csv"])
        assert result.exit_code == 0, result.output
        table = pd.read_csv(out / "requests.csv")
        assert table["request_id"].tolist() == [0, 1, 2] and table["trace_row"].tolist() == [2, 5, 7]
        assert table["prompt_tokens"].tolist() == [10, 20, 30]
    generated = run_simulation(SimConfig(**SMALL), workload).requests["trace_row"]
    assert generated.dtype == "Int64" and generated.isna().all()


def test_seed_of_a_run_that_draws_nothing_is_not_reported(workload):
    """The workload was drawn with seed 5; the config's seed (0) seeded nothing in this run, so the summary
    does not say seed 0 beside a workload_source that says seed 5."""
    summary = run_simulation(SimConfig(**SMALL), workload).summary
    assert summary["seed"] is None and "seed 5" in summary["workload_source"]
    beams = workload.select(np.arange(len(workload)), beam_width=np.full(len(workload), 2))
    assert run_simulation(SimConfig(**SMALL, seed=3), beams).summary["seed"] == 3
    assert run_simulation(SimConfig(**SMALL, seed=3, replicas=2, router="random"), workload).summary["seed"] == 3
    assert run_config(SimConfig(**SMALL, num_requests=5, seed=3)).summary["seed"] == 3


@pytest.mark.parametrize(("make", "expected"), [
    (lambda c, w: (c, workload_to_frame(w)),
     "workload must be a workloads.Workload, got DataFrame (a frame: workloads.workload_from_frame(df))"),
    (lambda c, w: (c, "trace.csv"),
     "workload must be a workloads.Workload, got str (a trace file: workloads.load_trace(path))"),
    (lambda c, w: (c, list(w)), "workload must be a workloads.Workload, got list (a list of requests: "),
    (lambda c, w: (w, c), "the arguments are swapped; call run_simulation(config, workload)"),
    (lambda c, w: (c.to_dict(), w), "config must be a sim.SimConfig, got dict (a dict of fields: SimConfig(**d))"),
])
def test_wrong_argument_types_are_one_line_type_errors(workload, make, expected):
    config, given = make(SimConfig(**SMALL), workload)
    with pytest.raises(TypeError) as info:
        run_simulation(config, given)
    assert str(info.value).startswith("run_simulation: " + expected) and "\n" not in str(info.value)


def test_fields_set_after_construction_are_checked_as_the_constructor_checks_them(workload):
    config = SimConfig(**SMALL)
    config.rate = -3.0  # was reported as a workload field naming another workload
    with pytest.raises(ValueError, match=r"^--rate must be a positive finite number, got -3.0$"):
        run_simulation(config, workload)


def test_a_warning_points_at_the_callers_line_through_kvsims_helpers():
    from sim.reproduce.explore import compare_allocators

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_config(SimConfig(**SMALL, placement="first-fit", num_requests=4))
        compare_allocators(["paged"], preset="sharegpt-demo", num_requests=4, placement="best-fit", step_time=0.01)
    assert [(w.filename, "ignored" in str(w.message)) for w in caught] == [(__file__, True)] * 2


def test_ignored_settings_are_warned_each_run(workload):
    config = SimConfig(**SMALL, placement="first-fit", prefix_caching=False, cpu_offload_gib=16,
                       router="prefix-aware")
    result, caught = run_quietly(config, workload)
    ignored = result.summary["ignored_settings"]
    assert len(ignored) == 3
    assert caught == [f"paged: {flag} ignored: {why}" for flag, why in ignored.items()]
    assert run_quietly(config, workload)[1] == caught  # every run says what it ignored
    assert run_quietly(SimConfig(**SMALL, placement="best-fit"), workload)[1] == [
        "paged: --placement best-fit ignored: slab placement applies to contiguous allocators, not paged"]


def test_warn_false_and_a_run_that_ignores_nothing_are_quiet(workload):
    assert run_quietly(SimConfig(**SMALL, placement="first-fit"), workload, warn=False)[1] == []
    assert run_quietly(SimConfig(**SMALL), workload)[1] == []


def test_workers_that_do_not_apply_are_warned(workload):
    _, caught = run_quietly(SimConfig(**SMALL), workload, workers=4)
    assert caught == ["note: --workers 4 splits the replicas of a fleet; one replica runs in one process"]
    _, caught = run_quietly(SimConfig(**SMALL, replicas=2, router="least-kv"), workload, workers=2)
    assert caught == ["note: --workers 2 applies to routers that read no replica state (round-robin, random); "
                      "least-kv reads it at every arrival, so the fleet runs in one process"]


def test_cli_prints_its_own_line_and_no_python_warning():
    out = CliRunner().invoke(main, ["run", "--num-requests", "8", "--kv-gib", "2", "--step-time", "0.01",
                                    "--placement", "first-fit", "--workers", "2", "--json"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines.count("Warning: paged: --placement first-fit ignored: slab placement applies to contiguous "
                       "allocators, not paged") == 1
    assert lines.count("note: --workers 2 splits the replicas of a fleet; one replica runs in one process") == 1
    assert "UserWarning" not in out.output
