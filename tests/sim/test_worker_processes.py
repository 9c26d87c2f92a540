"""A script that asks for worker processes at its top level (no ``if __name__ == "__main__":``) gets an error
that says so, from the workers and from the call, instead of Python's page of text and a broken pool."""

import subprocess
import sys
import textwrap

UNGUARDED = textwrap.dedent("""
    from sim import SimConfig, run_simulation
    from workloads import load_preset

    config = SimConfig(model="llama-3-8b", gpu="a100-80gb", replicas=2, router="round-robin")
    run_simulation(config, load_preset("sharegpt-demo", num_requests=20), workers=2)
""")


def test_an_unguarded_script_is_told_to_guard_its_call(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: a worker process of run_simulation(workers=2) died")
    assert 'if __name__ == "__main__":' in last
    assert "run_simulation(workers=2) was called while a worker process was starting" in done.stderr
    assert "Safe importing of main module" not in done.stderr  # Python's own text, pre-empted
