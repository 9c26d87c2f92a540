"""The vLLM oracle harness's comparison module (``tools/vllm_oracle/compare.py``, which is a script, not a package)
and its reference folder, for the tests that hold kvsim to vLLM's own scheduler: synchronous, async and with
speculative drafts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "sim" / "data" / "vllm_oracle"


def _compare_module():
    spec = importlib.util.spec_from_file_location("vllm_oracle_compare", ROOT / "tools" / "vllm_oracle" / "compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compare = _compare_module()


def cases(folder: Path) -> list[str]:
    """The reference cases in ``folder``, by name."""
    return sorted(d.name for d in folder.iterdir() if (d / "steps.csv.gz").exists())
