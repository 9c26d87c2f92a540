"""Orca's Max / Pow2 / Oracle slabs: sizing, hand-computed waste categories, fork, growth limits, errors, and
window layers kept as ring buffers of the window's size."""

import numpy as np
import pytest

from allocators import ALLOCATORS, make_allocator
from allocators.base import FREE_OWNER, OVERHEAD_OWNER, Copy, MemoryBreakdown
from allocators.catalog import get_model
from allocators.slab_layout import SlabLayout, ring_options, slab_layout
from tests.allocators.kv_group_fixture import KVGroupFixture


def parts(b: MemoryBreakdown) -> tuple[int, int, int, int, int]:
    return b.token_states, b.reservation, b.internal_frag, b.external_frag, b.free


def test_paper_capacity_check_max_fits_7_and_leaves_8_85_percent():
    a = make_allocator("contiguous-max", 15728, max_model_len=2048)
    n = 0
    while a.admit(n, 2048, final_tokens=2048) is not None:
        n += 1
    assert n == 7
    b = a.breakdown(waiting=True)
    assert parts(b) == (14336, 0, 0, 1392, 0)
    assert round(b.external_frag / b.capacity, 4) == 0.0885
    a.check_invariants()


def test_max_waste_categories_by_hand():
    a = make_allocator("contiguous-max", 4096, max_model_len=2048)
    a.admit(1, 500, final_tokens=700)
    # 500 tokens, 200 more it will write, 1348 of the 2048 slab never written; the other 2048 are free
    assert parts(a.breakdown()) == (500, 200, 1348, 0, 2048)
    assert parts(a.breakdown(waiting=True)) == (500, 200, 1348, 2048, 0)
    assert a.grow(1, 150) == ()
    assert parts(a.breakdown()) == (650, 50, 1348, 0, 2048)
    assert a.headroom(1) == 2048 - 650
    a.check_invariants()


def test_max_uses_max_total_tokens_when_given():
    a = make_allocator("contiguous-max", 4096, max_model_len=2048, placement="first-fit")
    a.admit(1, 10, final_tokens=40, max_total_tokens=100)
    assert a.headroom(1) == 90
    assert parts(a.breakdown()) == (10, 30, 60, 0, 3996)


def test_pow2_reserves_the_output_rounded_to_a_power_of_two():
    a = make_allocator("contiguous-pow2", 4096, placement="first-fit")
    a.admit(1, 10, final_tokens=35)  # true output 25 reserves 32
    assert a.headroom(1) == 32
    assert parts(a.breakdown()) == (10, 25, 7, 0, 4096 - 42)
    a.admit(2, 1500, final_tokens=2040)  # 1500 + 1024 capped at max_model_len 2048
    assert a.headroom(2) == 548


def test_oracle_with_buddy_rounding_charges_external_fragmentation():
    a = make_allocator("contiguous-oracle", 4096)
    a.admit(1, 300, final_tokens=700)  # 700-slot slab in a 1024-slot buddy block
    assert parts(a.breakdown()) == (300, 400, 0, 324, 3072)
    assert a.breakdown().used_blocks == 1024
    owners = a.memory_map()
    assert (owners[:700] == 1).all() and (owners[700:1024] == OVERHEAD_OWNER).all()
    assert (owners[1024:] == FREE_OWNER).all()
    assert a.free(1) == 1024
    assert parts(a.breakdown()) == (0, 0, 0, 0, 4096)


def test_first_fit_holes_count_as_external_only_while_someone_waits():
    a = make_allocator("contiguous-oracle", 100, placement="first-fit")
    for seq in range(3):
        a.admit(seq, 30, final_tokens=30)
    a.free(1)
    assert a.admit(3, 35, final_tokens=35) is None  # 40 slots free, no 35-slot hole
    assert parts(a.breakdown(waiting=True)) == (60, 0, 0, 40, 0)
    assert parts(a.breakdown()) == (60, 0, 0, 0, 40)
    a.check_invariants()


def test_grow_beyond_the_slab_fails_without_change():
    a = make_allocator("contiguous-oracle", 256, placement="best-fit")
    a.admit(1, 10, final_tokens=12)
    before = a.breakdown()
    assert a.grow(1, 3) is None
    assert a.breakdown() == before and a.num_tokens(1) == 10
    assert a.grow(1, 2) == () and a.headroom(1) == 0


def test_fork_copies_into_a_private_slab():
    a = make_allocator("contiguous-oracle", 256, placement="first-fit")
    a.admit(1, 10, final_tokens=20)
    assert a.fork(1, 2, final_tokens=30) == ((0, 20, 10),)
    assert a.num_tokens(2) == 10 and a.headroom(2) == 20
    assert parts(a.breakdown()) == (20, 30, 0, 0, 206)
    assert a.fork(1, 3, final_tokens=300) is None  # no room: nothing changed
    a.check_invariants()


def test_never_fits_explains():
    a = make_allocator("contiguous-oracle", 15728)
    assert a.never_fits(100, final_tokens=8192) is None
    reason = a.never_fits(100, final_tokens=9000)
    assert "needs 9000 slots (rounded up to 16384 by buddy placement) but the largest possible slab is 8192" in reason
    m = make_allocator("contiguous-max", 15728, max_model_len=2048)
    assert "reserves a slab of only 2048" in m.never_fits(100, final_tokens=3000)
    assert make_allocator("contiguous-max", 1000, placement="first-fit").never_fits(1, final_tokens=5)


@pytest.mark.parametrize("name", sorted(ALLOCATORS))
def test_constructor_validates_options(name):
    with pytest.raises(ValueError, match="--block-size must be a positive integer"):
        make_allocator(name, 1000, block_size=0)
    with pytest.raises(ValueError, match="watermark"):
        make_allocator(name, 1000, watermark=1.5)
    with pytest.raises(ValueError, match="capacity must be positive"):
        make_allocator(name, 0)


def test_make_allocator_lists_valid_names():
    with pytest.raises(ValueError, match="valid choices: contiguous-max, contiguous-pow2, contiguous-oracle"):
        make_allocator("slab", 100)
    with pytest.raises(ValueError, match="placement 'worst-fit'"):
        make_allocator("contiguous-max", 100, placement="worst-fit")


def test_memory_map_covers_every_slot():
    a = make_allocator("contiguous-pow2", 1000)
    a.admit(5, 3, final_tokens=8)
    owners = a.memory_map()
    assert owners.shape == (1000,) and owners.dtype == np.int64
    assert (owners == 5).sum() == 3 + 8  # output 5 rounded to 8
    assert (owners == OVERHEAD_OWNER).sum() == 16 - 11  # buddy rounding of 11 to 16


# -- sliding windows: ring-buffer window layers (`allocators.slab_layout`) --------------------------------------

OSS_LIKE = (KVGroupFixture("sliding_window", "sliding_window", 12, 128, 24576),
            KVGroupFixture("full", "full", 12, None, 24576))  # gpt-oss-20b's two groups: a slot each a token


def test_ring_slab_takes_the_window_not_the_length_in_window_layers():
    a = make_allocator("contiguous-oracle", 1000, max_model_len=4096, placement="first-fit", kv_groups=OSS_LIKE)
    assert a.capacity == 2000 and a.slots_per_token == 1
    a.admit(1, 100, final_tokens=400)  # slabs of 400 (full layers) and min(400, 128) = 128 (ring) slots
    assert parts(a.breakdown()) == (200, 328, 0, 0, 1472)
    assert a.headroom(1) == 0  # told every token while the ring fills
    a.grow(1, 50)  # the ring is full at 128: 150 + 128 token states
    assert parts(a.breakdown()) == (278, 250, 0, 0, 1472)
    assert a.headroom(1) == 250
    a.grow(1, 250)
    assert parts(a.breakdown()) == (528, 0, 0, 0, 1472)
    assert a.swap_extent(1) == (528, 2)  # one transfer a slab
    # the child's slabs follow the parent's (first-fit): each copied from its counterpart
    assert a.fork(1, 2, final_tokens=400) == (Copy(0, 528, 400), Copy(400, 928, 128))
    owners = a.memory_map()
    assert (owners[:528] == 1).all() and (owners[528:1056] == 2).all() and (owners[1056:] == FREE_OWNER).all()
    a.check_invariants()


def test_max_ring_slab_is_rounded_part_by_part_by_the_buddy():
    # max length 2000: a full-layer slab of 2000 slots in a buddy block of 2048 (48 external) and a ring of 128
    # in one of 128; one slab of 2128 would have taken 4096
    a = make_allocator("contiguous-max", 4096, max_model_len=2000, kv_groups=OSS_LIKE)
    a.admit(1, 500, final_tokens=700)
    assert parts(a.breakdown()) == (628, 200, 1300, 48, 8192 - 2048 - 128)
    owners = a.memory_map()
    assert (owners == 1).sum() == 2128 and (owners == OVERHEAD_OWNER).sum() == 48
    assert a.never_fits(2000, final_tokens=2000) is None
    a.check_invariants()


@pytest.mark.parametrize(("placement", "final"), [("buddy", 100), ("first-fit", 250), ("best-fit", 250)])
def test_a_request_places_both_slabs_or_neither(placement, final):
    # 800 slots (buddy: blocks of 512, 256, 32); 300 tokens take a full-layer slab of 300 (buddy: 512) and a ring
    # of 128, so 372 slots are left at 428 (buddy: blocks of 128 and 32)
    a = make_allocator("contiguous-oracle", 400, max_model_len=1000, placement=placement, kv_groups=OSS_LIKE)
    a.admit(1, 100, final_tokens=300)
    before, extents = parts(a.breakdown()), a.placement.free_extents()
    # its full-layer slab fits what is left (buddy: 128), its ring of 128 then does not: neither stays placed
    assert a.admit(2, 40, final_tokens=final) is None
    assert parts(a.breakdown()) == before and a.placement.free_extents() == extents
    a.check_invariants()
    a.free(1)
    assert parts(a.breakdown()) == (0, 0, 0, 0, 800) and a.placement.free_extents() == (
        [(0, 512), (512, 256), (768, 32)] if placement == "buddy" else [(0, 800)])
    a.check_invariants()


@pytest.mark.parametrize("placement", ["buddy", "first-fit"])
def test_slabs_that_fit_apart_but_not_together_never_fit(placement):
    a = make_allocator("contiguous-oracle", 128, max_model_len=1000, placement=placement, kv_groups=OSS_LIKE)
    reason = a.never_fits(200, final_tokens=200)  # 200 full-layer slots (buddy: 256) and a ring of 128, in 256
    assert reason == (f"contiguous-oracle: needs slabs of 200 and 128 slots, which an empty {placement} arena "
                      "does not hold together in a pool of 256")
    assert a.never_fits(100, final_tokens=100) is None  # 100 (buddy: 128) and 100 (128)


def test_window_layers_alone_take_one_slab():
    mistral_like = (KVGroupFixture("sliding_window", "sliding_window", 32, 64, 4096),)
    a = make_allocator("contiguous-max", 100, max_model_len=1000, kv_groups=mistral_like)
    a.admit(1, 10, final_tokens=200)  # a ring of 64 positions, no full layers
    assert parts(a.breakdown()) == (10, 54, 0, 0, 36) and a.swap_extent(1) == (10, 1)
    a.check_invariants()


def test_ring_options_only_for_contiguous_allocators_on_window_models():
    oss, llama = get_model("gpt-oss-20b"), get_model("llama-3-8b")
    assert ring_options(ALLOCATORS["contiguous-pow2"], oss) == {"kv_groups": oss.kv_groups()}
    assert ring_options(ALLOCATORS["vattention"], oss) == {}
    assert ring_options(ALLOCATORS["contiguous-max"], llama) == {}
    assert slab_layout(get_model("gemma-3-12b").kv_groups()) == SlabLayout(1, ((1024, 5),))
    assert slab_layout(get_model("mistral-7b").kv_groups()) == SlabLayout(0, ((4096, 1),))
