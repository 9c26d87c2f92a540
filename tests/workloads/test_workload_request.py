"""`Request.block_hashes` and the columnar `Workload`: identity of shared prefixes, and lazy requests."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from workloads import Request, TraceError, Workload
from workloads.frames import workload_from_frame, workload_to_frame


def mooncake(prompt, hashes, rid=0):
    return Request(rid, 0.0, prompt, 10, prefix_hashes=tuple(hashes), prefix_hash_tokens=512)


def test_shared_leading_hash_ids_give_equal_block_hashes_up_to_the_divergence():
    a, b = mooncake(1100, [0, 1, 2]), mooncake(1100, [0, 1, 9])
    ha, hb = a.block_hashes(16), b.block_hashes(16)
    assert len(ha) == 1100 // 16
    assert ha[:64] == hb[:64]  # the two shared 512-token units are 64 blocks of 16
    assert all(x != y for x, y in zip(ha[64:], hb[64:], strict=True))


def test_hashes_are_chained_a_repeated_id_after_a_different_parent_differs():
    a, b = mooncake(1024, [0, 5]), mooncake(1024, [7, 5])
    assert set(a.block_hashes(16)).isdisjoint(b.block_hashes(16))


def test_only_full_blocks_inside_the_known_prefix_get_a_hash():
    # the last hash covers only up to the prompt length: 600 tokens are known, so 37 blocks of 16
    assert len(mooncake(600, [0, 1]).block_hashes(16)) == 37
    # fewer hashes than prompt blocks: identity ends with the last hash
    assert len(Request(0, 0.0, 2000, 5, prefix_hashes=(0,), prefix_hash_tokens=512).block_hashes(16)) == 32
    assert mooncake(15, [0]).block_hashes(16) == ()


def test_blocks_larger_than_a_hash_unit_span_several_units():
    a = Request(0, 0.0, 64, 5, prefix_hashes=(1, 2, 3, 4), prefix_hash_tokens=16)
    b = Request(1, 0.0, 64, 5, prefix_hashes=(1, 2, 3, 8), prefix_hash_tokens=16)
    assert len(a.block_hashes(32)) == 2
    assert a.block_hashes(32)[0] == b.block_hashes(32)[0]
    assert a.block_hashes(32)[1] != b.block_hashes(32)[1]
    # a prefix of a longer conversation: the same stream gives the same blocks
    shorter = Request(2, 0.0, 40, 5, prefix_hashes=(1, 2, 3), prefix_hash_tokens=16)
    assert a.block_hashes(8)[:5] == shorter.block_hashes(8)


def test_prefix_group_blocks_are_shared_within_the_group_only():
    a = Request(0, 0.0, 300, 5, prefix_group=3, prefix_len=100)
    b = Request(1, 0.0, 120, 5, prefix_group=3, prefix_len=100)
    c = Request(2, 0.0, 300, 5, prefix_group=4, prefix_len=100)
    assert a.block_hashes(16) == b.block_hashes(16) and len(a.block_hashes(16)) == 6
    assert set(a.block_hashes(16)).isdisjoint(c.block_hashes(16))
    assert Request(3, 0.0, 300, 5).block_hashes(16) == ()


def test_block_hashes_are_the_same_in_another_process():
    code = ("from workloads import Request; r = Request(0, 0.0, 1100, 5, prefix_hashes=(0, 1, 2));"
            "print(r.block_hashes(16)[-1], Request(1, 0.0, 50, 5, prefix_group=2, prefix_len=40).block_hashes(8))")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}
    here = Request(0, 0.0, 1100, 5, prefix_hashes=(0, 1, 2)).block_hashes(16)[-1]
    assert len(runs) == 1 and runs.pop().split()[0] == str(here)
    assert 0 <= here < 2**63


def test_request_rejects_more_hashes_than_prompt_blocks():
    with pytest.raises(ValueError, match="prefix_hashes: more hashes than 512-token blocks"):
        mooncake(512, [0, 1])
    with pytest.raises(ValueError, match="block_size"):
        mooncake(512, [0]).block_hashes(0)


def small_workload() -> Workload:
    return Workload(
        arrival_time_s=np.array([0.0, 0.5, 0.5, 2.0]),
        prompt_tokens=np.array([100, 600, 30, 40]),
        output_tokens=np.array([5, 6, 7, 8]),
        max_tokens=np.array([-1, 10, -1, -1]),
        n=np.array([1, 2, 1, 1]),
        prefix_group=np.array([-1, -1, 1, 1]),
        prefix_len=np.array([0, 0, 20, 20]),
        hash_offsets=np.array([0, 0, 2, 2, 2]),
        hash_values=np.array([0, 7]),
        name="small",
    )


def test_workload_yields_requests_lazily_and_indexes():
    w = small_workload()
    assert len(w) == 4
    requests = list(w)
    assert requests == list(w)  # re-iterable
    assert requests[1] == Request(1, 0.5, 600, 6, max_tokens=10, n=2, prefix_hashes=(0, 7))
    assert requests[2].prefix_group == 1 and requests[0].max_tokens is None
    assert w[-1] == requests[3]
    with pytest.raises(IndexError):
        w[4]


def test_workload_frame_round_trip():
    w = small_workload()
    frame = workload_to_frame(w)
    assert frame["max_tokens"].isna().tolist() == [True, False, True, True]
    assert frame["prefix_hashes"].tolist() == [(), (0, 7), (), ()]
    back = workload_from_frame(frame)
    assert list(back) == list(w)
    assert back.prefix_hash_tokens == 512


def test_workload_validates_columns_on_construction():
    with pytest.raises(ValueError, match="sorted"):
        Workload(arrival_time_s=np.array([1.0, 0.0]), prompt_tokens=np.array([1, 1]), output_tokens=np.array([1, 1]))
    with pytest.raises(ValueError, match="output_tokens"):
        Workload(arrival_time_s=np.array([0.0]), prompt_tokens=np.array([1]), output_tokens=np.array([0]))
    frame = pd.DataFrame({"arrival_time_s": [0.0, 1.0], "prompt_tokens": [3, -1], "output_tokens": [1, 1]})
    with pytest.raises(TraceError, match="row 2: field 'prompt_tokens'"):
        workload_from_frame(frame)


def test_select_keeps_ragged_hashes_aligned():
    w = small_workload()
    picked = w.select(np.array([1, 3]))
    assert [r.prefix_hashes for r in picked] == [(0, 7), ()]
    assert picked.head(1)[0].prompt_tokens == 600


def test_dense_unit_ids_name_the_same_blocks_as_each_requests_own_chain():
    """`Workload.prefix_units` (one numbering of every request's chained units) gives equal block ids exactly
    where chaining each request's own prefix hashes gives equal hashes, at block sizes that divide the
    512-token unit, that do not, and that span several units; a unit's blocks get consecutive ids."""
    rng = np.random.default_rng(7)
    hashes = [rng.integers(0, 50, rng.integers(0, 7)) for _ in range(40)]
    prompts = [len(h) * 512 - int(rng.integers(0, 400)) if len(h) else int(rng.integers(1, 3000)) for h in hashes]
    hashes += [h[:k] for h in hashes[:10] for k in (1, 2, 3)]  # whole first units of earlier requests: shared
    prompts += [len(h) * 512 for h in hashes[40:]]
    w = Workload(arrival_time_s=np.arange(float(len(hashes))), prompt_tokens=np.array(prompts),
                 output_tokens=np.full(len(hashes), 5),
                 hash_offsets=np.concatenate([[0], np.cumsum([len(h) for h in hashes])]),
                 hash_values=np.concatenate(hashes).astype(np.int64), prefix_hash_tokens=512, name="chains")
    assert sum(1 for h in hashes if len(h)) > 30
    for block_size in (1, 16, 48, 512, 1024):
        dense_of: dict[int, int] = {}
        own_of: dict[int, int] = {}
        shared = 0
        for i, r in enumerate(w):
            assert r.prefix_hashes == tuple(int(h) for h in hashes[i])
            own = r.block_hashes(block_size)
            dense = r.block_hashes(block_size, w.prefix_units(i) if r.prefix_hashes else None)
            assert len(dense) == len(own)
            for d, h in zip(dense, own, strict=True):
                shared += h in own_of
                assert own_of.setdefault(h, d) == d and dense_of.setdefault(d, h) == h, (block_size, i)
        assert shared > 0 and len(dense_of) == len(own_of)
    first = w.head(1)[0].block_hashes(16, w.prefix_units(0))
    assert list(first[:32]) == list(range(first[0], first[0] + 32))
