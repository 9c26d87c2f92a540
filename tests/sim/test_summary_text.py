"""The summary as text: `run` and `compare` print one figure the same way, and a fleet marks the figures that
are one replica's among the fleet-wide ones."""

from __future__ import annotations

from click.testing import CliRunner

from sim.cli import main
from sim.kernel.fleet_summary import PER_REPLICA_KEYS
from sim.kernel.summary import format_comparison, format_number, format_summary


def test_run_and_compare_print_a_large_figure_alike():
    summary = {"allocator": "paged", "throughput_tok_s": 12345.6, "ttft_p50_s": 0.0428912, "sim_time_s": float("nan")}
    run_text = format_summary(summary)
    compare_text = format_comparison([summary], ("throughput_tok_s", "ttft_p50_s", "sim_time_s"))
    for text in (run_text, compare_text):
        assert "12,346" in text and "0.04289" in text and "nan" in text and "e+04" not in text
    assert format_number(9999.4) == "9999" and format_number(1.5e-5) == "1.5e-05"


def fleet_lines(command: list[str]) -> dict[str, str]:
    result = CliRunner().invoke(main, [*command, "--preset", "sharegpt-demo", "--num-requests", "30",
                                       "--replicas", "2"])
    assert result.exit_code == 0, result.output
    return {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}


def test_a_fleet_marks_each_replicas_figures_and_only_those():
    for lines in (fleet_lines(["run"]), fleet_lines(["compare", "--allocators", "paged"])):
        marked = {key for key, line in lines.items() if "(per replica)" in line}
        assert {"mean_running", "max_running", "free_frac"} <= marked <= PER_REPLICA_KEYS
        assert "(per replica)" not in lines["throughput_tok_s"] and "(per replica)" not in lines["completed"]
    assert "KV token slots per replica (2 replicas)" in fleet_lines(["compare", "--allocators", "paged"])["deployment:"]


def test_a_single_server_marks_nothing():
    result = CliRunner().invoke(main, ["run", "--preset", "sharegpt-demo", "--num-requests", "30"])
    assert result.exit_code == 0 and "per replica" not in result.stdout
