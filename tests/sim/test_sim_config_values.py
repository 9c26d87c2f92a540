"""`SimConfig`'s value types: a bool field takes only a bool, numpy scalars stand for Python numbers (stored as
Python's, so ``to_dict()`` and JSON do not change), and a string or a bool where a number goes is a one-line
ValueError naming the flag, not a TypeError from a comparison or a silent truth value. Unknown catalog names
print as their message."""

from __future__ import annotations

import json
from dataclasses import fields

import numpy as np
import pytest

from allocators.catalog import UnknownNameError, get_gpu, get_model
from sim.kernel.config import SimConfig, flag

BOOL_FIELDS = [f.name for f in fields(SimConfig) if f.type == "bool"]


def test_every_bool_field_is_found():
    assert {"enforce_eager", "chunked_prefill", "prefix_caching", "skip_bad_rows", "step_by_step",
            "disable_hybrid_kv_cache_manager", "scheduler_reserve_full_isl"} <= set(BOOL_FIELDS)


@pytest.mark.parametrize("field", BOOL_FIELDS)
@pytest.mark.parametrize("value", ["False", "no", None, 0, 1, 1.0])
def test_bool_fields_refuse_anything_but_a_bool(field, value):
    """``enforce_eager="False"`` used to run as True (a non-empty string's truth)."""
    with pytest.raises(ValueError, match=f"^{flag(field)} must be True or False, got {value!r}$"):
        SimConfig(**{field: value})


@pytest.mark.parametrize("field", ["enforce_eager", "prefix_caching", "step_by_step"])
def test_numpy_bools_are_stored_as_python_bools(field):
    for value in (np.True_, np.False_):
        stored = getattr(SimConfig(**{field: value}), field)
        assert type(stored) is bool and stored == bool(value)


@pytest.mark.parametrize(("field", "value"), [
    ("block_size", np.int64(32)), ("seed", np.int64(3)), ("num_requests", np.int32(100)),
    ("memory_snapshots", np.uint8(4)), ("tensor_parallel", np.int32(2)), ("kv_tokens", np.int64(5000)),
    ("offload_store_threshold", np.int64(2)), ("page_size_kib", np.int64(64)), ("replicas", np.int16(3)),
])
def test_numpy_integers_are_accepted_and_stored_as_int(field, value):
    config = SimConfig(**{field: value})
    assert type(getattr(config, field)) is int and getattr(config, field) == int(value)
    assert config.to_dict() == SimConfig(**{field: int(value)}).to_dict()


@pytest.mark.parametrize(("field", "value", "plain"), [
    ("kv_gib", np.int64(12), 12), ("kv_gib", np.float32(12.5), 12.5), ("rate", np.int64(2), 2),
    ("rate", np.float32(2.0), 2.0), ("cpu_offload_gib", np.int64(8), 8), ("step_time", np.float64(0.01), 0.01),
    ("gpu_memory_utilization", np.float32(0.5), 0.5), ("watermark", np.float64(0.01), 0.01),
    ("swap_space_gib", np.int64(4), 4), ("router_load_weight", np.float16(2.0), 2.0),
])
def test_numpy_numbers_are_accepted_and_stored_as_python_numbers(field, value, plain):
    """An integer stays an int and a float a float, as the Python value would be stored: ``config.json``
    and sweep point ids are those of the Python value."""
    config = SimConfig(**{field: value})
    stored = getattr(config, field)
    assert type(stored) is type(plain) and stored == plain
    assert json.dumps(config.to_dict()) == json.dumps(SimConfig(**{field: plain}).to_dict())


def test_python_values_are_stored_unchanged():
    config = SimConfig(kv_gib=12, rate=2.5, swap_space_gib=0)
    assert (type(config.kv_gib), type(config.rate), type(config.swap_space_gib)) == (int, float, int)


@pytest.mark.parametrize("value", [2048.0, "2048", True, np.float64(64)])
def test_page_size_follows_the_integer_rule(value):
    with pytest.raises(ValueError, match=r"^--page-size-kib must be one of 64, 128, 256, 2048, got "):
        SimConfig(page_size_kib=value)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("gpu_memory_utilization", "0.9", "--gpu-memory-utilization must be a number in (0, 1], got '0.9'"),
    ("gpu_memory_utilization", True, "--gpu-memory-utilization must be a number in (0, 1], got True"),
    ("watermark", "0.01", "--watermark must be a fraction in [0, 1), got '0.01'"),
    ("watermark", np.True_, "--watermark must be a fraction in [0, 1), got np.True_"),
    ("beam_keep_prob", "0.5", "--beam-keep-prob must be a number in [0, 1], got '0.5'"),
    ("swap_space_gib", True, "--swap-space-gib must be a finite number >= 0, got True"),
    ("swap_space_gib", "4", "--swap-space-gib must be a finite number >= 0, got '4'"),
    ("cpu_offload_gib", np.int64(-1), "--cpu-offload-gib must be a finite number of GiB >= 0, got np.int64(-1)"),
    ("router_load_weight", None, "--router-load-weight must be a finite number >= 0, got None"),
    ("kv_gib", np.bool_(True), "--kv-gib must be a positive finite number, got np.True_"),
    ("block_size", np.float64(16), "--block-size must be a positive integer, got np.float64(16.0)"),
    ("seed", True, "--seed must be a non-negative integer, got True"),
    ("cache_aware_admission_window", -1, "--cache-aware-admission-window must be a non-negative integer, got -1"),
    ("cache_aware_admission_threshold", 1.5, "--cache-aware-admission-threshold must be a fraction in [0, 1], "
                                             "got 1.5"),
    ("prefill_schedule_interval", 0, "--prefill-schedule-interval must be a positive integer, got 0"),
    ("max_num_active_seqs", 0, "--max-num-active-seqs must be a positive integer, got 0"),
    ("max_num_queued_reqs", -1, "--max-num-queued-reqs must be a non-negative integer, got -1"),
    ("max_num_queued_tokens", 1.5, "--max-num-queued-tokens must be a non-negative integer, got 1.5"),
])
def test_wrong_types_are_one_line_value_errors(field, value, message):
    with pytest.raises(ValueError) as info:
        SimConfig(**{field: value})
    assert str(info.value) == message


def test_unknown_catalog_names_print_their_message():
    """A KeyError's str() is its message's repr (quoted); the catalog's error prints the message itself and
    is still caught by ``except KeyError`` (the CLI's) and by ``except ValueError``."""
    for lookup, kind in ((get_gpu, "gpu"), (get_model, "model")):
        with pytest.raises(UnknownNameError) as info:
            lookup("H100x")
        assert str(info.value).startswith(f"unknown {kind} 'H100x'; valid choices: ")
        assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)
    assert get_gpu("H100-80GB").name == "h100-80gb"


@pytest.mark.parametrize(("field", "message"), [
    ("allocator", "unknown allocator 'pagd'; valid choices: contiguous-max, "),
    ("placement", "unknown placement 'pagd'; valid choices: buddy, "),
])
def test_unknown_allocator_and_placement_are_refused_when_the_config_is_made(field, message):
    """Not when a run (or each point of a sweep) starts: the Python API fails where the name was written."""
    with pytest.raises(ValueError, match=f"^{message}"):
        SimConfig(**{field: "pagd"})
