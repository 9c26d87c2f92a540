"""What an allocator's KV memory leaves out of the model is said, never implied: on a sliding-window model
``paged`` (vLLM's hybrid KV cache manager) frees the blocks that leave a window and the contiguous slabs keep
window layers in ring buffers, so any other allocator's summary carries ``memory_omits`` and
``kvsim run``/``compare`` print a note for it."""

import json

import pytest
from click.testing import CliRunner

from allocators import ALLOCATORS
from sim.cli import main

GEMMA = ["--model", "gemma-3-12b", "--gpu", "h100-80gb", "--num-requests", "5"]


@pytest.mark.parametrize(("extra", "omitted"), [
    (["--allocator", "paged-cow"], True),
    (["--allocator", "radix"], True),
    (["--allocator", "vattention"], True),
    (["--allocator", "contiguous-oracle"], False),  # ring buffers of the window's size
    (["--allocator", "contiguous-max"], False),
    (["--allocator", "paged"], False),  # the hybrid manager
    (["--allocator", "paged", "--disable-hybrid-kv-cache-manager"], False),  # full layers asked for, vLLM's flag
    (["--allocator", "paged-cow", "--model", "llama-3-8b"], False),  # no window to free
])
def test_memory_omits_names_unfreed_windows(extra, omitted):
    result = CliRunner().invoke(main, ["run", *GEMMA, *extra, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    omits = summary.get("memory_omits", [])
    assert bool(omits) == omitted
    if omitted:
        assert omits[0].startswith("sliding windows: ") and "window 1,024 tokens" in omits[0]
        assert f"Note: {summary['allocator']}'s KV memory omits {omits[0]}" in result.stderr


def test_compare_notes_every_allocator_but_the_hybrid_pool_and_the_ring_slabs():
    result = CliRunner().invoke(main, ["compare", *GEMMA])
    assert result.exit_code == 0, result.output
    noted = {line.split("'")[0].removeprefix("Note: ") for line in result.stderr.splitlines()
             if "KV memory omits sliding windows" in line}
    assert noted == {name for name in ALLOCATORS if name != "paged" and not name.startswith("contiguous")}
