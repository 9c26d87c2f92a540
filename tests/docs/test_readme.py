"""The README's commands run as written, so the page a user starts from cannot rot.

Every `kvsim ...` command in the README's "What you can ask it" table runs in order in one scratch directory
(later ones read what earlier ones wrote), except the full paper reproduction (about 90 s; its `--quick` form
is tested in test_reproduce.py) and the GPU calibration, which needs CUDA. ``FILE`` stands for a shipped
trace sample.
"""

import re
import shlex
from pathlib import Path

from click.testing import CliRunner

from sim.cli import main
from workloads.presets import SAMPLES_DIR

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = SAMPLES_DIR / "AzureLLMInferenceTrace_conv.csv"
NOT_HERE = ("kvsim reproduce paper", "--device cuda")


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    table = text[text.index("## What you can ask it"):text.index("## How memory is accounted")]
    return re.findall(r"`(kvsim [^`]+)`", table)


def test_the_readme_lists_its_commands():
    commands = readme_commands()
    assert len(commands) >= 10
    assert commands[0].startswith("kvsim capacity")


def test_every_readme_command_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    ran = 0
    for command in readme_commands():
        if any(marker in command for marker in NOT_HERE):
            continue
        args = [str(SAMPLE) if arg == "FILE" else arg for arg in shlex.split(command)[1:]]
        result = runner.invoke(main, args)
        assert result.exit_code == 0, f"{command}\n{result.output}"
        ran += 1
    assert ran >= 8
    assert (tmp_path / "runs" / "paged" / "memory.png").exists()
    assert (tmp_path / "sweep.parquet").exists()


def test_the_readme_python_example_runs(tmp_path, monkeypatch):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], "README.md", "exec"), {})
    assert (tmp_path / "breakdown.png").exists()
