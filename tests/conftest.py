"""Set-up shared by the whole test session, done before any test imports torch."""

import os
import tempfile

# Without a GPU, the Triton kernel's tests run in triton's CPU interpreter. Triton reads the switch when torch
# first imports it, which can happen in any test, so it is set here, once; on a CUDA machine it stays unset.
if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

# A user's own calibration tables (`kvsim calibrate` writes them under $KVSIM_HOME) must not change what the
# tests simulate: every test session gets an empty KVSIM_HOME of its own.
os.environ["KVSIM_HOME"] = tempfile.mkdtemp(prefix="kvsim-home-")
