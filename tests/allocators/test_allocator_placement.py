"""Buddy, first-fit and best-fit placement of contiguous slabs, with hand-computed offsets."""

import pytest

from allocators.placement import BestFitPlacement, BuddyPlacement, FirstFitPlacement, make_placement


def test_buddy_splits_a_non_power_of_two_arena_into_maximal_aligned_roots():
    b = BuddyPlacement(15728)
    assert b.free_extents() == [(0, 8192), (8192, 4096), (12288, 2048), (14336, 1024), (15360, 256),
                                (15616, 64), (15680, 32), (15712, 16)]
    assert b.largest_possible == 8192
    b.check()


def test_buddy_fits_exactly_seven_2048_slabs_in_15728():
    b = BuddyPlacement(15728)
    offsets = []
    while (placed := b.place(2048)) is not None:
        offsets.append(placed[0])
    # the smallest free block that holds a slab goes first: the 2048 root, then halves of the 4096 root
    assert offsets == [12288, 8192, 10240, 0, 2048, 4096, 6144]
    assert b.free_slots == 15728 - 7 * 2048 == 1392
    b.check()


def test_buddy_rounds_700_up_to_1024_splits_and_merges():
    b = BuddyPlacement(4096)
    assert b.physical_size(700) == 1024
    assert b.place(700) == (0, 1024)
    assert b.free_extents() == [(1024, 1024), (2048, 2048)]  # 4096 split twice, lower halves kept
    assert b.place(100) == (1024, 128)  # the smallest free block that holds it, split down to 128
    b.check()
    assert b.release(0) == 1024
    assert b.release(1024) == 128
    assert b.free_extents() == [(0, 4096)]  # every buddy merged back
    b.check()


def test_buddy_never_merges_across_roots():
    b = BuddyPlacement(24)  # roots 16 + 8
    assert b.place(8) == (16, 8)  # the smallest block that fits: the 8-slot root
    assert b.place(8) == (0, 8)
    b.release(16)
    b.release(0)
    assert b.free_extents() == [(0, 16), (16, 8)]
    b.check()


def test_first_fit_leaves_real_holes_and_coalesces_them():
    f = FirstFitPlacement(100)
    assert [f.place(30)[0] for _ in range(3)] == [0, 30, 60]
    f.release(30)
    assert f.free_extents() == [(30, 30), (90, 10)]
    assert f.place(35) is None  # 40 slots free, but no hole of 35
    assert f.place(5) == (30, 5)  # the lowest hole that fits
    f.release(0)
    f.release(30)
    assert f.free_extents() == [(0, 60), (90, 10)]
    f.check()


def test_best_fit_takes_the_smallest_hole():
    f = BestFitPlacement(100)
    for _ in range(3):
        f.place(30)
    f.release(30)
    assert f.place(5) == (90, 5)  # the 10-slot hole, not the 30-slot one
    assert f.place(30) == (30, 30)
    f.check()


def test_unknown_placement_lists_the_choices():
    with pytest.raises(ValueError, match="valid choices: buddy, first-fit, best-fit"):
        make_placement("worst-fit", 100)
