"""Replay the hybrid Mamba cases (`mamba_driver.py`) through kvsim on nemotron-h-8b and compare them with vLLM's
outputs step for step.

    PYTHONPATH=$PWD python tools/vllm_oracle/mamba_compare.py [--data tests/sim/data/vllm_oracle_mamba] [CASE ...]

Besides `compare.py`'s run-wide and per-request metrics, every engine step's running and waiting requests,
prefill tokens, decoding requests and used blocks must be vLLM's (kvsim ``--step-by-step``, one row a step); the
same again under vLLM 0.33's default async scheduling against ``DATA/async/CASE`` (`mamba_driver.py
--async-scheduling`; kvsim ``--async-scheduling``, steps counted to the run's end as ``async_gap.py`` counts
them). Needs kvsim only, not vLLM.

The speculative decoding cases (``DATA`` ``tests/sim/data/vllm_oracle_mamba_spec``: ``mamba_driver.py``'s
``*_spec_K``, ngram with prefix caching off) compare the same step columns but the decoding one (vLLM writes the
decode tokens a step schedules, drafts included; kvsim the decoding requests), and vLLM's spec decoding counters
(``spec.json``) instead (`spec_differences`); their async runs (``DATA/async/CASE``, ``mamba_driver.py
--out tests/sim/data/vllm_oracle_mamba_spec --async-scheduling``) theirs, from ``DATA/async/CASE/spec.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))

import compare  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "tests" / "sim" / "data" / "vllm_oracle_mamba"
MODEL = "nemotron-h-8b"
"""kvsim's model for these cases: six Mamba KV cache groups, then one attention group (its layer 0 is a Mamba
layer), blocks of 1,040 tokens (the driver's groups); its pool of ``num_blocks`` blocks is ``--kv-tokens num_blocks x 1040``, a block being 1,040
tokens of its four attention layers."""
STEP_COLUMNS = {"running": "running", "waiting": "waiting", "prefill_tokens": "prefill_tokens",
                "decode_seqs": "decode_tokens", "used_blocks": "used_blocks"}
"""kvsim's step-table column -> vLLM's (one decode token a decoding request)."""


def kvsim_config(settings: dict, trace: Path, *, step_by_step: bool = False, asynchronous: bool = False):
    """`compare.kvsim_config` on `MODEL`, the block size left to kvsim (raised to the model's 1,040 as vLLM
    raises it); ``asynchronous``: vLLM's async scheduling."""
    config = compare.kvsim_config(settings, trace, step_by_step=step_by_step)
    return dataclasses.replace(config, model=MODEL, kv_tokens=settings["num_blocks"] * settings["block_size"],
                               block_size=None, async_scheduling=asynchronous)


def run(case: Path, *, step_by_step: bool = False, asynchronous: bool = False):
    from sim.kernel.runner import run_config

    settings = json.loads((case / "settings.json").read_text())
    return run_config(kvsim_config(settings, case / "trace.csv", step_by_step=step_by_step,
                                   asynchronous=asynchronous))


def metrics(result, *, asynchronous: bool = False) -> dict:
    """`compare.METRICS` of a kvsim run; under async scheduling its steps counted to the run's end (the engine's
    last step drains the batch queue)."""
    return compare.run_metrics(result, compare.total_steps(result, asynchronous))


def reference(case: Path, *, asynchronous: bool = False) -> Path:
    """The folder of vLLM's outputs for ``case``: its own, or its async run's."""
    return case.parent / "async" / case.name if asynchronous else case


def step_columns(case: Path) -> dict[str, str]:
    """`STEP_COLUMNS` compared for ``case``: with speculative drafts not the decoding one (vLLM's counts the
    drafts too)."""
    if json.loads((case / "settings.json").read_text()).get("num_speculative_tokens"):
        return {k: v for k, v in STEP_COLUMNS.items() if k != "decode_seqs"}
    return STEP_COLUMNS


def spec_differences(result, case: Path) -> dict[str, str]:
    """vLLM's spec decoding counter -> '' when kvsim's equals it, else both (a case without ``spec.json``:
    none)."""
    path = case / "spec.json"
    if not path.exists():
        return {}
    ours = result.summary["spec_decoding"]
    return {k: "" if ours[k] == v else f"{ours[k]} vs {v}" for k, v in json.loads(path.read_text()).items()}


def step_differences(result, case: Path, *, asynchronous: bool = False) -> dict[str, str]:
    """Column -> '' when every step equals vLLM's, else the first step that differs (``result``: a
    ``--step-by-step`` run of ``case``, one engine step a unit of time; the columns `step_columns`). A row of no
    steps that lasts whole steps (waiting for host loads to land: vLLM's engine takes empty steps meanwhile) counts
    as that many steps."""
    theirs = pd.read_csv(reference(case, asynchronous=asynchronous) / "steps.csv.gz")
    steps = result.steps
    counts = np.where(steps["num_steps"] > 0, steps["num_steps"], np.rint(steps["duration_s"]).astype(np.int64))
    ours = steps.loc[steps.index.repeat(counts)].reset_index(drop=True)
    columns = step_columns(case)
    if len(ours) != len(theirs):
        return dict.fromkeys(columns, f"{len(ours)} steps vs {len(theirs)}")
    out = {}
    for column, their_column in columns.items():
        a, b = ours[column].to_numpy(np.int64), theirs[their_column].to_numpy(np.int64)
        bad = np.flatnonzero(a != b)
        out[column] = "" if not len(bad) else f"step {bad[0]}: {a[bad[0]]} vs {b[bad[0]]} ({len(bad)} steps differ)"
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*")
    p.add_argument("--data", default=str(DATA))
    a = p.parse_args()
    data = Path(a.data)
    names = a.names or sorted(d.name for d in data.iterdir() if (d / "steps.csv.gz").exists())
    failed = False
    for name in names:
        case = data / name
        for asynchronous in (False, True):
            if not (reference(case, asynchronous=asynchronous) / "steps.csv.gz").exists():
                continue
            theirs = compare.oracle_metrics(reference(case, asynchronous=asynchronous))
            diff = compare.differences(metrics(run(case, asynchronous=asynchronous), asynchronous=asynchronous),
                                       theirs)
            slow = run(case, step_by_step=True, asynchronous=asynchronous)
            diff |= {k: v or diff[k] for k, v in compare.differences(metrics(slow, asynchronous=asynchronous),
                                                                     theirs).items()}
            steps = (step_differences(slow, case, asynchronous=asynchronous)
                     | spec_differences(slow, reference(case, asynchronous=asynchronous)))
            failed |= any(diff.values()) or any(steps.values())
            bad = {k: v for k, v in (diff | steps).items() if v}
            print(f"{name}{' (async)' if asynchronous else ''}: {theirs['total_steps']} steps, "
                  f"{theirs['preemptions']} preemptions: "
                  + ("exact" if not bad else "; ".join(f"{k} {v}" for k, v in bad.items())), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
