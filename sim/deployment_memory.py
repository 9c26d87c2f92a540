"""Which deployment of a model holds the most KV, and what it buys: `kvsim capacity` for several sets of flags,
one row each, and the same workload run on several deployments (the tables behind
``notebooks/08_deployment_memory.ipynb``).

Each capacity row is given as the flags a serving engineer types after ``kvsim capacity`` (``-tp 8``, ``-dp 8
-ep``, ``--kv-cache-dtype nvfp4``, ...), parsed by the command itself, so its defaults, flag spellings and
refusals are the command's and nothing here repeats them. The numbers are `capacity_report`'s, checked against
vLLM's own pool sizing in the tests of each feature.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

import pandas as pd


def capacity_table(deployments: Mapping[str, str]) -> pd.DataFrame:
    """One row per deployment (label -> the flags of ``kvsim capacity``), indexed by label: the flags and every
    field of the command's ``--json`` report, a dict's entries as ``field.key`` columns (``breakdown.free``,
    ``mamba_pool.num_blocks``; lists left out), plus ``max_concurrent_requests_total``: the report counts the
    requests of one data-parallel rank's pool and each rank has its own, so all ranks hold that many times the
    rank's count. A bad flag is click's error naming it; a setting the command refuses, its ValueError or
    KeyError."""
    from sim.commands.capacity import capacity, capacity_report

    if not deployments:
        raise ValueError("capacity_table: no deployments given (a dict of label -> kvsim capacity flags)")
    rows = []
    for label, flags in deployments.items():
        params = capacity.make_context("capacity", shlex.split(flags)).params
        params.pop("catalog")  # read (registered) while the flags were parsed
        params.pop("as_json")
        report = capacity_report(**params)
        row = {"deployment": label, "flags": flags}
        for field, value in report.items():
            if isinstance(value, dict):
                row |= {f"{field}.{key}": v for key, v in value.items()}
            elif not isinstance(value, list):
                row[field] = value
        row["max_concurrent_requests_total"] = report["max_concurrent_requests"] * report["data_parallel_size"]
        rows.append(row)
    return pd.DataFrame(rows).set_index("deployment")


def run_deployments(workload, deployments: Mapping[str, Mapping[str, object]], **common: object) -> dict:
    """One `SimResult` per deployment on the same workload: label -> its `SimConfig` fields (``tensor_parallel``,
    ``data_parallel_size``, ...), each with the ``common`` fields (``model``, ``gpu``, ...) beside them; a field
    given in both is refused rather than one silently winning. `sim.reproduce.explore.summaries_table` tabulates
    the results; `sim.plots` draws them."""
    from sim.kernel.config import SimConfig
    from sim.kernel.runner import run_simulation

    if not deployments:
        raise ValueError("run_deployments: no deployments given (a dict of label -> SimConfig fields)")
    results = {}
    for label, fields in deployments.items():
        if both := sorted(set(fields) & set(common)):
            raise ValueError(f"run_deployments: deployment {label!r} sets {', '.join(both)}, which the common "
                             "fields set too")
        results[label] = run_simulation(SimConfig(**common, **fields), workload)
    return results
