"""Whole steps: every layer's attention and dense work, and the LM head, timed as one call, to check the
harness's composition against the step it stands for.

The harness (`harness.StepTimer`) times one layer's attention and one layer's dense work apart, each with L2
flushed first, and charges a step ``num_layers`` times their sum plus the LM head. A real step runs the layers
back to back with their own weights and KV: no flush between kernels, each kernel's launch and tail overlapping
the next's only as the GPU allows. This runs that step: ``num_layers`` distinct dense layers (random weights of
the catalog's shapes) over a ``num_layers``-layer paged cache, one Timer call for the whole forward pass (on a GPU
a single CUDA graph's replay when the timer captures graphs), and reports it beside the composed time of the same
step from the same timer. On a GPU, a model whose weights do not fit in the memory free is refused with a
reason, and a point whose KV then does not fit is skipped with its reason in ``note`` (its times NaN): the default
points need 16 GB of Llama-3-8B weights beside up to 34 GB of KV, more than a 40 GB card has.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from gpu_validation import catalog_model, comma_list, positive_int, refuse_without_torch

try:
    import torch
except ImportError as exc:  # torch is the optional "gpu" extra
    if __name__ == "__main__":
        refuse_without_torch("python -m gpu_validation.whole_step", exc)
    raise

from allocators import roofline
from allocators.catalog import ModelSpec
from gpu_validation.dense_layer import DenseLayer, LMHead
from gpu_validation.features import StepShape, decode_step, prefill_step
from gpu_validation.harness import StepTimer, default_decode_kernel, timing_batch, timing_mode
from gpu_validation.timing import Timer, device_of, single_threaded_on_cpu

BLOCK_SIZE = 16
POINTS: dict[str, tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]] = {
    "cuda": (((1, 1024), (16, 1024), (64, 1024), (1, 4096), (16, 4096), (64, 4096)), ((512, 0), (2048, 0), (2048, 2048))),
    "cpu": (((1, 128), (4, 128)), ((32, 0),)),
}
"""(decode (batch, context), prefill (chunk, offset)) points by device type: on a GPU up to 64 x 4,096 tokens,
34 GB of Llama-3-8B KV beside its 16 GB of weights."""
HEADROOM = 1.1
"""What a model's weights or a point's KV must leave free, as a factor on their bytes (activations, the graph's
pool, the one-layer parts the composition times)."""


def free_bytes(device: torch.device) -> int | None:
    """Bytes free on a GPU now; None on CPU, where kvsim does not police memory."""
    return torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None


def weights_misfit(model: ModelSpec, device: torch.device, dtype: torch.dtype) -> str | None:
    """Why ``model``'s weights do not fit in the memory free on ``device`` now; None where they do (or a CPU)."""
    weights, free = roofline.weight_bytes(model, torch.finfo(dtype).bits // 8), free_bytes(device)
    if free is None or weights * HEADROOM <= free:
        return None
    return (f"{model.name}: its weights ({weights / 1e9:.1f} GB) do not fit in the {free / 1e9:.1f} GB free on "
            f"{torch.cuda.get_device_name(device) if device.type == 'cuda' else device}")


class WholeModel:
    """``num_layers`` dense layers and the LM head, built once and reused by every point."""

    def __init__(self, model: ModelSpec, *, dtype: torch.dtype, device: torch.device, generator: torch.Generator):
        self.layers = [DenseLayer(model, dtype=dtype, device=device, generator=generator)
                       for _ in range(model.num_layers)]
        self.head = LMHead(model, dtype=dtype, device=device, generator=generator)

    def step(self, attend: Callable[[int], object], x: torch.Tensor, sampled: int) -> Callable[[], torch.Tensor]:
        """The forward pass as a call: layer ``i``'s attention (``attend(i)``), then its dense work, for every
        layer, then the LM head over the last ``sampled`` tokens."""
        def forward() -> torch.Tensor:
            h = x
            for i, layer in enumerate(self.layers):
                attend(i)
                h = layer(h)
            return self.head(h[-sampled:])
        return forward


def whole_steps(model: ModelSpec, *, device: str | torch.device, dtype: torch.dtype, timer: Timer, seed: int = 0,
                points: tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]] | None = None,
                progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Each point (default `POINTS` for the device) timed whole and composed; one row per step with their
    ratio."""
    device = torch.device(device)
    dtype_bytes = torch.finfo(dtype).bits // 8
    misfit = weights_misfit(model, device, dtype)
    if misfit:
        raise ValueError(misfit)
    rng = np.random.default_rng(seed)
    parts = StepTimer(model, device, dtype, timer, rng, default_decode_kernel(device))
    whole = WholeModel(model, dtype=dtype, device=device, generator=parts.generator)
    decode_points, prefill_points = points or POINTS[device.type]
    shapes = [("decode", decode_step(b, c, BLOCK_SIZE), [c] * b, 1, b, b, c, 0, 0) for b, c in decode_points]
    shapes += [("prefill", prefill_step(n, o, BLOCK_SIZE), [o + n], n, 1, 1, o + n, n, o) for n, o in prefill_points]
    rows = []
    for kind, shape, lengths, q_len, sampled, batch_size, context_len, chunk, offset in shapes:
        row = {"model": model.name, "kind": kind, "batch_size": batch_size, "context_len": context_len,
               "chunk": chunk, "offset": offset, "block_size": BLOCK_SIZE}
        kv = sum(-(-n // BLOCK_SIZE) for n in lengths) * BLOCK_SIZE * roofline.kv_bytes_per_token(model, dtype_bytes)
        free = free_bytes(device)
        if free is not None and kv * HEADROOM > free:
            note = f"skipped: its KV ({kv / 1e9:.1f} GB) does not fit in the {free / 1e9:.1f} GB free"
            rows.append({**row, "attention_kernel": "", "whole_step_s": np.nan, "composed_step_s": np.nan,
                         "whole_over_composed": np.nan, "note": note})
            if progress:
                progress(f"whole {kind} batch={batch_size} ctx={context_len}: {note}")
            continue
        with single_threaded_on_cpu(device):  # as the harness times on CPU
            composed = parts.step_row(kind, shape, lengths, q_len, sampled)
            seconds = _time_whole(whole, parts, shape, lengths, q_len, sampled, timer)
        rows.append({**row, "attention_kernel": composed["attention_kernel"], "whole_step_s": seconds,
                     "composed_step_s": composed["step_s"], "whole_over_composed": seconds / composed["step_s"],
                     "note": ""})
        if progress:
            progress(f"whole {kind} batch={batch_size} ctx={context_len}: {seconds * 1e3:.2f} ms, composed "
                     f"{composed['step_s'] * 1e3:.2f} ms")
    frame = pd.DataFrame(rows)
    frame["device"] = device.type
    frame["dtype"] = str(dtype).removeprefix("torch.")
    frame["timing"] = timing_mode(timer)
    return frame


def _time_whole(whole: WholeModel, parts: StepTimer, shape: StepShape, lengths: list[int], q_len: int,
                sampled: int, timer: Timer) -> float:
    cache, batch = timing_batch(parts.model, lengths, q_len, shape.block_size, device=parts.device,
                                dtype=parts.dtype, rng=parts.rng, generator=parts.generator,
                                num_layers=parts.model.num_layers)
    _, kernel = parts.attention_kernel(q_len)
    x = torch.randn(shape.tokens, parts.model.hidden_size, generator=parts.generator).to(parts.device, parts.dtype)
    return timer(whole.step(lambda layer: kernel(cache, batch, layer), x, sampled))


def main(argv: list[str] | None = None) -> int:
    """``python -m gpu_validation.whole_step OUT.csv --models A,B --batches 1,8,32``: decode whole steps of
    several models at 1,024 tokens of context, one model's weights on the device at a time. Batch-1 steps of
    models of different sizes give the achieved weight-read bandwidth as a slope, free of the fixed per-step
    part, as `vllm-v1`'s bandwidth_frac was derived from vLLM's steps (`docs/validation.md`)."""
    import argparse
    import time

    from gpu_validation.features import scaled_model

    parser = argparse.ArgumentParser(prog="python -m gpu_validation.whole_step",
                                     description="Decode whole steps of several models, one model at a time.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--models", type=comma_list(catalog_model), default="llama-3-8b",
                        help="comma-separated catalog models")
    parser.add_argument("--batches", type=comma_list(positive_int), default="1,8,32",
                        help="comma-separated decode batch sizes")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None)
    args = parser.parse_args(argv)
    device = device_of(parser, args.device)
    cuda = device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    models = args.models if cuda else [scaled_model(m, 16) for m in args.models]  # CPU: a pipeline check
    for model in models:  # all before any is timed: one that cannot load ended the run after the others were timed
        misfit = weights_misfit(model, torch.device(device), dtype)
        if misfit:
            parser.error(f"argument --models: {misfit}")
    points = (tuple((b, 1024) for b in args.batches), ())
    start = time.monotonic()
    frames = []
    for given, model in zip(args.models, models, strict=True):
        timer = Timer(device, warmup=2, repeats=10, graphs=True) if cuda else Timer(device, warmup=1, repeats=2)
        frames.append(whole_steps(model, device=device, dtype=dtype, timer=timer, points=points,
                                  progress=lambda line, n=given.name: print(
                                      f"[{time.monotonic() - start:6.1f}s] {n} {line}", flush=True)))
        if cuda:
            torch.cuda.empty_cache()  # the next model's weights need the room
    frame = pd.concat(frames, ignore_index=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out, index=False, float_format="%.6g")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
