"""Notebook 05 runs top to bottom against the H200 calibration kept in benchmarks/gpu, and is committed with its
outputs."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "05_calibration.ipynb"


def test_calibration_notebook_is_committed_with_its_figure():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert not any(o.get("output_type") == "error" for o in outputs)


def test_calibration_notebook_executes():
    nbclient = pytest.importorskip("nbclient", reason="nbclient is in the test extra")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    figures = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(figures) == 1
