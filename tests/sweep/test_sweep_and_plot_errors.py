"""Regression tests for the review of plots, sweeps and the reproduction: each names the bug it pins down."""

from __future__ import annotations

import sys
import types

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from test_sweep_fakes import queue_point

from sim.cli import main


@pytest.fixture
def simulations(monkeypatch) -> list:
    """`sim.kernel.runner.run_config` answers from the queue fake and records every configuration it runs."""
    ran: list = []

    def run_config(config, **_options):
        ran.append(config)
        return types.SimpleNamespace(summary=queue_point(config))

    module = types.ModuleType("sim.kernel.runner")
    module.run_config = run_config
    monkeypatch.setitem(sys.modules, "sim.kernel.runner", module)
    return ran


def _slo(*args: str):
    return CliRunner().invoke(main, ["slo", "--workers", "1", "--quiet", *args])


def test_slo_plot_with_nothing_sustained_is_a_one_line_error_after_the_table(tmp_path, simulations):
    """Was: plot_slo's ValueError escaped as a traceback, and the table was never printed."""
    plot = tmp_path / "slo.png"
    result = _slo("--allocator", "contiguous-max", "--e2e-p50", "0.05", "--plot", str(plot))
    assert result.exit_code == 2
    assert "below-min" in result.output  # the table came out first
    assert "no configuration met the target" in result.output and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and result.output.strip().splitlines()[-1] == errors[0]
    assert not plot.exists()


@pytest.mark.parametrize(("flag", "name", "message"), [
    ("--out", "slo.txt", "use a .parquet or .csv file name"),
    ("--plot", "slo.bmp", "the image type comes from the suffix"),
])
def test_slo_bad_output_names_fail_before_any_simulation(tmp_path, simulations, flag, name, message):
    """Was: the names were only checked (or, for --plot, failed in matplotlib) after every search had run."""
    result = _slo("--allocator", "paged", "--e2e-p50", "0.5", flag, str(tmp_path / name))
    assert result.exit_code == 2 and message in result.output
    assert simulations == []


def test_dask_map_failure_is_reported_as_itself(monkeypatch):
    """Was: ``futures`` was unbound in the finally block when ``client.map`` raised, hiding the cause."""
    from sim.sweep import executors

    class Client:
        def __init__(self, *args, **kwargs) -> None:
            self.closed = False

        def map(self, *args, **kwargs):
            raise RuntimeError("scheduler refused the tasks")

        def close(self) -> None:
            self.closed = True

    class LocalCluster:
        def __init__(self, **kwargs) -> None:
            pass

        def close(self) -> None:
            pass

    monkeypatch.setattr(executors, "_import_dask", lambda: (Client, LocalCluster, None))
    with pytest.raises(RuntimeError, match="scheduler refused the tasks"):
        list(executors.run_tasks(abs, [1, 2], executor="dask"))


def test_latency_cdf_names_the_run_that_lacks_the_metric():
    """Was: the first pass over the runs called every table "run" in the error."""
    from sim.plots import plot_latency_cdf

    good = pd.DataFrame({"ttft_s": [0.1, 0.2], "tpot_s": [0.01, 0.02]})
    with pytest.raises(ValueError, match="requests table of contiguous-max lacks"):
        plot_latency_cdf({"paged": good, "contiguous-max": good.drop(columns=["tpot_s"])})


def test_latency_cdf_lines_cover_each_runs_requests():
    from sim.plots import plot_latency_cdf

    runs = {"paged": pd.DataFrame({"ttft_s": [0.1, 0.2, 0.4], "rejected": [False, False, True]}),
            "contiguous-max": pd.DataFrame({"ttft_s": [0.3, np.nan]})}
    fig = plot_latency_cdf(runs, metrics=("ttft_s",))
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels == ["Max (contiguous) (n=1)", "Paged (n=2)"]


def test_sharing_savings_refuses_two_rows_for_one_bar():
    """Was: a TypeError from float() of a two-row selection."""
    from sim.plots import plot_sharing_savings

    rows = pd.DataFrame({"mode": ["beam search"] * 2, "workload": ["w"] * 2, "width": [2, 2],
                         "shared_saved_frac": [0.1, 0.2]})
    with pytest.raises(ValueError, match="more than one row for mode beam search, workload w, width 2"):
        plot_sharing_savings(rows)


@pytest.mark.parametrize(("typ", "value", "expected"), [
    (int, "16", 16), (int, 16, 16), (float, 2, 2.0), (float, "0.5", 0.5), (float, 0.5, 0.5),
])
def test_numbers_coerce_from_flags_and_toml(typ, value, expected):
    from sim.sweep.grid import coerce_value

    out = coerce_value("f", typ, value, "here")
    assert out == expected and type(out) is typ


@pytest.mark.parametrize(("typ", "value", "message"), [
    (int, 2.0, "expected an integer"), (int, "2.5", "expected an integer"), (int, True, "expected an integer"),
    (float, True, "expected a number"), (float, "fast", "expected a number"),
])
def test_numbers_refuse_other_values(typ, value, message):
    from sim.sweep.grid import coerce_value

    with pytest.raises(ValueError, match=f"here: field 'f': {message}"):
        coerce_value("f", typ, value, "here")


def test_cli_experiment_choices_are_the_reproductions_experiments():
    from sim.commands.reproduce import EXPERIMENT_CHOICES
    from sim.reproduce.run import EXPERIMENTS

    assert EXPERIMENT_CHOICES == EXPERIMENTS


def test_figures_order_allocators_as_the_paper_does():
    """The plot order now comes from the catalog; the paper's four must still come first, in its order."""
    from sim.plots.style import order_allocators
    from sim.reproduce.paper import BATCH_ORDER

    assert order_allocators(["mine", "paged", "paged-cow", *reversed(BATCH_ORDER)]) == [
        *BATCH_ORDER, "paged-cow", "mine"]
