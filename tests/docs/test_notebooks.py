"""Notebooks 01-04 and 06-08 run top to bottom (they import kvsim and hold no logic of their own), and their
committed copies carry their outputs, so a reader on the web sees the figures (05 needs a GPU:
tests/gpu_validation)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = ["01_fragmentation", "02_sharing", "03_block_size_and_rate", "04_your_trace", "06_prefix_reuse",
         "07_token_cost", "08_deployment_memory"]


def images_and_errors(nb) -> tuple[int, list[str]]:
    images, errors = 0, []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                errors.append(f"{output.get('ename')}: {output.get('evalue')}")
            images += "image/png" in output.get("data", {})
    return images, errors


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_has_its_figures(name):
    images, errors = images_and_errors(nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4))
    assert not errors
    assert images >= 2


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(name):
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    NotebookClient(nb, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    images, errors = images_and_errors(nb)
    assert not errors
    assert images >= 2
