"""``--catalog FILE`` (and ``$KVSIM_CATALOG``) on every command that takes ``--model``/``--gpu``; a sweep
carries the file into each point and its content into the point id; a bad catalog is a one-line error naming
the file and the field."""

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.kernel.config import SimConfig
from sim.sweep.hashing import point_id

MODEL = ("num_layers = 2\nhidden_size = 64\nnum_heads = 4\nnum_kv_heads = 2\nhead_dim = 16\nnum_params = 1e6\n"
         "max_seq_len = 256\nintermediate_size = 128\nvocab_size = 1000\n")
GPU = "memory_gib = 1\nhbm_bandwidth_gb_s = 100\nbf16_tflops = 10\npcie_gb_s = 8\n"
GOOD = f"[models.tiny-lm]\n{MODEL}[gpus.toy-gpu]\n{GPU}"
CUSTOM = ["--model", "tiny-lm", "--gpu", "toy-gpu"]


pytestmark = pytest.mark.usefixtures("restore_catalog")  # commands register catalog files process-wide


@pytest.fixture
def files(tmp_path):
    cat = tmp_path / "mine.toml"
    cat.write_text(GOOD)
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens\n" + "".join(f"{i},50,8\n" for i in range(6)))
    return str(cat), str(trace)


def invoke(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env)


def test_run_compare_and_capacity_take_a_catalog(files):
    cat, trace = files
    run = invoke("run", trace, *CUSTOM, "--catalog", cat, "--step-time", "0.01", "--json")
    assert run.exit_code == 0, run.output
    summary = json.loads(run.stdout)
    assert (summary["model"], summary["gpu"], summary["completed"]) == ("tiny-lm", "toy-gpu", 6)
    compare = invoke("compare", trace, *CUSTOM, "--catalog", cat, "--allocator", "paged,contiguous-max",
                     "--step-time", "0.01", "--json")
    assert compare.exit_code == 0, compare.output
    assert [s["model"] for s in json.loads(compare.stdout)] == ["tiny-lm", "tiny-lm"]
    cap = invoke("capacity", *CUSTOM, "--catalog", cat, "--json")
    assert cap.exit_code == 0 and json.loads(cap.stdout)["kv_source"] == "derived"


def test_the_environment_names_the_catalog(files):
    cat, trace = files
    run = invoke("run", trace, *CUSTOM, "--step-time", "0.01", "--json", env={"KVSIM_CATALOG": cat})
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["model"] == "tiny-lm"


def test_a_sweep_carries_the_catalog_into_worker_processes(files, tmp_path):
    """Two worker processes, neither of which saw the command line's catalog: each point reads the file from
    its configuration."""
    cat, trace = files
    out = tmp_path / "s.parquet"
    result = invoke("sweep", "--trace", trace, *CUSTOM, "--catalog", cat, "--allocator", "paged,contiguous-max",
                    "--step-time", "0.01", "--workers", "2", "--quiet", "--out", str(out))
    assert result.exit_code == 0, result.output
    table = pd.read_parquet(out)
    assert list(table["status"]) == ["ok", "ok"] and set(table["model"]) == {"tiny-lm"}
    assert set(table["catalog"]) == {cat}


def test_the_point_id_follows_the_catalogs_content(files):
    """An edited catalog (same name) must not let a rerun reuse results computed with the old numbers."""
    cat, trace = files
    config = SimConfig(model="tiny-lm", gpu="toy-gpu", catalog=cat, trace=trace)
    before = point_id(config, "v")
    with open(cat, "a") as fh:
        fh.write("[gpus.other]\n" + GPU)
    assert point_id(config, "v") != before


@pytest.mark.parametrize(("text", "message"), [
    (f"[model.tiny-lm]\n{MODEL}", "unknown table(s) [model]; a catalog has [models.NAME] and [gpus.NAME] tables"),
    (f"[models.tiny-lm]\n{MODEL.replace('hidden_size = 64', '')}", "[models.tiny-lm]: missing field(s) hidden_size"),
    (f"[gpus.toy-gpu]\n{GPU.replace('memory_gib = 1', '')}", "[gpus.toy-gpu]: missing field(s) memory_gib (or memory_bytes)"),
    (None, "not a TOML catalog file (binary, or not UTF-8 text)"),
])
@pytest.mark.parametrize("command", [["run"], ["compare"], ["capacity"], ["calibrate"],
                                     ["sweep", "--workers", "1", "--out", "never.parquet"], ["slo", "--e2e-p50", "1"]])
def test_a_bad_catalog_is_one_line_naming_the_file_and_the_field(tmp_path, text, message, command):
    path = tmp_path / "bad.toml"
    if text is None:
        path.write_bytes(bytes(range(256)) * 4)
    else:
        path.write_text(text)
    result = invoke(*command, "--catalog", str(path))
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"Error: {path}: {message}"]


def test_a_config_checks_its_model_and_gpu_names_when_built(files):
    """An unknown name fails when the configuration is built (once, before any run or sweep point), and the
    entries of the configuration's own catalog count without registering the file."""
    from allocators.catalog import GPUS, MODELS, UnknownNameError

    cat, trace = files
    with pytest.raises(UnknownNameError, match="^unknown gpu 'H100'; valid choices: a100-40gb"):
        SimConfig(gpu="H100")
    with pytest.raises(UnknownNameError, match="^unknown model 'tiny-lm'"):
        SimConfig(model="tiny-lm")
    config = SimConfig(model="Tiny-LM", gpu="toy-gpu", catalog=cat, trace=trace)
    assert "tiny-lm" not in MODELS and "toy-gpu" not in GPUS and config.model == "Tiny-LM"
