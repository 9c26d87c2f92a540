"""The hybrid recurrent-state oracle's comparison (``tools/vllm_oracle/mamba_compare.py``, a script, not a package)
and the checks every test holding such a model to vLLM's own scheduler makes (Nemotron-H, Qwen3-Next, Jamba;
synchronous, async and with drafts): every engine step of a step-by-step run equal to vLLM's, and the fast-forward's
run-wide and per-request metrics equal to vLLM's."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

from tests.sim.vllm_oracle import ROOT


def _mamba_compare():
    spec = importlib.util.spec_from_file_location("vllm_oracle_mamba_compare",
                                                  ROOT / "tools" / "vllm_oracle" / "mamba_compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mamba = _mamba_compare()


def run(case: Path, *, step_by_step: bool = False, asynchronous: bool = False, **kvsim):
    """kvsim's run of a reference ``case`` (`mamba_compare.kvsim_config`), with ``kvsim``'s settings (``model``,
    ``gpu``, ``tensor_parallel``) in place of its Nemotron-H-8B's."""
    from sim.kernel.runner import run_config

    settings = json.loads((case / "settings.json").read_text())
    config = mamba.kvsim_config(settings, case / "trace.csv", step_by_step=step_by_step, asynchronous=asynchronous)
    return run_config(dataclasses.replace(config, **kvsim))


def vllms_metrics(case: Path, *, asynchronous: bool = False) -> dict:
    """`compare.METRICS` of vLLM's reference run of ``case`` (its async run's)."""
    return mamba.compare.oracle_metrics(mamba.reference(case, asynchronous=asynchronous))


def differences(slow, case: Path, *, asynchronous: bool = False) -> tuple[dict, dict]:
    """A step-by-step run's differences from vLLM's run of ``case``: step column -> the first step that differs,
    metric -> both values; '' where equal."""
    return (mamba.step_differences(slow, case, asynchronous=asynchronous),
            mamba.compare.differences(mamba.metrics(slow, asynchronous=asynchronous),
                                      vllms_metrics(case, asynchronous=asynchronous)))


def assert_every_step_is_vllms(slow, case: Path, *, asynchronous: bool = False) -> None:
    steps, metrics = differences(slow, case, asynchronous=asynchronous)
    assert steps == dict.fromkeys(mamba.step_columns(case), "")
    assert metrics == dict.fromkeys(mamba.compare.METRICS, "")


def assert_decisions_are_vllms(fast, case: Path, *, asynchronous: bool = False) -> None:
    """A fast-forward run's metrics are vLLM's (its steps are not compared: a run of identical decode steps is
    one row)."""
    assert (mamba.compare.differences(mamba.metrics(fast, asynchronous=asynchronous),
                                      vllms_metrics(case, asynchronous=asynchronous))
            == dict.fromkeys(mamba.compare.METRICS, ""))


def assert_spec_counters_are_vllms(slow, case: Path, *, asynchronous: bool = False) -> None:
    """vLLM's spec decoding counters (``spec.json``; its async run's) summed over the run are kvsim's."""
    assert (mamba.spec_differences(slow, mamba.reference(case, asynchronous=asynchronous))
            == {"num_drafts": "", "num_draft_tokens": "", "num_accepted_tokens": ""})
