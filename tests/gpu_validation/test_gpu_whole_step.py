"""`python -m gpu_validation.whole_step`: decode whole steps of several models, one model at a time, on CPU here
(scaled down 16x), with the columns `benchmarks/gpu_clock_check.py --models` reads."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from allocators import roofline
from allocators.catalog import get_model
from gpu_validation import whole_step
from gpu_validation.features import scaled_model
from gpu_validation.timing import Timer
from gpu_validation.whole_step import main


def test_whole_steps_of_two_models_on_cpu(tmp_path, capsys):
    out = tmp_path / "models.csv"
    assert main([str(out), "--models", "llama-2-7b,llama-3-8b", "--batches", "1,2", "--device", "cpu"]) == 0
    frame = pd.read_csv(out)
    assert list(frame["model"]) == ["llama-2-7b/16"] * 2 + ["llama-3-8b/16"] * 2
    assert list(frame["batch_size"]) == [1, 2, 1, 2] and set(frame["context_len"]) == {1024}
    assert (frame["whole_step_s"] > 0).all() and set(frame["timing"]) == {"eager"}
    assert "wrote" in capsys.readouterr().out


def test_what_does_not_fit_in_device_memory_is_refused_or_skipped_with_its_reason(monkeypatch):
    """On a 40 GB card the default points' 34 GB of KV beside 16 GB of weights cannot run: the model is refused
    when its weights do not fit, and a point whose KV does not is skipped with the sizes, the rest still timed."""
    model = scaled_model(get_model("llama-3-8b"), 16)
    weights = roofline.weight_bytes(model, 4)
    run = dict(device="cpu", dtype=torch.float32, timer=Timer("cpu", warmup=0, repeats=1),
               points=(((1, 64), (64, 1024)), ()))
    monkeypatch.setattr(whole_step, "free_bytes", lambda device: int(weights))
    with pytest.raises(ValueError, match=r"llama-3-8b/16: its weights \(\d+\.\d GB\) do not fit in the \d+\.\d GB free"):
        whole_step.whole_steps(model, **run)
    kv_of_small = 64 * roofline.kv_bytes_per_token(model, 4)
    monkeypatch.setattr(whole_step, "free_bytes", lambda device: int(2 * weights + 10 * kv_of_small))
    frame = whole_step.whole_steps(model, **run)
    small, large = frame.iloc[0], frame.iloc[1]
    assert small.note == "" and small.whole_step_s > 0
    assert large.note.startswith("skipped: its KV (") and "GB) does not fit in the" in large.note
    assert math.isnan(large.whole_step_s) and math.isnan(large.composed_step_s)


def test_the_summary_says_which_whole_steps_were_skipped_and_why():
    from gpu_validation.run_all import summary

    whole = pd.DataFrame([
        {"kind": "decode", "batch_size": 1, "context_len": 1024, "whole_step_s": 0.00475, "composed_step_s": 0.00526,
         "whole_over_composed": 0.903, "note": "", "timing": "cuda-graph"},
        {"kind": "decode", "batch_size": 64, "context_len": 4096, "whole_step_s": math.nan,
         "composed_step_s": math.nan, "whole_over_composed": math.nan, "timing": "cuda-graph",
         "note": "skipped: its KV (34.4 GB) does not fit in the 22.0 GB free"}])
    lines = summary(None, None, None, {}, whole).splitlines()
    assert lines[2] == "whole steps (cuda-graph), one forward pass against the calibration's composition of it:"
    assert lines[3].split() == ["decode", "batch", "1", "context", "1024", "whole", "4.75", "ms", "composed", "5.26",
                                "ms", "0.903x"]
    assert lines[4].endswith("skipped: its KV (34.4 GB) does not fit in the 22.0 GB free")
