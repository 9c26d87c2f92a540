"""`python -m gpu_validation.whole_step`: decode whole steps of several models, one model at a time, on CPU here
(scaled down 16x), with the columns `benchmarks/gpu_clock_check.py --models` reads."""

from __future__ import annotations

import pandas as pd

from gpu_validation.whole_step import main


def test_whole_steps_of_two_models_on_cpu(tmp_path, capsys):
    out = tmp_path / "models.csv"
    assert main([str(out), "--models", "llama-2-7b,llama-3-8b", "--batches", "1,2", "--device", "cpu"]) == 0
    frame = pd.read_csv(out)
    assert list(frame["model"]) == ["llama-2-7b/16"] * 2 + ["llama-3-8b/16"] * 2
    assert list(frame["batch_size"]) == [1, 2, 1, 2] and set(frame["context_len"]) == {1024}
    assert (frame["whole_step_s"] > 0).all() and set(frame["timing"]) == {"eager"}
    assert "wrote" in capsys.readouterr().out
