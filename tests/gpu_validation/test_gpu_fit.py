"""The calibration fit: it recovers known coefficients, stays physical, and writes tables the simulator reads.

The features are recomputed in `gpu_validation.features` (that package may not import `sim`); here the
two are held to the same numbers, so the fitted coefficients mean in the simulator what they meant in the
fit.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from allocators.catalog import get_gpu, get_model
from gpu_validation.features import (
    decode_step,
    has_gated_mlp,
    params_from_shapes,
    prefill_step,
    scaled_model,
    step_features,
)
from gpu_validation.fit import (
    Coefficients,
    calibration_table,
    coefficients_from_table,
    fit_step_costs,
    read_table,
    write_table,
)

MODEL, GPU = get_model("llama-3-8b"), get_gpu("h200")
PEAK_F, PEAK_B = GPU.bf16_tflops * 1e12, GPU.hbm_bandwidth_gb_s * 1e9
TRUE = Coefficients(0.72, 0.55, 0.004, {8: 1.35, 16: 1.2, 32: 1.1})


def synthetic_frame(noise: float = 0.0, seed: int = 0) -> pd.DataFrame:
    steps = [decode_step(b, c, bs) for bs in (8, 16, 32) for b in (1, 16, 64, 256) for c in (512, 4096, 8192)]
    steps += [prefill_step(ch, off, bs) for bs in (8, 16, 32) for ch in (256, 1024, 2048) for off in (0, 2048)]
    rows = [{"block_size": s.block_size, **step_features(MODEL, s)} for s in steps]
    frame = pd.DataFrame(rows)
    rng = np.random.default_rng(seed)
    frame["step_s"] = TRUE.predict(frame, PEAK_F, PEAK_B) * (1 + noise * rng.standard_normal(len(frame)))
    return frame


def test_fit_recovers_the_coefficients_that_generated_the_data():
    fit = fit_step_costs(synthetic_frame(), PEAK_F, PEAK_B)
    c = fit.coefficients
    assert c.bandwidth_frac == pytest.approx(0.72, rel=1e-6)
    assert c.flops_frac == pytest.approx(0.55, rel=1e-6)
    assert c.step_overhead_s == pytest.approx(0.004, rel=1e-6)
    for bs, v in TRUE.paged_kernel_overhead.items():
        assert c.paged_kernel_overhead[bs] == pytest.approx(v, rel=1e-6)
    assert fit.mape < 1e-9 and fit.points == len(synthetic_frame()) and fit.defaulted == ()
    assert fit.compute_bound.any() and not fit.compute_bound.all()


def test_fit_with_noise_stays_close_and_reports_its_error():
    fit = fit_step_costs(synthetic_frame(noise=0.03, seed=2), PEAK_F, PEAK_B)
    c = fit.coefficients
    assert c.bandwidth_frac == pytest.approx(0.72, rel=0.1)
    assert c.flops_frac == pytest.approx(0.55, rel=0.1)
    assert 0.01 < fit.mape < 0.06 and fit.rmse_s > 0


def test_fit_keeps_fractions_physical_when_the_data_beat_the_peaks():
    frame = synthetic_frame()
    frame["step_s"] *= 0.3  # faster than the data sheet allows
    c = fit_step_costs(frame, PEAK_F, PEAK_B).coefficients
    assert c.bandwidth_frac <= 1 and c.flops_frac <= 1 and c.step_overhead_s >= 0
    assert min(c.paged_kernel_overhead.values()) >= c.bandwidth_frac - 1e-9  # KV reads no faster than peak


def test_fit_defaults_what_no_point_informs():
    frame = synthetic_frame()
    compute_s = frame["flops"] / (TRUE.flops_frac * PEAK_F)
    memory_s = (frame["weight_bytes"] + frame["kv_read_bytes"]) / (TRUE.bandwidth_frac * PEAK_B)
    fit = fit_step_costs(frame[compute_s < 0.5 * memory_s].reset_index(drop=True), PEAK_F, PEAK_B)
    assert "flops_frac" in fit.defaulted and fit.coefficients.flops_frac == 0.6
    with pytest.raises(ValueError, match="at least 4"):
        fit_step_costs(frame.head(3), PEAK_F, PEAK_B)


def test_features_match_the_simulators_cost_model():
    from sim.kernel.cost_model import StepCostModel

    sim = StepCostModel(MODEL, GPU, block_size=16, bandwidth_frac=TRUE.bandwidth_frac, flops_frac=TRUE.flops_frac,
                        step_overhead_s=TRUE.step_overhead_s, paged_kernel_overhead=TRUE.paged_kernel_overhead)
    for step in (decode_step(32, 2000, 16), decode_step(1, 100, 16), prefill_step(1024, 512, 16)):
        frame = pd.DataFrame([{"block_size": 16, **step_features(MODEL, step)}])
        ours = TRUE.predict(frame, PEAK_F, PEAK_B)[0]
        theirs = sim.step_time(step.prefill_tokens, step.decode_seqs, step.context_tokens,
                               attention_pairs=step.attention_pairs)
        assert ours == pytest.approx(theirs, rel=1e-12)


def test_table_has_the_documented_keys_and_the_simulator_loads_it(tmp_path):
    fit = fit_step_costs(synthetic_frame(), PEAK_F, PEAK_B)
    table = calibration_table(fit, gpu="h200", model="llama-3-8b", device="cuda", device_name="NVIDIA H200",
                              dtype="bfloat16", peak_flops=PEAK_F, peak_bandwidth=PEAK_B, peaks_source="catalog",
                              timed_model="llama-3-8b", created="2026-11-29")
    documented = {"format", "version", "gpu", "model", "device", "device_name", "dtype", "created",
                  "coefficients", "fit"}
    assert documented <= set(table) and set(table) - documented == {"peaks", "timed_model", "timing"}
    assert table["timing"] == "eager"  # the default when a caller does not say how it timed
    assert set(table["coefficients"]) == {"bandwidth_frac", "flops_frac", "step_overhead_s",
                                          "paged_kernel_overhead", "seq_overhead_s", "prefill_token_s",
                                          "mixed_overlap"}
    assert set(table["coefficients"]["paged_kernel_overhead"]) == {"8", "16", "32"}
    assert set(table["fit"]) == {"points", "rmse_s", "mape"}
    assert table["format"] == "kvsim-calibration" and table["version"] == 2
    path = write_table(table, tmp_path / "h200" / "llama-3-8b.json")
    assert read_table(path) == table
    assert coefficients_from_table(table).paged_kernel_overhead[8] == pytest.approx(1.35, rel=1e-3)

    from sim.kernel.cost_model import CalibratedStepCost

    model = CalibratedStepCost.from_file(path, MODEL, GPU, block_size=8)
    assert model.bandwidth_frac == pytest.approx(0.72, rel=1e-3)


def test_read_table_names_the_file_and_the_field(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps({"format": "kvsim-calibration", "coefficients": {"flops_frac": 0.5}}))
    with pytest.raises(ValueError, match=r"t\.json: field 'coefficients.bandwidth_frac' is missing"):
        read_table(bad)
    bad.write_text("{")
    with pytest.raises(ValueError, match="cannot read"):
        read_table(bad)


def test_shapes_explain_the_catalog_parameter_counts():
    for name, gated in (("llama-3-8b", True), ("mistral-7b", True), ("opt-13b", False)):
        model = get_model(name)
        assert has_gated_mlp(model) is gated
        assert params_from_shapes(model, gated) == pytest.approx(model.num_params, rel=0.03)


def test_scaled_model_keeps_head_size_layers_and_grouping():
    small = scaled_model(MODEL, 8)
    assert (small.num_layers, small.head_dim) == (MODEL.num_layers, MODEL.head_dim)
    assert small.num_heads // small.num_kv_heads == MODEL.num_heads // MODEL.num_kv_heads
    assert small.hidden_size == small.num_heads * small.head_dim
    assert small.num_params == params_from_shapes(small, True) and scaled_model(MODEL, 1) is MODEL


def test_prefill_features_count_the_causal_triangle():
    step = prefill_step(4, 10, 16)
    assert (step.context_tokens, step.attention_pairs, step.tokens) == (14, 4 * 10 + 10, 4)
    f = step_features(MODEL, step)
    assert f["kv_write_bytes"] == 4 * MODEL.kv_bytes_per_token
    assert f["flops"] == 2 * MODEL.num_params * 4 + 4 * 32 * 32 * 128 * 50
