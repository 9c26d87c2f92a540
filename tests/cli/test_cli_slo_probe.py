"""`kvsim slo` says when its probe was too short to reach steady state, instead of reporting a rate that
depends on --num-requests (300 requests once "sustained" 362 req/s where 3,000 sustained 87)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from sim.cli import main
from sim.sweep.slo import steady_state_warning

ARGS = ["slo", "--allocator", "paged", "--preset", "sharegpt-paper", "--num-requests", "100",
        "--normalized-latency", "0.2", "--workers", "1"]


def test_a_short_probe_is_flagged_in_the_table_and_the_json():
    runner = CliRunner()
    text = runner.invoke(main, ARGS)
    assert text.exit_code == 0, text.output
    warning = [line for line in text.stdout.splitlines() if line.startswith("warning: paged: ")]
    assert len(warning) == 1 and "probe too short for steady state" in warning[0]
    assert "--num-requests" in warning[0]
    records = json.loads(runner.invoke(main, [*ARGS, "--json"]).stdout)
    assert records[0]["warning"].startswith("probe too short for steady state")


def test_steady_state_needs_a_long_enough_probe_that_keeps_up():
    long_probe = {"requests": 3000, "e2e_p50_s": 10.0, "throughput_req_s": 2.0}
    assert steady_state_warning(long_probe, 2.0) is None
    assert "under 5 median latencies" in steady_state_warning({**long_probe, "requests": 50}, 2.0)
    assert "fell behind arrivals" in steady_state_warning({**long_probe, "throughput_req_s": 1.0}, 2.0)
