"""Set-up shared by the whole test session, done before any test imports torch."""

import atexit
import os
import shutil
import tempfile

import pytest
from hypothesis import settings

from tests.soak import SOAK

# Without a GPU, the Triton kernel's tests run in triton's CPU interpreter. Triton reads the switch when torch
# first imports it, which can happen in any test, so it is set here, once; on a CUDA machine it stays unset.
if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

# A user's own calibration tables (`kvsim calibrate` writes them under $KVSIM_HOME) must not change what the
# tests simulate: every test session gets an empty KVSIM_HOME of its own, removed when the session ends.
os.environ["KVSIM_HOME"] = tempfile.mkdtemp(prefix="kvsim-home-")
atexit.register(shutil.rmtree, os.environ["KVSIM_HOME"], ignore_errors=True)

# The full public traces come only from the folder $KVSIM_TRACES names; the tests that need them skip without it.

# Hypothesis tests that set no example count of their own run 100 examples, scaled like the rest by KVSIM_SOAK.
if SOAK > 1:
    settings.register_profile("soak", max_examples=100 * SOAK)
    settings.load_profile("soak")


@pytest.fixture
def restore_catalog():
    """Put the built-in catalog back after a test that registers catalog files (commands taking ``--catalog``
    do, into the process-wide catalog)."""
    from allocators import catalog

    models, gpus = dict(catalog.MODELS), dict(catalog.GPUS)
    yield
    catalog.MODELS.clear()
    catalog.MODELS.update(models)
    catalog.GPUS.clear()
    catalog.GPUS.update(gpus)
