"""ruff is the project's linter; the tree stays clean of its findings.

ruff runs through the interpreter running the tests (``python -m ruff``), so an unactivated virtual
environment still finds it, and a missing ruff is a failure (it is in the test extra), never a silent skip.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_is_clean():
    assert importlib.util.find_spec("ruff") is not None, \
        f"ruff is not installed for {sys.executable} (pip install -e '.[test]')"
    result = subprocess.run([sys.executable, "-m", "ruff", "check", str(ROOT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
