"""The request rules have one home (`workloads.validation`): a record, a workload's columns and a trace file
are judged by the same rules, and each caller only adds its own context (id, workload name, file/line/field)."""

import re

import numpy as np
import pytest

from workloads import Request, TraceError, Workload, load_trace
from workloads.validation import BOTH_N_AND_BEAM, first_problem, record_problem

GOOD = {"prompt_tokens": 100, "output_tokens": 10, "max_tokens": float("nan"), "n": 1, "beam_width": 1,
        "prefix_group": float("nan"), "prefix_len": 0, "hash_counts": 0}

BAD = [  # (field overrides, "field: problem" every caller reports)
    ({"prompt_tokens": 0}, "prompt_tokens: must be >= 1"),
    ({"output_tokens": 0}, "output_tokens: must be >= 1"),
    ({"max_tokens": 5}, "max_tokens: must be >= output_tokens"),
    ({"n": 2, "beam_width": 2}, f"beam_width: {BOTH_N_AND_BEAM}"),
    ({"prefix_group": 3, "prefix_len": 101}, "prefix_len: must be within the prompt"),
    # the readers' upper bounds: a `Workload` or `Request` built in Python accepted them, and its trace file failed
    ({"prompt_tokens": 10**9 + 1}, "prompt_tokens: must be <= 1e+09"),
    ({"output_tokens": 10**9 + 1}, "output_tokens: must be <= 1e+09"),
    ({"max_tokens": 10**12}, "max_tokens: must be <= 1e+09"),
    ({"n": 10**6 + 1}, "n: must be <= 1e+06"),
    ({"beam_width": 10**7}, "beam_width: must be <= 1e+06"),
    ({"prefix_group": 3, "prefix_len": 10**9 + 1}, "prefix_len: must be <= 1e+09"),
]


@pytest.mark.parametrize("overrides, expected", BAD)
def test_one_record_and_its_column_get_the_same_verdict(overrides, expected):
    record = GOOD | overrides
    columns = {key: np.array([GOOD[key], value], dtype=np.float64) for key, value in record.items()}
    assert record_problem(GOOD, 512) is None and first_problem({k: v[:1] for k, v in columns.items()}, 512) is None
    assert record_problem(record, 512) == expected
    assert first_problem(columns, 512) == expected


@pytest.mark.parametrize("overrides, expected", BAD)
def test_request_workload_and_reader_report_the_same_rule(tmp_path, overrides, expected):
    fields = {k: (None if isinstance(v, float) else v) for k, v in (GOOD | overrides).items() if k != "hash_counts"}
    with pytest.raises(ValueError, match=f"^request 7: {re.escape(expected)}$"):
        Request(id=7, arrival_time_s=0.0, **fields)
    columns = {k: np.array([-1 if v is None else v]) for k, v in fields.items()}
    with pytest.raises(ValueError, match=f"^workload 'w': {re.escape(expected)}$"):
        Workload(arrival_time_s=np.zeros(1), name="w", **columns)
    path = tmp_path / "t.csv"
    names = [k for k, v in fields.items() if v is not None]
    path.write_text("arrival_time_s," + ",".join(names) + "\n0," + ",".join(str(fields[k]) for k in names) + "\n")
    field, problem = expected.split(": ", 1)
    with pytest.raises(TraceError, match=re.escape(f"line 2: field '{field}': {problem}")):
        load_trace(path)


def test_missing_optional_values_break_no_rule():
    """A missing max_tokens or prefix_group (NaN, or -1 in a `Workload`) is a default, not a bad value."""
    w = Workload(arrival_time_s=np.zeros(2), prompt_tokens=[5, 5], output_tokens=[3, 3], max_tokens=[-1, 4],
                 prefix_group=[-1, 0], prefix_len=[0, 5])
    assert [r.max_tokens for r in w] == [None, 4] and [r.prefix_group for r in w] == [None, 0]
    with pytest.raises(ValueError, match="prefix_group: must be >= 0"):
        Workload(arrival_time_s=np.zeros(1), prompt_tokens=[5], output_tokens=[3], prefix_group=[-2])


def test_hash_unit_and_hash_count_rules():
    with pytest.raises(ValueError, match=r"prefix_hash_tokens: must be >= 1 \(got 0\)"):
        Request(0, 0.0, 10, 5, prefix_hash_tokens=0)
    assert record_problem(GOOD | {"hash_counts": 2}, 64) is None  # the second hash covers the prompt's tail
    assert record_problem(GOOD | {"hash_counts": 3}, 64) == "prefix_hashes: more hashes than 64-token blocks of " \
        "the prompt"


def test_a_group_and_hashes_together_are_refused(tmp_path):
    """A row's shared prefix is its group's or its hashes': given both, the hashes were used and the group
    dropped in silence (a row sharing a group's 64 tokens hit none of them)."""
    from workloads.validation import GROUP_AND_HASHES

    assert record_problem(GOOD | {"prefix_group": 3, "prefix_len": 64, "hash_counts": 1}, 512) == \
        f"prefix_group: {GROUP_AND_HASHES}"
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_time_s": 0, "prompt_tokens": 100, "output_tokens": 5, "prefix_group": "a", '
                    '"prefix_len": 64, "prefix_hashes": []}\n{"arrival_time_s": 1, "prompt_tokens": 100, '
                    '"output_tokens": 5, "prefix_group": "a", "prefix_len": 64, "prefix_hashes": [1]}\n')
    with pytest.raises(TraceError, match=re.escape(f"line 2: field 'prefix_group': {GROUP_AND_HASHES}")):
        load_trace(path)
