"""Regressions from the review of the simulator part: an infinite size or time in the configuration is a
one-line error naming the field (it used to surface as an OverflowError traceback, a NaN conversion error,
or a run of infinite simulated time); integer knobs of any kind are checked by one rule; the `run` flags
take their defaults from `SimConfig`."""

import json
import math

import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.kernel.config import SimConfig, flag


@pytest.mark.parametrize("field", ["kv_gib", "step_time", "rate", "swap_space_gib"])
@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_infinite_or_nan_sizes_and_times_are_refused(field, value):
    with pytest.raises(ValueError, match=flag(field)):
        SimConfig(**{field: value})


@pytest.mark.parametrize("value", [1e-9, 5e-10, 0.0, -0.01])
def test_a_step_time_under_a_microsecond_is_refused(value):
    """The clock ties an arrival to a step start within a nanosecond: steps of a nanosecond or less broke
    fast-forward's equality with stepping (shares differing in the fourth digit)."""
    with pytest.raises(ValueError, match=r"--step-time must be a finite number of seconds >= 1e-06"):
        SimConfig(step_time=value)
    assert SimConfig(step_time=1e-6).step_time == 1e-6


@pytest.mark.parametrize("flag", ["--kv-gib", "--step-time", "--swap-space-gib"])
def test_cli_refuses_infinity_in_one_line(tmp_path, flag):
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,100,10\n1,100,10\n")
    out = CliRunner().invoke(main, ["run", str(path), flag, "inf", "--json"])
    assert out.exit_code == 2, out.output
    assert out.output.strip().splitlines()[-1].startswith("Error: ") and flag in out.output
    assert "Traceback" not in out.output


@pytest.mark.parametrize("field", ["seed", "memory_snapshots", "debug_invariants"])
def test_non_negative_integer_fields(field):
    assert getattr(SimConfig(**{field: 0}), field) == 0
    for bad in (-1, 1.5, True, None, "3"):
        with pytest.raises(ValueError, match=f"{flag(field)} must be a non-negative integer"):
            SimConfig(**{field: bad})


def test_finite_values_still_accepted():
    config = SimConfig(kv_gib=0.5, step_time=1e-3, rate=1e6, swap_space_gib=0)
    assert config.swap_space_gib == 0 and config.rate == 1e6


def test_run_flag_defaults_are_the_config_defaults(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,100,10\n")
    out = CliRunner().invoke(main, ["run", str(path), "--step-time", "0.01", "--out", str(tmp_path / "o"),
                                    "--format", "csv", "--json"])
    assert out.exit_code == 0, out.output
    written = json.loads((tmp_path / "o" / "config.json").read_text())
    assert written == SimConfig(trace=str(path), step_time=0.01).to_dict()
