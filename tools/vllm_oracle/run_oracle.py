"""Regenerate the reference outputs: every case's trace, then vLLM's real scheduler on it.

    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_oracle/run_oracle.py [--out tests/sim/data/vllm_oracle] [CASE ...]

Writes ``OUT/CASE/{trace.csv, settings.json, steps.csv.gz, requests.csv}``. Runs in one process (vLLM's import
takes ~20 s); reruns are byte-identical.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import cases  # noqa: E402
import driver  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=list(cases.CASES))
    p.add_argument("--out", default="tests/sim/data/vllm_oracle")
    a = p.parse_args()
    for name in a.names:
        out = Path(a.out) / name
        out.mkdir(parents=True, exist_ok=True)
        cases.write_trace(name, out / "trace.csv")
        (out / "settings.json").write_text(json.dumps(cases.settings(name), indent=1) + "\n")
        driver.run(cases.driver_args(name, out / "trace.csv", out))
        driver.gzip_steps(out)
        print(name, "done", flush=True)


if __name__ == "__main__":
    main()
