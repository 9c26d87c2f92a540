"""Every benchmark script still runs, at a size too small to time anything.

Why: the scripts in ``benchmarks/`` are run on demand, not by the suite, so a change elsewhere can break one
unseen until someone needs its figure (``bench_radix.py`` passed a float capacity for sessions after the
allocators began refusing one). Here each runs once on the shipped samples (no ``$KVSIM_TRACES``), and what it
prints is checked for the line its figures are read from; no timing is asserted (timing targets live in the
scripts' own output and ``benchmarks/README.md``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RUNS = {
    "bench_radix": (["--requests", "40", "--concurrent", "8", "--repeats", "1", "--cpu"], "radix / paged ="),
    "bench_allocator": (["--seqs", "8", "--steps", "20", "--repeats", "1"], "paged block path"),
    "bench_sim": (["mooncake", "-n", "60", "--allocator", "radix", "--cpu-offload-gib", "4", "--repeat", "2"],
                  "least"),
    "bench_fleet": (["-n", "60", "--replicas", "2"], "completed 60"),
    "bench_workloads": (["--rows", "1000", "--repeats", "1"], "1,000-row canonical"),
    "outputs_digest": (["--list"], "sessions-fleet"),
}
"""Script -> (arguments for a tiny run, a phrase its output must contain)."""


@pytest.mark.parametrize("script", sorted(RUNS))
def test_the_benchmark_script_runs(script):
    argv, phrase = RUNS[script]
    env = {k: v for k, v in os.environ.items() if k not in ("KVSIM_TRACES", "KVSIM_SHARED_TRACES")}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{script}.py"), *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert phrase in done.stdout, done.stdout[-2000:]
