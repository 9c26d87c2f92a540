"""Fuzzing the readers: random bytes and mangled rows either read correctly or raise `TraceError`, never
another exception (no pandas, JSON or Arrow traceback reaches the user)."""

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.soak import examples
from workloads import TraceError, Workload, load_trace
from workloads.presets import SAMPLES_DIR

# Random rows may well look like something they are not (a timestamp column not read, say): the readers warn,
# which is reading correctly; what is fuzzed here is that nothing but `TraceError` is ever raised.
pytestmark = pytest.mark.filterwarnings("ignore::workloads.errors.TraceWarning")

FUZZ = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

SEEDS = {
    ".csv": (SAMPLES_DIR / "AzureLLMInferenceTrace_conv.csv").read_bytes()[:600],
    ".jsonl": (SAMPLES_DIR / "conversation_trace.jsonl").read_bytes()[:900],
    ".tsv": b"arrival_time_s,prompt_tokens,output_tokens,max_tokens,n,prefix_group,prefix_len,prefix_hashes\n"
            b"0.0,100,5,,2,0,40,0 1 2 3 4 5 6\n0.5,30,7,9,1,,0,\n1.5,64,3,3,1,1,64,9 10 11 12\n",
    ".txt": b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            b"5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,0,1087,Conversation log\n",
}
JUNK = st.binary(min_size=1, max_size=6) | st.sampled_from(
    [b",", b"\n", b"\r\n", b'"', b"{", b"}", b"[", b"]", b"-", b"0", b"nan", b"1e400", b"\x00", b"\xff", b" ",
     b"2023-13-45", b"null", b"true", b"-1"])


def check(data: bytes, suffix: str, skip: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"fuzz{suffix}"
        path.write_bytes(data)
        try:
            workload = load_trace(path, skip_bad_rows=skip)
        except TraceError as error:
            assert str(error) and str(path) in str(error) or "spec" in str(error)
            return
    assert isinstance(workload, Workload) and len(workload) > 0
    assert (np.diff(workload.arrival_time_s) >= 0).all()
    requests = list(workload)  # every row is a valid Request
    assert all(r.prompt_tokens > 0 and r.output_tokens > 0 for r in requests)


@FUZZ
@given(data=st.binary(max_size=400), suffix=st.sampled_from([".csv", ".jsonl", ".parquet", ""]), skip=st.booleans())
def test_random_bytes(data, suffix, skip):
    check(data, suffix, skip)


@FUZZ
@given(seed=st.sampled_from(sorted(SEEDS)), edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3),
                                                                    JUNK), max_size=6),
       cut=st.integers(0, 10**6), skip=st.booleans())
def test_mangled_rows(seed, edits, cut, skip):
    data = bytearray(SEEDS[seed])
    for position, width, junk in edits:
        at = position % (len(data) + 1)
        data[at : at + width] = junk
    data = bytes(data[: max(cut % (len(data) + 1), len(data) // 2)])
    check(data, ".csv" if seed in (".tsv", ".txt") else seed, skip)


def _parquet_seed() -> bytes:
    from workloads import generate, write_trace

    workload = generate("uniform:prompt_min=1,prompt_max=90,output_min=1,output_max=9", "poisson:rate=1", 5,
                        seed=0, turns=2, turn_gap_s=0.1, system_prompt_len=20, system_prompt_frac=0.5)
    with tempfile.TemporaryDirectory() as tmp:
        return write_trace(workload, Path(tmp) / "seed.parquet").read_bytes()


PARQUET = _parquet_seed()


@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
       skip=st.booleans())
def test_mangled_parquet(flips, skip):
    data = bytearray(PARQUET)
    for position, value in flips:
        data[position % len(data)] = value
    check(bytes(data), ".parquet", skip)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=5)
FIELDS = st.sampled_from(["arrival_time_s", "prompt_tokens", "output_tokens", "max_tokens", "n", "beam_width",
                          "prefix_group", "prefix_len", "prefix_hashes", "prefix_hash_tokens", "timestamp",
                          "input_length", "output_length", "hash_ids"])


@FUZZ
@given(rows=st.lists(st.dictionaries(FIELDS, JSON_VALUES | st.integers(0, 600), min_size=2, max_size=8),
                     min_size=1, max_size=5), skip=st.booleans())
def test_json_rows_with_any_values(rows, skip):
    import json

    check("\n".join(json.dumps(row) for row in rows).encode(), ".jsonl", skip)


def test_parquet_integer_past_float_precision_with_nulls_is_a_trace_error(tmp_path):
    """An integer column with nulls is read as floats; a value past 2**53 (found by `test_mangled_parquet`: one
    flipped byte) made Arrow's checked cast raise its own error instead of the row's one-line range error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"arrival_time_s": [0.0, 1.0, 2.0], "prompt_tokens": pa.array([2**56, None, 5]),
                             "output_tokens": [3, 4, 5]}), path)
    with pytest.raises(TraceError, match=r"big.parquet: row 1: field 'prompt_tokens': must be <= 1e\+09"):
        load_trace(path)
