"""The figures `docs/vllm-v1.md` gives for how far kvsim's in-step host loads are from vLLM's asynchronous ones
are what kvsim computes today: parsed out of the doc's own text and compared with a fresh run of the README's
write-through example (nothing is copied into this file)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pandas as pd
from click.testing import CliRunner

from allocators.catalog import get_gpu, get_model
from sim.cli import main
from sim.kernel.cost_profiles import make_step_cost

ROOT = Path(__file__).resolve().parents[2]
DOC = " ".join((ROOT / "docs" / "vllm-v1.md").read_text().split())
README = (ROOT / "README.md").read_text()


def test_the_in_step_load_figures_are_what_the_example_charges(tmp_path):
    """The steps of the README's 16 GiB write-through run that load host hits, the blocks each loads and the
    milliseconds the cost model adds to it for them."""
    row = next(line for line in README.splitlines() if line.startswith("| Does host memory for evicted KV"))
    args = shlex.split(re.search(r"`(kvsim run [^`]+)`", row).group(1))[1:-1]  # without its --json
    figures = re.search(r"two steps carry loads, of (\d+) and (\d+) blocks, which add (\d+) and (\d+) ms", DOC)
    blocks, ms = figures.groups()[:2], figures.groups()[2:]
    result = CliRunner().invoke(main, [*args, "--offload-write-policy", "write_through", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    steps = pd.read_parquet(tmp_path / "steps.parquet")
    loads = steps.loc[steps["reload_blocks"] > 0, "reload_blocks"].astype(int).tolist()
    assert loads == [int(b) for b in blocks]
    model = args[args.index("--model") + 1]
    cost = make_step_cost(None, get_model(model), get_gpu(args[args.index("--gpu") + 1]))
    block_size = json.loads((tmp_path / "summary.json").read_text())["block_size"]  # the run's (config: as given)
    added = [round(1000 * cost.transfer_time(swap_slots=b * block_size, swap_transfers=b)) for b in loads]
    assert added == [int(m) for m in ms]
