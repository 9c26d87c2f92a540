"""The timing harness: decode and prefill steps over a grid, one tidy row per step.

A step's time is composed from parts timed separately, each at the step's real sizes:
``num_layers x (paged attention + one layer's dense work) + LM head``. Attention runs on a `PagedKVCache`
holding exactly the step's sequences, their blocks scattered by a shuffled free list; the dense layer and
LM head use random weights of the catalog's shapes (`dense_layer`). Timing one layer and multiplying is
what makes an 8-billion-parameter model fit on any machine, and it leaves out only what differs between
layers (nothing, in these models).

Decode attention uses the Triton kernel where it can run (a GPU with triton), else the reference
(gather + SDPA); prefill chunks use the reference, which handles the causal offset. The kernel used is in
each row. Each row also carries the cost model's features (`features.step_features`) so that a fit, a plot
or a later check needs nothing but the table.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from allocators.catalog import ModelSpec
from gpu_validation.block_tables import PagedBatch, pad_block_tables, random_block_tables
from gpu_validation.dense_layer import DenseLayer, LMHead
from gpu_validation.features import StepShape, decode_step, prefill_step, step_features
from gpu_validation.kv_cache import PagedKVCache
from gpu_validation.reference import paged_attention_reference
from gpu_validation.timing import Timer, single_threaded_on_cpu
from gpu_validation.triton_paged import triton_available, triton_paged_decode


@dataclass(frozen=True)
class Grid:
    """The points to time. ``model_scale`` > 1 times a scaled-down model (`features.scaled_model`)."""

    batch_sizes: tuple[int, ...]
    context_lens: tuple[int, ...]
    block_sizes: tuple[int, ...]
    prefill_chunks: tuple[int, ...]
    prefill_offsets: tuple[int, ...]
    warmup: int = 3
    repeats: int = 10
    model_scale: int = 1

    def __post_init__(self) -> None:
        for name in ("batch_sizes", "context_lens", "block_sizes", "prefill_chunks"):
            values = getattr(self, name)
            if not values or min(values) <= 0:
                raise ValueError(f"grid: {name} must be a non-empty list of positive integers, got {values}")
        if min(self.prefill_offsets, default=0) < 0:
            raise ValueError("grid: prefill_offsets must be >= 0")


GRIDS: dict[tuple[str, bool], Grid] = {
    ("cuda", False): Grid((1, 4, 16, 64, 128, 256), (512, 1024, 2048, 4096, 8192), (8, 16, 32),
                          (256, 512, 1024, 2048), (0, 2048)),
    ("cuda", True): Grid((1, 16, 64), (1024, 4096), (8, 16, 32), (512, 2048), (0, 2048), warmup=2, repeats=5),
    ("cpu", False): Grid((1, 8, 32), (512, 2048), (8, 16, 32), (128, 512), (0, 1024), warmup=1, repeats=3),
    ("cpu", True): Grid((1, 4), (128, 1024), (8, 16, 32), (32, 128), (0, 512), warmup=1, repeats=3, model_scale=8),
}
"""Default grids by (device type, quick). Quick on CPU times Llama-size models scaled down 8x."""


def default_decode_kernel(device: torch.device) -> str:
    """The Triton kernel on a GPU; the reference elsewhere (timing triton's interpreter says nothing)."""
    return "triton" if device.type == "cuda" and triton_available(device) else "reference"


def timing_batch(model: ModelSpec, lengths: list[int], q_len: int, block_size: int, *, device: torch.device,
                 dtype: torch.dtype, rng: np.random.Generator, generator: torch.Generator, num_layers: int = 1
                 ) -> tuple[PagedKVCache, PagedBatch]:
    """A cache holding exactly sequences of ``lengths`` (``num_layers`` layers, zeros: contents do not change
    the time), their blocks scattered by a shuffled free list, and random queries for their last ``q_len``
    positions."""
    num_blocks = sum(-(-n // block_size) for n in lengths) + 1  # + the null block
    cache = PagedKVCache(num_blocks, block_size, model.num_kv_heads, model.head_dim, num_layers=num_layers,
                         dtype=dtype, device=device)
    tables = random_block_tables(rng, lengths, block_size, num_blocks)
    query = torch.randn(len(lengths), q_len, model.num_heads, model.head_dim, generator=generator)
    batch = PagedBatch(query.to(device, dtype), pad_block_tables(tables, device),
                       torch.tensor(lengths, dtype=torch.int32, device=device))
    return cache, batch


class StepTimer:
    """Times the parts of steps for one model on one device, reusing dense timings across points."""

    def __init__(self, model: ModelSpec, device: torch.device, dtype: torch.dtype, timer: Timer,
                 rng: np.random.Generator, decode_kernel: str) -> None:
        self.model, self.device, self.dtype, self.timer, self.rng = model, device, dtype, timer, rng
        self.decode_kernel = decode_kernel
        self.generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
        self.layer = DenseLayer(model, dtype=dtype, device=device, generator=self.generator)
        self.head = LMHead(model, dtype=dtype, device=device, generator=self.generator)
        self._dense: dict[int, float] = {}
        self._head: dict[int, float] = {}

    def _activations(self, tokens: int) -> torch.Tensor:
        return torch.randn(tokens, self.model.hidden_size, generator=self.generator).to(self.device, self.dtype)

    def dense(self, tokens: int) -> float:
        if tokens not in self._dense:
            x = self._activations(tokens)
            self._dense[tokens] = self.timer(lambda: self.layer(x))
        return self._dense[tokens]

    def lm_head(self, tokens: int) -> float:
        if tokens not in self._head:
            x = self._activations(tokens)
            self._head[tokens] = self.timer(lambda: self.head(x))
        return self._head[tokens]

    def attention(self, lengths: list[int], q_len: int, block_size: int) -> tuple[float, str]:
        """Median seconds of one layer's attention for sequences of ``lengths`` (queries: the last
        ``q_len`` positions of each), and the kernel that ran."""
        cache, batch = timing_batch(self.model, lengths, q_len, block_size, device=self.device, dtype=self.dtype,
                                    rng=self.rng, generator=self.generator)
        name, kernel = self.attention_kernel(q_len)
        return self.timer(lambda: kernel(cache, batch)), name

    def attention_kernel(self, q_len: int) -> tuple[str, Callable[..., torch.Tensor]]:
        """The kernel that attends ``q_len`` queries a sequence, and its name: the decode kernel for decode,
        the reference (which handles the causal offset) for prefill chunks."""
        if q_len == 1 and self.decode_kernel == "triton":
            return "triton", triton_paged_decode
        return "reference", paged_attention_reference

    def step_row(self, kind: str, step: StepShape, lengths: list[int], q_len: int, sampled: int) -> dict:
        attention_s, kernel = self.attention(lengths, q_len, step.block_size)
        dense_s = self.dense(step.tokens)
        head_s = self.lm_head(sampled)
        return {
            "kind": kind, "block_size": step.block_size, "prefill_tokens": step.prefill_tokens,
            "decode_seqs": step.decode_seqs, "context_tokens": step.context_tokens,
            "attention_pairs": step.attention_pairs, "attention_kernel": kernel, "attention_s": attention_s,
            "dense_layer_s": dense_s, "lm_head_s": head_s, "num_layers": self.model.num_layers,
            "step_s": self.model.num_layers * (attention_s + dense_s) + head_s,
            **step_features(self.model, step, torch.finfo(self.dtype).bits // 8),
        }


def run_harness(model: ModelSpec, grid: Grid, *, device: str | torch.device, dtype: torch.dtype,
                seed: int = 0, decode_kernel: str | None = None, cuda_graphs: bool = False,
                progress: Callable[[str], None] | None = None, deadline: float | None = None) -> pd.DataFrame:
    """Time every point of ``grid`` for ``model`` (already scaled if wanted); one row per step.

    On CPU, torch runs single-threaded while timing (`timing.single_threaded_on_cpu`). ``cuda_graphs`` times
    each part as a CUDA graph's replay (`timing.Timer`; on a GPU only), as the ``timing`` column says.
    ``deadline`` (a `time.monotonic` value) is a time budget: crossing it before the last point raises
    TimeoutError, since a fit to part of the grid would not be the calibration asked for.
    """
    device = torch.device(device)
    timer = Timer(device, warmup=grid.warmup, repeats=grid.repeats, graphs=cuda_graphs)
    steps = StepTimer(model, device, dtype, timer, np.random.default_rng(seed),
                      decode_kernel or default_decode_kernel(device))
    total = len(grid.block_sizes) * (len(grid.batch_sizes) * len(grid.context_lens)
                                     + len(grid.prefill_chunks) * len(grid.prefill_offsets))
    rows = []

    def add(row: dict, line: str) -> None:
        rows.append(row)
        if progress:
            progress(f"{line}: {row['step_s'] * 1e3:.2f} ms")
        if deadline is not None and len(rows) < total and time.monotonic() > deadline:
            raise TimeoutError(f"time budget spent after {len(rows)} of {total} calibration steps")

    with single_threaded_on_cpu(device):
        for bs in grid.block_sizes:
            for batch in grid.batch_sizes:
                for ctx in grid.context_lens:
                    row = steps.step_row("decode", decode_step(batch, ctx, bs), [ctx] * batch, 1, batch)
                    add({"batch_size": batch, "context_len": ctx, "chunk": 0, "offset": 0, **row},
                        f"decode bs={bs} batch={batch} ctx={ctx}")
            for chunk in grid.prefill_chunks:
                for offset in grid.prefill_offsets:
                    row = steps.step_row("prefill", prefill_step(chunk, offset, bs), [offset + chunk], chunk, 1)
                    add({"batch_size": 1, "context_len": offset + chunk, "chunk": chunk, "offset": offset, **row},
                        f"prefill bs={bs} chunk={chunk} offset={offset}")
    frame = pd.DataFrame(rows)
    frame.insert(0, "model", model.name)
    frame["device"] = device.type
    frame["dtype"] = str(dtype).removeprefix("torch.")
    frame["timing"] = timing_mode(timer)
    return frame


def timing_mode(timer: Timer) -> str:
    """How the harness's times were taken: ``cuda-graph`` (replays) or ``eager`` (one launch per kernel)."""
    return "cuda-graph" if timer.graphs else "eager"
