"""kvsim against real vLLM 0.11 runs on an H100 (`docs/validation.md`): the default clock and the KV pool size.

The runs are shipped as fixtures (Apache-2.0, `tests/sim/fixtures/real_vllm/README.md`); the full files are
cross-checked only where ``$KVSIM_REAL_VLLM`` names their folder.
"""

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.kernel.config import SimConfig
from sim.measured import read_measured
from sim.replay import overall, replay, score

FIXTURES = Path(__file__).parent / "fixtures" / "real_vllm"
SHARED = Path(os.environ["KVSIM_REAL_VLLM"]) if os.environ.get("KVSIM_REAL_VLLM") else None
SETTINGS = {
    "jan21-llama7b-train-1": dict(model="llama-2-7b", max_num_seqs=256, max_num_batched_tokens=4096,
                                  max_model_len=4096, blocks=7438),
    "jan20-codellama-prefill-1": dict(model="codellama-34b", max_num_seqs=32, max_num_batched_tokens=64,
                                      max_model_len=8192, blocks=2790),
}
BOUNDS = {"e2e": 0.10, "ttft": 0.15, "tpot": 0.15}


def _config(name: str, **extra) -> SimConfig:
    settings = {k: v for k, v in SETTINGS[name].items() if k != "blocks"}
    return SimConfig(gpu="h100-80gb", block_size=16, prefix_caching=True, watermark=0.0, **settings, **extra)


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_default_profile_predicts_real_vllm_latencies(name):
    """At the default profile (vllm-v1), given vLLM's KV pool, per-request MAPE (warm-up request left out):
    E2E <= 10%, TTFT and TPOT <= 15%, on every request replayed open loop at its recorded arrival."""
    run = read_measured(FIXTURES / f"{name}.csv")
    config = _config(name, kv_tokens=SETTINGS[name]["blocks"] * 16)
    assert config.cost_profile is None  # the default
    mape = overall(score(run.frame, replay(run, config), run.scored))
    assert all(mape[m] <= bound for m, bound in BOUNDS.items()), mape


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_kv_pool_is_sized_as_vllm_0_11_logged_it(name, tmp_path):
    """`kvsim run` without --kv-tokens on each run's settings gives vLLM's logged pool within 2%."""
    trace = tmp_path / "trace.csv"
    pd.read_csv(FIXTURES / f"{name}.csv")[["arrival_time_s", "prompt_tokens", "output_tokens"]].head(5).to_csv(
        trace, index=False)
    s = SETTINGS[name]
    result = CliRunner().invoke(main, [
        "run", str(trace), "--model", s["model"], "--gpu", "h100-80gb", "--max-num-seqs", str(s["max_num_seqs"]),
        "--max-num-batched-tokens", str(s["max_num_batched_tokens"]), "--max-model-len", str(s["max_model_len"]),
        "--json"])
    assert result.exit_code == 0, result.output
    blocks = json.loads(result.stdout)["kv_capacity_tokens"] / 16
    assert blocks == pytest.approx(s["blocks"], rel=0.02)


@pytest.mark.skipif(SHARED is None or not SHARED.is_dir(),
                    reason="set KVSIM_REAL_VLLM to the folder of the full real-vllm runs to cross-check them")
@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_fixtures_match_the_published_runs(name):
    """The shipped fixtures are the measured runs, columns selected and nothing else changed."""
    fixture = pd.read_csv(FIXTURES / f"{name}.csv")
    measured = pd.read_csv(SHARED / name / "measured.csv")
    for column in ("arrival_time_s", "prompt_tokens", "output_tokens", "ttft_s", "e2e_s", "warmup", "phase"):
        if fixture[column].dtype.kind == "f":
            assert fixture[column].to_numpy() == pytest.approx(measured[column].to_numpy(), rel=1e-8), column
        else:
            assert fixture[column].tolist() == measured[column].tolist(), column
    assert json.loads((SHARED / name / "cases.json").read_text())["kv_cache"]["num_gpu_blocks"] == SETTINGS[name]["blocks"]
