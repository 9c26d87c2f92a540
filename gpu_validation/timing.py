"""Timing one call the way a step would see it: warm-up, repeats, the median, caches cold.

On a GPU each repeat is bracketed by CUDA events, and a 256 MiB buffer is overwritten before it (outside the
events) so the call's inputs are not left over in L2 from the previous repeat: inside a real step, the
other layers' weights flush L2 between two calls of one kernel. On CPU it is ``time.perf_counter`` around a
call (torch CPU ops are synchronous) and no flush, since CPU caches are small against anything timed.
The median is reported: one slow repeat (a page fault, a clock change) should not move a calibration.

With ``graphs=True`` (CUDA only) the call is captured once into a CUDA graph after the warm-up and the graph's
replay is timed, as engines run their decode steps (vLLM captures its forward pass): eager PyTorch launches
each small kernel from Python, and at batch 1 the GPU then waits on those launches longer than it computes
(on an H200, 215 us for a Llama-3-8B layer's dense work that reads its weights in about 100 us).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

FLUSH_BYTES = 256 * 1024**2


def device_of(parser, requested: str | None) -> str:
    """The device a ``python -m gpu_validation...`` command runs on: ``--device`` as given, else cuda where torch
    sees one; ``--device cuda`` without one is the parser's one-line error (``parser``: its argparse parser), not a
    traceback from deep in torch."""
    device = requested or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    return device


class Timer:
    """Median seconds of ``fn()`` on ``device`` after ``warmup`` untimed calls."""

    def __init__(self, device: str | torch.device, *, warmup: int = 3, repeats: int = 10,
                 graphs: bool = False) -> None:
        if warmup < 0 or repeats < 1:
            raise ValueError(f"need warmup >= 0 and repeats >= 1, got {warmup} and {repeats}")
        self.device = torch.device(device)
        self.warmup, self.repeats = warmup, repeats
        self.graphs = graphs and self.device.type == "cuda"
        self._flush = None
        if self.device.type == "cuda":
            self._flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=self.device)

    def __call__(self, fn: Callable[[], object]) -> float:
        for _ in range(self.warmup):
            fn()
        if self._flush is None:
            times = []
            for _ in range(self.repeats):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return statistics.median(times)
        call = captured(fn) if self.graphs else fn
        times = []
        for _ in range(self.repeats):
            self._flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)


class GraphCaptureError(RuntimeError):
    """A call could not be captured into a CUDA graph (it reads a GPU value on the host, say): time it eagerly."""


def captured(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` captured into a CUDA graph: returns the graph's replay. ``fn`` must already have run once (its
    kernels compiled, its Python-side values cached), and must not read GPU values on the host; if the capture
    fails, GraphCaptureError says so in one line."""
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # PyTorch's recipe: one run on a side stream before capturing
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
    except RuntimeError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise GraphCaptureError(f"CUDA graph capture failed ({first}); time eagerly with --no-cuda-graphs") from exc
    return graph.replay


@contextmanager
def single_threaded_on_cpu(device: str | torch.device) -> Iterator[None]:
    """Run torch single-threaded inside the block when ``device`` is the CPU (elsewhere: nothing).

    Why: on a shared machine a thread pool waiting at a barrier for a descheduled thread turns microseconds
    into scheduler time slices, which is noise, not cost; one thread times the work itself.
    """
    if torch.device(device).type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def copy_bandwidth(device: str | torch.device, nbytes: int, timer: Timer) -> float:
    """Bytes per second of a device-to-device copy of ``nbytes`` (read plus write counted)."""
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    seconds = timer(lambda: dst.copy_(src))
    return 2 * nbytes / seconds


def matmul_flops(device: str | torch.device, dtype: torch.dtype, n: int, timer: Timer) -> float:
    """FLOP/s of an ``n x n x n`` matrix product, the best the device does on dense work."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    seconds = timer(lambda: a @ b)
    return 2 * n**3 / seconds
